"""compare() over fact sets built from the real H200 node's outputs, and drifted copies of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetspec.compile.ir import Fleet
from fleetspec.pipeline import compile_file, compile_text
from fleetspec.verify.compare import Status, UnknownHostError, compare
from fleetspec.verify.versions import at_precision, match_version, upstream
from tests.verify.h200_facts import VENV_NCCL, h200_facts, variant

SPEC = Path(__file__).parent / "specs" / "h200.yaml"
SYSTEM_NCCL = "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3"


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    compiled = compile_file(SPEC)
    assert compiled.valid, compiled.located()
    return compiled.fleet


@pytest.fixture
def facts() -> dict:
    return h200_facts()


def by_component(report, hostname: str) -> dict:
    node = next(n for n in report.nodes if n.hostname == hostname)
    return {c.component: c for c in node.checks}


def two_nodes(first: dict, second: dict) -> dict:
    return {"h200-001": first, "h200-002": variant(second, hostname="h200-002")}


# --- conformance and the shadow NCCL ------------------------------------------------------


def test_the_fixture_node_conforms_with_one_shadow_warning(fleet: Fleet, facts: dict) -> None:
    report = compare(fleet, two_nodes(facts, facts))
    assert report.conforms
    checks = by_component(report, "h200-001")
    for component in ("facts", "driver", "kernel-module", "gpu-model", "gpu-count", "cuda", "cudnn", "nccl"):
        assert checks[component].status is Status.OK, checks[component]
    assert checks["driver"].found == "580.159.04"
    assert checks["nccl"].paths == (SYSTEM_NCCL,)
    (partition,) = report.partitions
    assert partition.checks[0].status is Status.OK
    assert partition.expected == "driver=580.159.04,cuda=13.0,cudnn=9.19.0,nccl=2.28.3"
    assert report.nodes[0].fingerprint == partition.expected


def test_a_shadow_nccl_in_a_venv_is_a_warning_with_its_path(fleet: Fleet, facts: dict) -> None:
    shadow = by_component(compare(fleet, two_nodes(facts, facts)), "h200-001")["nccl-shadow"]
    assert shadow.status is Status.WARNING
    assert shadow.paths == (VENV_NCCL,)
    assert "2.28.9" in shadow.message and "/opt/torch/.venv" in shadow.message
    assert shadow.found == "2.28.9"


def test_a_venv_copy_at_the_pinned_version_is_no_warning(fleet: Fleet, facts: dict) -> None:
    same = variant(facts, **{"nccl.libraries.1.version": "2.28.3"})
    checks = by_component(compare(fleet, two_nodes(same, same)), "h200-001")
    assert "nccl-shadow" not in checks


# --- drift -------------------------------------------------------------------------------


def test_a_node_off_the_tuple_is_drift_naming_expected_and_found(fleet: Fleet, facts: dict) -> None:
    old = variant(facts, **{"nvidia.driver_version": "580.95.05", "nvidia.smi_driver_version": "580.95.05"})
    report = compare(fleet, two_nodes(facts, old))
    assert not report.conforms
    driver = by_component(report, "h200-002")["driver"]
    assert (driver.status, driver.expected, driver.found) == (Status.DRIFT, "580.159.04", "580.95.05")
    assert by_component(report, "h200-001")["driver"].status is Status.OK
    assert [n.conforms for n in report.nodes] == [True, False]


def test_a_driver_upgraded_without_reboot_is_drift(fleet: Fleet, facts: dict) -> None:
    stale = variant(facts, **{"nvidia.smi_driver_version": "580.173.02"})
    driver = by_component(compare(fleet, two_nodes(stale, facts)), "h200-001")["driver"]
    assert driver.status is Status.DRIFT
    assert "580.173.02" in driver.found and "reboot" in driver.message


def test_a_node_with_a_different_gpu_count(fleet: Fleet, facts: dict) -> None:
    gpu = facts["nvidia"]["gpus"][0]
    two = variant(facts, **{"nvidia.gpus": [gpu, dict(gpu, index=1, uuid="GPU-other")]})
    count = by_component(compare(fleet, two_nodes(facts, two)), "h200-002")["gpu-count"]
    assert (count.status, count.expected, count.found) == (Status.DRIFT, "1", "2")


def test_a_node_with_another_gpu_model(fleet: Fleet, facts: dict) -> None:
    h100 = variant(facts, **{"nvidia.gpus.0.name": "NVIDIA H100 80GB HBM3"})
    model = by_component(compare(fleet, two_nodes(facts, h100)), "h200-002")["gpu-model"]
    assert model.status is Status.DRIFT
    assert "NVIDIA H100 80GB HBM3" in model.found and "h200" in model.message


def test_a_partition_split_across_two_nccl_versions(fleet: Fleet, facts: dict) -> None:
    libs = facts["nccl"]["libraries"]
    newer = variant(facts, **{"nccl.libraries": [dict(libs[0], version="2.28.9", path="/usr/lib/x86_64-linux-gnu/"
                                                                                      "libnccl.so.2.28.9")]})
    report = compare(fleet, two_nodes(facts, newer))
    nccl = by_component(report, "h200-002")["nccl"]
    assert (nccl.status, nccl.found) == (Status.DRIFT, "2.28.9")
    (partition,) = report.partitions
    (split,) = partition.checks
    assert split.component == "consistency" and split.status is Status.DRIFT
    assert "nccl=2.28.3 on h200-001" in split.message and "nccl=2.28.9 on h200-002" in split.message


def test_a_missing_library_is_drift(fleet: Fleet, facts: dict) -> None:
    no_cudnn = variant(facts, **{"cudnn.libraries": [], "cudnn.versions": []})
    cudnn = by_component(compare(fleet, two_nodes(facts, no_cudnn)), "h200-002")["cudnn"]
    assert (cudnn.status, cudnn.found) == (Status.DRIFT, "absent")
    assert cudnn.message.startswith("missing: no system libcudnn")


def test_nccl_only_in_a_venv_is_missing_not_ok(fleet: Fleet, facts: dict) -> None:
    venv_only = variant(facts, **{"nccl.libraries": [facts["nccl"]["libraries"][1]]})
    nccl = by_component(compare(fleet, two_nodes(facts, venv_only)), "h200-002")["nccl"]
    assert nccl.status is Status.DRIFT and VENV_NCCL in nccl.message


def test_a_node_without_facts_is_missing_and_an_unreachable_one_says_why(fleet: Fleet, facts: dict) -> None:
    report = compare(fleet, {"h200-001": facts})
    facts_check = by_component(report, "h200-002")["facts"]
    assert (facts_check.status, facts_check.message) == (Status.DRIFT, "missing: no facts for this host")
    report = compare(fleet, {"h200-001": facts}, unreachable={"h200-002": "ssh: connect: Connection refused"})
    assert by_component(report, "h200-002")["facts"].message == "unreachable: ssh: connect: Connection refused"
    assert report.nodes[1].fingerprint is None
    assert report.partitions[0].checks[0].status is Status.OK  # one node with facts cannot be split


def test_a_document_that_is_not_facts_is_drift(fleet: Fleet, facts: dict) -> None:
    failed = {"schema": "fleetspec.io/facts/v1", "errors": ["collector failed: OSError: boom"]}
    report = compare(fleet, {"h200-001": {"hostname": "x"}, "h200-002": failed})
    assert "not a facts document" in by_component(report, "h200-001")["facts"].message
    assert "collector failed: OSError: boom" in by_component(report, "h200-002")["facts"].message


def test_this_machine_has_no_nvidia_driver_shape(fleet: Fleet, facts: dict) -> None:
    bare = variant(facts, **{"nvidia.driver_version": "absent", "nvidia.kernel_module": "absent",
                             "nvidia.smi_driver_version": "absent", "nvidia.gpus": [], "nvidia.present": False})
    checks = by_component(compare(fleet, two_nodes(bare, facts)), "h200-001")
    assert checks["driver"].status is Status.DRIFT and "no NVIDIA driver" in checks["driver"].message
    assert (checks["gpu-count"].status, checks["gpu-count"].found) == (Status.DRIFT, "0")
    assert "kernel-module" not in checks


# --- versions compared by meaning ------------------------------------------------------------


def test_nvcc_shows_major_minor_only_and_says_so(facts: dict) -> None:
    fleet = compile_text(SPEC.read_text().replace('cuda: "13.0"', 'cuda: "13.0.2"')).fleet
    cuda = by_component(compare(fleet, two_nodes(facts, facts)), "h200-001")["cuda"]
    assert cuda.status is Status.OK
    assert "nvcc" in cuda.message and "as far as it can show" in cuda.message


def test_version_json_within_a_pinned_series(fleet: Fleet, facts: dict) -> None:
    toolkit = {"path": "/usr/local/cuda-13.0", "version": "13.0.2", "components": {"cuda_cudart": "13.0.96"}}
    with_json = variant(facts, **{"cuda.toolkits": [toolkit]})
    report = compare(fleet, two_nodes(with_json, facts))
    cuda = by_component(report, "h200-001")["cuda"]
    assert (cuda.status, cuda.found) == (Status.OK, "13.0.2")
    assert "version.json" in cuda.message
    # 13.0.2 (version.json) and 13.0 (nvcc) agree at the spec's precision: no split.
    assert report.partitions[0].checks[0].status is Status.OK


def test_another_cuda_toolkit_is_drift(fleet: Fleet, facts: dict) -> None:
    toolkit = {"path": "/usr/local/cuda-12.8", "version": "12.8.1", "components": {}}
    old = variant(facts, **{"cuda.toolkits": [toolkit], "cuda.default_toolkit": "/usr/local/cuda-12.8"})
    cuda = by_component(compare(fleet, two_nodes(old, facts)), "h200-001")["cuda"]
    assert (cuda.status, cuda.found) == (Status.DRIFT, "12.8.1")


def test_a_package_version_stands_in_when_the_library_was_not_loaded(fleet: Fleet, facts: dict) -> None:
    package = {"manager": "dpkg", "name": "libnccl2", "version": "2.28.3-1+cuda13.0"}
    unloaded = variant(facts, **{"nccl.libraries.0.version": "not-collected", "nccl.libraries.0.package": package})
    nccl = by_component(compare(fleet, two_nodes(unloaded, facts)), "h200-001")["nccl"]
    assert (nccl.status, nccl.found) == (Status.OK, "2.28.3-1+cuda13.0")
    assert "package libnccl2" in nccl.message


@pytest.mark.parametrize(
    ("expected", "found", "agreement"),
    [
        ("13.0.2", "13.0.2", "exact"),
        ("13.0", "13.0.2", "series"),
        ("13.0.2", "13.0", "partial"),
        ("2.28.3", "2.28.3-1+cuda13.0", "exact"),
        ("25.11", "25.11.0", "exact"),
        ("580.95.05", "580.95.5", "exact"),
        ("2.28.3", "2.28.9", None),
        ("13.0.2", "12.8", None),
        ("580.159.04", "absent", None),
    ],
)
def test_match_version(expected: str, found: str, agreement: str | None) -> None:
    match = match_version(expected, found)
    assert (match.agreement if match else None) == agreement


def test_upstream_and_precision() -> None:
    assert upstream("1:6.16.13.30300300-2327507.22.04") == "6.16.13.30300300"
    assert upstream("not-collected") is None
    assert at_precision("13.0", "13.0.2") == "13.0"
    assert at_precision("2.28.3", "2.28.3-1+cuda13.0") == "2.28.3"


# --- package holds --------------------------------------------------------------------------


def dpkg_section(held: bool) -> dict:
    names = ["nvidia-driver-580-open", "libnvidia-compute-580", "libnccl2", "libnccl-dev"]
    installed = [{"name": n, "version": "x", "status": "hi" if held else "ii", "held": held} for n in names]
    return {"manager": "dpkg", "installed": installed, "holds": names if held else [], "errors": []}


def test_a_pinned_package_not_held_is_a_warning(fleet: Fleet, facts: dict) -> None:
    loose = variant(facts, packages=dpkg_section(held=False))
    holds = by_component(compare(fleet, two_nodes(loose, facts)), "h200-001")["package-holds"]
    assert holds.status is Status.WARNING
    assert "libnccl2" in holds.found and "nvidia-driver-580-open" in holds.found
    held = variant(facts, packages=dpkg_section(held=True))
    assert by_component(compare(fleet, two_nodes(held, facts)), "h200-001")["package-holds"].status is Status.OK


# --- Kubernetes-owned nodes ------------------------------------------------------------------

K8S_SPEC = """
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {name: k8s-h200}
spec:
  os: ubuntu-24.04
  stacks:
    hopper: {driver: "580.159.04", cuda: "13.0", cudnn: "9.19.0", nccl: "2.28.3"}
  racks:
    - name: r01
      nodes:
        - {hosts: "k8s-[01-02]", gpu: {model: h200, count: 1}, stack: hopper, scheduler: kubernetes}
  kubernetes:
    version: "1.33"
    gpu_operator: {version: v25.3.4, driver: host}
    queueing: kueue
    gang: kueue
"""


def test_a_kubernetes_node_checks_the_driver_and_names_what_lives_in_images(facts: dict) -> None:
    compiled = compile_text(K8S_SPEC)
    assert compiled.fleet is not None, compiled.located()
    no_libs = variant(facts, **{"nccl.libraries": [], "cudnn.libraries": []})
    report = compare(compiled.fleet, {"k8s-01": no_libs, "k8s-02": facts})
    assert report.conforms
    checks = by_component(report, "k8s-01")
    assert checks["driver"].status is Status.OK
    for component in ("cuda", "cudnn", "nccl"):
        assert checks[component].status is Status.NOT_APPLICABLE
        assert "container images" in checks[component].message
    assert checks["container-toolkit"].status is Status.NOT_APPLICABLE
    assert "nccl-shadow" not in checks
    off = variant(facts, **{"nvidia.driver_version": "570.195.03"})
    assert by_component(compare(compiled.fleet, {"k8s-01": off, "k8s-02": facts}), "k8s-01")["driver"].status \
        is Status.DRIFT


# --- scope ---------------------------------------------------------------------------------------


def test_hosts_limits_the_check_and_unknown_names_are_refused(fleet: Fleet, facts: dict) -> None:
    report = compare(fleet, {"h200-002": facts, "stray-01": facts}, hosts=["h200-002"])
    assert [n.hostname for n in report.nodes] == ["h200-002"]
    assert report.unknown_hosts == ("stray-01",)
    with pytest.raises(UnknownHostError):
        compare(fleet, {}, hosts=["stray-01"])


# --- CUDA toolkit components (#24 item 12) --------------------------------------------------


def test_cuda_toolkit_components_that_floated_are_drift_and_unknown_releases_warn(facts: dict) -> None:
    """cuda-toolkit-12-8 depends on its components with >=: a node whose cuda-nvcc-12-8 moved to
    a later update than 12.8.1's (12.8.93-1) is drift; a release without a known component
    manifest (13.0 here) says plainly that its components are not held."""
    fleet_128 = compile_text(SPEC.read_text().replace('cuda: "13.0"', 'cuda: "12.8.1"'), "h200.yaml").fleet
    assert fleet_128 is not None and fleet_128.stacks[0].cuda == "12.8.1"
    packages = {"manager": "dpkg", "holds": [], "errors": [], "installed": [
        {"name": "cuda-nvcc-12-8", "version": "12.8.94-1", "held": True},
        {"name": "cuda-cudart-12-8", "version": "12.8.90-1", "held": True}]}
    moved = variant(facts, packages=packages)
    check = by_component(compare(fleet_128, two_nodes(moved, moved)), "h200-001")["cuda-components"]
    assert check.status is Status.DRIFT and "cuda-nvcc-12-8 12.8.94-1 (pin 12.8.93-1)" in check.message
    packages["installed"][0]["version"] = "12.8.93-1"
    moved = variant(facts, packages=packages)
    check = by_component(compare(fleet_128, two_nodes(moved, moved)), "h200-001")["cuda-components"]
    assert check.status is Status.OK and "other components are not held" in check.message
    fleet_130 = compile_file(SPEC).fleet
    check = by_component(compare(fleet_130, two_nodes(facts, facts)), "h200-001")["cuda-components"]
    assert check.status is Status.WARNING and "not held" in check.message


# --- the RDMA user space on an InfiniBand/RoCE fabric (#24 item 11) -----------------------


def test_a_node_on_an_infiniband_fabric_without_the_verbs_provider_is_drift(facts: dict) -> None:
    text = SPEC.read_text().replace("  racks:\n    - name: r01\n",
                                    "  fabric:\n    type: infiniband\n    spines: [spine-01]\n"
                                    "  racks:\n    - name: r01\n      leaf: leaf-01\n")
    compiled = compile_text(text, "h200.yaml")
    assert compiled.fleet is not None and compiled.fleet.fabric is not None, compiled.located()
    installed = [{"name": "rdma-core", "version": "50.0-2ubuntu0.2", "held": False},
                 {"name": "libibverbs1", "version": "50.0-2ubuntu0.2", "held": False}]
    packages = {"manager": "dpkg", "holds": [], "errors": [], "installed": installed}
    node = variant(facts, packages=packages)
    check = by_component(compare(compiled.fleet, two_nodes(node, node)), "h200-001")["rdma-userspace"]
    assert check.status is Status.DRIFT and "ibverbs-providers" in check.found and "sockets" in check.message
    installed.append({"name": "ibverbs-providers", "version": "50.0-2ubuntu0.2", "held": False})
    node = variant(facts, packages=packages)
    check = by_component(compare(compiled.fleet, two_nodes(node, node)), "h200-001")["rdma-userspace"]
    assert check.status is Status.OK
    # Ethernet (the fixture spec has no fabric): no such check.
    assert "rdma-userspace" not in by_component(compare(compile_file(SPEC).fleet, two_nodes(node, node)), "h200-001")


# --- DCGM (#24 item 11) ----------------------------------------------------------------------


def test_dcgm_is_checked_at_its_pin_for_the_drivers_cuda_major(facts: dict) -> None:
    compiled = compile_text(SPEC.read_text().replace('nccl: "2.28.3"', 'nccl: "2.28.3"\n      dcgm: "4.5.2"'),
                            "h200.yaml")
    assert compiled.valid, compiled.located()
    fleet = compiled.fleet
    assert fleet is not None and fleet.stacks[0].dcgm == "4.5.2"
    installed = [{"name": "datacenter-gpu-manager-4-core", "version": "1:4.7.0-1", "held": True},
                 {"name": "datacenter-gpu-manager-4-cuda13", "version": "1:4.5.2-1", "held": True}]
    packages = {"manager": "dpkg", "holds": [], "errors": [], "installed": installed}
    node = variant(facts, packages=packages)
    check = by_component(compare(fleet, two_nodes(node, node)), "h200-001")["dcgm"]
    assert check.status is Status.DRIFT and "datacenter-gpu-manager-4-core 1:4.7.0-1" in check.found
    installed[0]["version"] = "1:4.5.2-1"
    node = variant(facts, packages=packages)
    assert by_component(compare(fleet, two_nodes(node, node)), "h200-001")["dcgm"].status is Status.OK


def test_a_dcgm_release_fleetspec_cannot_name_is_a_located_error() -> None:
    compiled = compile_text(SPEC.read_text().replace('nccl: "2.28.3"', 'nccl: "2.28.3"\n      dcgm: "3.3.6"'),
                            "h200.yaml")
    errors = [f for f in compiled.located() if f.rule == "package-pin" and f.severity.name == "ERROR"]
    assert errors and "DCGM 4" in errors[0].message and errors[0].line == 14, compiled.located()


def test_ubuntu_nodes_say_they_got_the_desktop_driver_set_and_debian_nodes_do_not(facts: dict) -> None:
    """#24 item 11: no compute-only set is confirmed in NVIDIA's Ubuntu repository, so the
    node keeps the desktop metapackage and verify says so (a warning); Debian's nodes get
    nvidia-driver-cuda and no such warning."""
    ubuntu = by_component(compare(compile_file(SPEC).fleet, two_nodes(facts, facts)), "h200-001")
    assert ubuntu["driver-set"].status is Status.WARNING and "nvidia-driver-580-open" in ubuntu["driver-set"].message
    debian = compile_text(SPEC.read_text().replace("os: ubuntu-24.04", "os: debian-12"), "h200.yaml").fleet
    assert "driver-set" not in by_component(compare(debian, two_nodes(facts, facts)), "h200-001")
