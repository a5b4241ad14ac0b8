"""Every rule against its fixtures, plus the severity logic fixtures cannot show.

Fixtures live in ``fixtures/<rule-id>/``: ``pass*.yaml`` is a full, valid fleet with no
finding of that rule; ``fail*.yaml`` marks each line a finding must point at with a
trailing ``#@ <rule-id> [error|warning]`` comment. Findings of the directory's rule on
unmarked lines fail the test too, so a finding that points at the wrong place is caught.

The targeted tests below build small fleets in Python: a false rejection of a tuple
vendors ship is as much a bug as a missed incompatibility (DESIGN.md).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from fleetspec.catalog import Catalog, load_catalog
from fleetspec.pipeline import CompileResult, compile_file, compile_text

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MARKER = re.compile(r"#@\s*([a-z0-9][a-z0-9.-]*)(?:\s+(error|warning)\b)?")

# Fixtures that describe correct behaviour the rules do not have yet. Strict: when the
# rule is fixed the test passes, xfail turns into a failure, and the entry must go.
KNOWN_BUGS: dict[str, str] = {}


def fixture_files() -> list[Path]:
    return sorted(FIXTURES.glob("*/*.yaml"))


def _param(path: Path) -> Any:
    rel = path.relative_to(FIXTURES).as_posix()
    marks = [pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[rel])] if rel in KNOWN_BUGS else []
    return pytest.param(path, id=rel, marks=marks)


def markers(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, rule id, severity or None) for every ``#@`` marker in the file."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        for m in MARKER.finditer(line):
            found.append((number, m.group(1), m.group(2)))
    return found


def describe(result: CompileResult) -> str:
    return "\n".join(f"  {f.line}:{f.column} {f.severity} {f.rule}: {f.message}" for f in result.located())


@pytest.mark.parametrize("path", [_param(p) for p in fixture_files() if p.name.startswith("fail")])
def test_fail_fixture(path: Path) -> None:
    rule_id = path.parent.name
    wanted = markers(path)
    assert any(rule == rule_id for _, rule, _ in wanted), f"{path.name} marks no '#@ {rule_id}' line"
    result = compile_file(path)
    located = result.located()
    for line, rule, severity in wanted:
        hits = [f for f in located if f.rule == rule and f.line == line]
        assert hits, f"no {rule} finding on line {line}; findings:\n{describe(result)}"
        if severity is not None:
            assert any(str(f.severity) == severity for f in hits), (
                f"{rule} on line {line} is not a {severity}; findings:\n{describe(result)}"
            )
    marked_lines = {line for line, rule, _ in wanted if rule == rule_id}
    stray = [f for f in located if f.rule == rule_id and f.line not in marked_lines]
    assert not stray, f"{rule_id} findings on unmarked lines:\n{describe(result)}"


@pytest.mark.parametrize("path", [_param(p) for p in fixture_files() if p.name.startswith("pass")])
def test_pass_fixture(path: Path) -> None:
    rule_id = path.parent.name
    assert not markers(path), "a pass fixture carries no #@ markers"
    result = compile_file(path)
    assert not [f for f in result.findings if f.rule == rule_id], describe(result)
    assert result.valid, f"pass fixtures must have no errors:\n{describe(result)}"


# --- building small fleets -----------------------------------------------------------


def group(hosts: str, model: str, stack: str, scheduler: str = "slurm", **extra: Any) -> dict[str, Any]:
    return {"hosts": hosts, "gpu": {"model": model, "count": extra.pop("count", 8)}, "stack": stack,
            "scheduler": scheduler, **extra}


def fleet(
    stacks: dict[str, dict[str, str]],
    *groups: dict[str, Any],
    fabric: str = "infiniband",
    slurm: dict[str, Any] | None = None,
    kubernetes: dict[str, Any] | None = None,
    suppress: list[str] | None = None,
) -> CompileResult:
    """Compile a fleet with one rack per node group (each on its own leaf)."""
    body: dict[str, Any] = {
        "os": "ubuntu-24.04",
        "stacks": stacks,
        "fabric": {"type": fabric},
        "racks": [{"name": f"r{i:02d}", "leaf": f"leaf-{i:02d}", "nodes": [g]} for i, g in enumerate(groups, 1)],
    }
    if any(g["scheduler"] == "slurm" for g in groups):
        body["slurm"] = {"version": "25.11.8", "controllers": "ctl-01", **(slurm or {})}
    if kubernetes is not None:
        body["kubernetes"] = kubernetes
    if suppress is not None:
        body["suppress"] = suppress
    doc = {"apiVersion": "fleetspec.io/v1alpha1", "kind": "Fleet", "metadata": {"name": "t"}, "spec": body}
    # Versions are strings here; dump them quoted, as a user must write them.
    text = yaml.dump(doc, Dumper=_QuotingDumper, sort_keys=False)
    return compile_text(text, "test.yaml")


class _QuotingDumper(yaml.SafeDumper):
    pass


_QuotingDumper.add_representer(
    str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style='"' if s[:1].isdigit() else None)
)


def of(result: CompileResult, rule: str) -> list[tuple[str, str]]:
    return [(str(f.severity), f.message) for f in result.findings if f.rule == rule]


def severities(result: CompileResult, rule: str) -> list[str]:
    return [sev for sev, _ in of(result, rule)]


def nv(driver: str, cuda: str, nccl: str, cudnn: str | None = None) -> dict[str, str]:
    s = {"driver": driver, "cuda": cuda, "nccl": nccl}
    if cudnn:
        s["cudnn"] = cudnn
    return s


# --- driver-too-old-for-cuda ------------------------------------------------------------


def test_cuda13_on_r570_is_an_error() -> None:
    r = fleet({"s": nv("570.124.06", "13.0.2", "2.28.3")}, group("h100-[01-02]", "h100-sxm", "s"))
    [(sev, message)] = of(r, "driver-too-old-for-cuda")
    assert sev == "error"
    assert ">= 580" in message and "Raise the driver" in message
    assert not r.valid


def test_cuda128_on_r535_is_a_minor_version_compatibility_warning() -> None:
    r = fleet({"s": nv("535.247.01", "12.8.1", "2.26.2")}, group("h100-[01-02]", "h100-sxm", "s"))
    [(sev, message)] = of(r, "driver-too-old-for-cuda")
    assert sev == "warning"
    assert "minor-version compatibility" in message and "570.124.06" in message
    assert r.valid


@pytest.mark.parametrize("cuda, driver, nccl", [
    ("13.0.0", "580.65.06", "2.28.3"), ("13.0.2", "580.95.05", "2.28.3"), ("12.8.0", "570.26", "2.26.2"),
    ("12.9.1", "575.57.08", "2.27.3"), ("13.2.2", "595.71.05", "2.29.7"),
])
def test_driver_at_the_release_minimum_passes(cuda: str, driver: str, nccl: str) -> None:
    r = fleet({"s": nv(driver, cuda, nccl)}, group("h100-[01-02]", "h100-sxm", "s"))
    assert of(r, "driver-too-old-for-cuda") == []


# --- driver-unsupported-gpu --------------------------------------------------------------


@pytest.mark.parametrize("driver", ["590.48.01", "595.71.05", "610.57.04", "620.10.01"])
def test_v100_on_r590_or_newer_is_an_error(driver: str) -> None:
    r = fleet({"s": nv(driver, "12.8.1", "2.26.2")}, group("v100-[01-02]", "v100", "s"))
    [(sev, message)] = of(r, "driver-unsupported-gpu")
    assert sev == "error" and "R580" in message


def test_v100_on_r580_passes() -> None:
    r = fleet({"s": nv("580.95.05", "12.8.1", "2.26.2")}, group("v100-[01-02]", "v100", "s"))
    assert of(r, "driver-unsupported-gpu") == []
    assert r.valid


# --- cuda-unsupported-gpu ----------------------------------------------------------------


def test_blackwell_with_cuda_126_is_an_error() -> None:
    r = fleet({"s": nv("570.124.06", "12.6.3", "2.26.2")}, group("b200-[01-02]", "b200", "s"))
    assert severities(r, "cuda-unsupported-gpu") == ["error"]


def test_v100_with_cuda_13_is_an_error() -> None:
    r = fleet({"s": nv("580.95.05", "13.0.2", "2.28.3")}, group("v100-[01-02]", "v100", "s"))
    [(sev, message)] = of(r, "cuda-unsupported-gpu")
    assert sev == "error" and "CUDA 12.x" in message


@pytest.mark.parametrize("model, cuda", [("b200", "12.8.0"), ("b300", "12.9.1"), ("v100", "12.9.1")])
def test_cuda_inside_the_gpu_window_passes(model: str, cuda: str) -> None:
    r = fleet({"s": nv("580.95.05", cuda, "2.26.2")}, group("n-[01-02]", model, "s"))
    assert of(r, "cuda-unsupported-gpu") == []


# --- nccl-cuda-mismatch ------------------------------------------------------------------


@pytest.mark.parametrize("nccl, bad", [("2.26.2", True), ("2.27.6", True), ("2.27.7", False), ("2.28.3", False)])
def test_nccl_needs_a_cuda13_build(nccl: str, bad: bool) -> None:
    r = fleet({"s": nv("580.95.05", "13.0.2", nccl)}, group("h200-[01-02]", "h200", "s"))
    assert severities(r, "nccl-cuda-mismatch") == (["error"] if bad else [])


def test_old_nccl_with_cuda12_passes() -> None:
    r = fleet({"s": nv("570.124.06", "12.8.1", "2.26.2")}, group("h200-[01-02]", "h200", "s"))
    assert of(r, "nccl-cuda-mismatch") == []


# --- cudnn-cuda-mismatch -----------------------------------------------------------------


def test_cudnn_9_10_2_with_cuda_13_is_an_error() -> None:
    r = fleet({"s": nv("580.95.05", "13.0.2", "2.28.3", cudnn="9.10.2")}, group("h100-[01-02]", "h100-sxm", "s"))
    assert severities(r, "cudnn-cuda-mismatch") == ["error"]


def test_cudnn_9_17_0_with_cuda_13_2_is_a_warning() -> None:
    r = fleet({"s": nv("595.71.05", "13.2.2", "2.29.7", cudnn="9.17.0")}, group("h100-[01-02]", "h100-sxm", "s"))
    [(sev, message)] = of(r, "cudnn-cuda-mismatch")
    assert sev == "warning" and "minor-version compatibility" in message
    assert r.valid


@pytest.mark.parametrize("cuda, driver", [("13.0.2", "580.95.05"), ("13.1.1", "590.48.01"), ("12.9.1", "575.57.08")])
def test_cudnn_9_17_0_with_listed_cuda_passes(cuda: str, driver: str) -> None:
    r = fleet({"s": nv(driver, cuda, "2.28.3", cudnn="9.17.0")}, group("h100-[01-02]", "h100-sxm", "s"))
    assert of(r, "cudnn-cuda-mismatch") == []


# --- rccl-rocm-mismatch ------------------------------------------------------------------


@pytest.mark.parametrize("stack, expected", [
    ({"rocm": "7.0.2", "rccl": "2.22.3"}, ["error"]),
    ({"rocm": "6.4.1", "rccl": "2.26.6"}, ["error"]),
    ({"rocm": "7.0.2", "rccl": "2.26.6"}, []),
    ({"rocm": "7.0.2"}, []),
    ({"rocm": "6.4.1", "rccl": "2.22.3"}, []),
    ({"amdgpu": "30.10", "rocm": "7.2.2", "rccl": "2.27.7"}, ["error"]),
    ({"amdgpu": "6.4.1", "rocm": "7.0.2", "rccl": "2.26.6"}, ["warning"]),
    ({"amdgpu": "30.30", "rocm": "7.2.2", "rccl": "2.27.7"}, []),
])
def test_rccl_and_amdgpu_against_rocm(stack: dict[str, str], expected: list[str]) -> None:
    r = fleet({"s": stack}, group("mi300x-[01-02]", "mi300x", "s"))
    assert severities(r, "rccl-rocm-mismatch") == expected


# --- mixed-generation-partition ----------------------------------------------------------


def _mixed(**settings: Any) -> CompileResult:
    return fleet(
        {"s": nv("580.95.05", "13.0.2", "2.28.3")},
        group("a100-[01-02]", "a100", "s", partition="train"),
        group("h100-[01-02]", "h100-sxm", "s", partition="train"),
        slurm={"partitions": {"train": settings}} if settings else None,
    )


def test_mixed_generations_are_an_error() -> None:
    r = _mixed()
    assert severities(r, "mixed-generation-partition") == ["error"]
    assert not r.valid


def test_mixed_generations_allowed_are_a_warning() -> None:
    r = _mixed(allow_mixed_generations=True)
    assert severities(r, "mixed-generation-partition") == ["warning"]
    assert r.valid


def test_mixed_amd_generations_message_speaks_of_amd() -> None:
    r = fleet({"s": {"rocm": "7.0.2"}},
              group("mi300x-[01-02]", "mi300x", "s", partition="train"),
              group("mi355x-[01-02]", "mi355x", "s", partition="train"))
    [(sev, message)] = of(r, "mixed-generation-partition")
    assert sev == "error"
    assert "NVLink" not in message and "NCCL " not in message


# --- slurm-security-release messages -----------------------------------------------------


def test_end_of_support_message_reads_well() -> None:
    r = fleet({"s": nv("580.95.05", "13.0.2", "2.28.3")}, group("h100-[01-02]", "h100-sxm", "s"),
              slurm={"version": "24.05.8"})
    [(sev, message)] = of(r, "slurm-security-release")
    assert sev == "warning"
    assert "ended ended" not in message


# --- suppression -------------------------------------------------------------------------


def _ethernet(suppress: list[str] | None) -> CompileResult:
    return fleet({"s": nv("580.95.05", "13.0.2", "2.28.3")}, group("h100-[01-04]", "h100-sxm", "s"),
                 fabric="ethernet", suppress=suppress)


def test_suppressing_a_warning_removes_it() -> None:
    assert severities(_ethernet(None), "tcp-fallback-risk") == ["warning"]
    r = _ethernet(["tcp-fallback-risk"])
    assert of(r, "tcp-fallback-risk") == []
    assert [f.rule for f in r.suppressed] == ["tcp-fallback-risk"]
    assert r.valid and not r.findings


def test_suppressing_a_rule_that_also_errs_removes_only_its_warnings() -> None:
    stacks = {"old": nv("535.247.01", "12.8.1", "2.26.2"), "cu13": nv("570.124.06", "13.0.2", "2.28.3")}
    r = fleet(stacks, group("h100-[01-02]", "h100-sxm", "old"), group("h200-[01-02]", "h200", "cu13"),
              suppress=["driver-too-old-for-cuda"])
    assert severities(r, "driver-too-old-for-cuda") == ["error"]
    assert [(f.rule, str(f.severity)) for f in r.suppressed] == [("driver-too-old-for-cuda", "warning")]


def test_suppressing_an_error_id_does_not_suppress_it() -> None:
    r = fleet({"s": nv("580.95.05", "13.0.2", "2.28.3"), "a": {"rocm": "7.0.2"}},
              group("h100-[01-02]", "h100-sxm", "s", partition="train"),
              group("mi300x-[01-02]", "mi300x", "a", partition="train"),
              suppress=["mixed-vendor-partition"])
    assert severities(r, "mixed-vendor-partition") == ["error"]
    assert not r.valid
    notes = [m for sev, m in of(r, "schema") if sev == "warning"]
    assert any("errors cannot be suppressed" in m and "mixed-vendor-partition" in m for m in notes), notes
    assert r.suppressed == ()


def test_suppressing_an_unknown_id_says_so() -> None:
    r = _ethernet(["tcp-fallback"])
    assert severities(r, "tcp-fallback-risk") == ["warning"]
    assert any("not a rule id" in m for _, m in of(r, "schema"))


# --- false rejections: tuples vendors ship must produce no error --------------------------

CU13 = nv("580.95.05", "13.0.2", "2.28.3", cudnn="9.17.0")
SHIPPED = [
    ("h100-sxm", CU13),
    ("h200", CU13),
    ("b200", CU13),
    ("gb200", CU13),
    ("a100", CU13),
    ("b200", nv("570.124.06", "12.8.1", "2.26.2")),
    ("h100-sxm", nv("570.124.06", "12.8.1", "2.26.2", cudnn="9.10.2")),
    ("b300", nv("575.57.08", "12.9.1", "2.27.3")),
    ("h100-sxm", nv("535.104.05", "12.2.2", "2.18.5", cudnn="8.9.5")),
    ("h100-sxm", nv("550.54.15", "12.4.1", "2.20.5", cudnn="9.0.0")),
    ("v100", nv("580.95.05", "12.8.1", "2.26.2")),
    ("gb300", nv("580.126.20", "13.0.2", "2.28.9")),
    ("mi355x", {"rocm": "7.0.2"}),
    ("mi355x", {"amdgpu": "30.10", "rocm": "7.0.2", "rccl": "2.26.6"}),
    ("mi300x", {"amdgpu": "6.4.1", "rocm": "6.4.1"}),
    ("mi325x", {"rocm": "6.3.1"}),
]


@pytest.mark.parametrize("model, stack", SHIPPED,
                         ids=[f"{m}-{'-'.join(s.values())}" for m, s in SHIPPED])
def test_shipped_tuples_produce_no_error(model: str, stack: dict[str, str]) -> None:
    r = fleet({"s": stack}, group("n-[01-02]", model, "s"))
    errors = [f for f in r.located() if str(f.severity) == "error"]
    assert not errors, describe(r)
    assert r.valid


def test_shipped_tuples_on_kubernetes_with_the_gpu_operator() -> None:
    r = fleet({"s": nv("580.173.02", "13.0.2", "2.28.3", cudnn="9.17.0")},
              group("b200-[01-02]", "b200", "s", scheduler="kubernetes"),
              group("h200-[01-02]", "h200", "s", scheduler="kubernetes"),
              kubernetes={"version": "1.36", "gpu_operator": {"version": "v26.7.0", "driver": "operator"},
                          "queueing": "kueue", "gang": "kueue"})
    assert r.valid and not r.findings, describe(r)


def test_unknown_stack_suggests_the_closest_name() -> None:
    [(sev, message)] = of(compile_file(FIXTURES / "unknown-stack" / "fail.yaml"), "unknown-stack")
    assert sev == "error" and "Did you mean 'hopper-cu13'?" in message


AMD_K8S_FIXTURE = FIXTURES / "gpu-operator-unsupported" / "fail_amd_k8s.yaml"


def amd_operator_catalog(k8s: list[str | None], unconfirmed: tuple[str, ...] = ()) -> Catalog:
    """The shipped catalog with AMD GPU Operator v1.5.1's Kubernetes support replaced: the
    real entry has a floor only and no unconfirmed fact, so the ceiling and the warning for
    an unconfirmed fact need data of their own."""
    data = copy.deepcopy(load_catalog()._data)
    entry = data["platform"]["amd_gpu_operator"]["releases"]["v1.5.1"]
    entry["k8s"] = k8s
    if unconfirmed:
        entry["unconfirmed"] = list(unconfirmed)
    return Catalog(data)


@pytest.mark.parametrize(("k8s", "cluster", "expected"), [
    (["1.29", "1.32"], "1.33", ["error"]),  # above the ceiling
    (["1.29", "1.32"], "1.32", []),  # the ceiling itself is supported
    (["1.29", None], "1.37", []),  # no ceiling
    (["1.29", "1.32"], "1.28", ["error"]),  # below the floor
])
def test_amd_gpu_operator_kubernetes_range(k8s: list[str | None], cluster: str, expected: list[str]) -> None:
    text = AMD_K8S_FIXTURE.read_text().replace('version: "1.28"', f'version: "{cluster}"')
    result = compile_text(text, catalog=amd_operator_catalog(k8s))
    assert severities(result, "gpu-operator-unsupported") == expected, describe(result)


def test_an_unconfirmed_amd_gpu_operator_range_only_warns() -> None:
    result = compile_text(AMD_K8S_FIXTURE.read_text(), catalog=amd_operator_catalog(["1.29", None], ("k8s",)))
    assert severities(result, "gpu-operator-unsupported") == ["warning"], describe(result)
    assert "unconfirmed catalog fact" in of(result, "gpu-operator-unsupported")[0][1]


def test_an_extrapolated_driver_revision_and_an_unpublished_firmware_version_warn() -> None:
    """#24: a pin whose version shape no published artefact shows is a warning, not a silent guess."""
    from fleetspec.compile.ir import StackTuple
    from fleetspec.packages import unconfirmed_pins

    assert [k for k, _ in unconfirmed_pins(StackTuple("s", "nvidia", driver="580.178.04"), "ubuntu-24.04")] == ["driver"]
    for seen in ("580.126.20", "580.159.04", "580.173.02"):
        assert unconfirmed_pins(StackTuple("s", "nvidia", driver=seen), "ubuntu-24.04") == [], seen
    # Between the last build seen with the tools at `1` and the first seen at `1ubuntu1`.
    [(key, why)] = unconfirmed_pins(StackTuple("s", "nvidia", driver="580.150.01"), "ubuntu-24.04")
    assert key == "driver" and "fabric manager" in why and "580.126.20" in why and "580.159.04" in why
    assert unconfirmed_pins(StackTuple("s", "amd", rocm="7.0.2", amdgpu="30.10.2"), "ubuntu-24.04") == []
    [(key, why)] = unconfirmed_pins(StackTuple("s", "amd", rocm="7.0.2", amdgpu="30.30.3"), "ubuntu-24.04")
    assert key == "amdgpu" and "30.30.3.*" in why
