"""verify reads a site-declared GPU model (spec.gpu_models, #29 item 3) by the name the
site declared for it: a T4 node whose nvidia-smi says "Tesla T4" is that model, a node
that shows another board is drift, and the names survive fleet.json (verify from state)."""

from __future__ import annotations

from fleetspec.compile.ir import Fleet
from fleetspec.pipeline import compile_text
from fleetspec.state.codec import fleet_from_dict
from fleetspec.verify.compare import Status, check_node
from tests.importer.facts import nvidia_facts

SPEC = """apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {name: t4site}
spec:
  os: ubuntu-24.04
  gpu_models:
    t4: {vendor: nvidia, name: Tesla T4, generation: turing, architecture: Turing, memory_gb: 16, gres: t4}
  stacks:
    s: {driver: "580.95.05", cuda: "13.0.2", cudnn: "9.17.0", nccl: "2.28.3"}
  racks:
    - name: r01
      nodes:
        - {hosts: "t[01-02]", gpu: {model: t4, count: 4}, stack: s, scheduler: slurm}
  slurm: {version: "25.11.8", mode: native, controllers: ctl-01}
"""


def _gpu_checks(fleet: Fleet, gpu_name: str) -> dict[str, object]:
    report = check_node(fleet, fleet.nodes[0], nvidia_facts("t01", gpu_name, 4))
    return {c.component: c for c in report.checks if c.component.startswith("gpu-")}


def test_a_site_declared_model_verifies_by_its_declared_name() -> None:
    fleet = compile_text(SPEC, "fleet.yaml").fleet
    assert fleet.site_gpu_names == (("t4", "Tesla T4"),)
    checks = _gpu_checks(fleet, "Tesla T4")
    assert checks["gpu-model"].status is Status.OK, checks["gpu-model"].message
    assert checks["gpu-count"].status is Status.OK
    spaced = _gpu_checks(fleet, "tesla  t4")  # case and spacing as tools vary them
    assert spaced["gpu-model"].status is Status.OK


def test_another_board_on_a_site_model_node_is_drift_naming_the_declaration() -> None:
    fleet = compile_text(SPEC, "fleet.yaml").fleet
    check = _gpu_checks(fleet, "NVIDIA A100-SXM4-80GB")["gpu-model"]
    assert check.status is Status.DRIFT
    assert "a100" in check.message and "the site declared t4 as 'Tesla T4'" in check.message


def test_the_declared_names_survive_fleet_json() -> None:
    fleet = compile_text(SPEC, "fleet.yaml").fleet
    again = fleet_from_dict(fleet.to_dict())
    assert again.site_gpu_names == fleet.site_gpu_names
    assert _gpu_checks(again, "Tesla T4")["gpu-model"].status is Status.OK


MIXED = SPEC.replace('gpu: {model: t4, count: 4}', 'gpu: {model: a100, count: 2}, other_gpus: [{model: t4, count: 1}]')


def test_a_node_with_two_models_verifies_each_models_count() -> None:
    """#29 item 1: nvidia-smi lists every board; each model must show its own count."""
    from tests.importer.facts import nvidia_facts as facts

    fleet = compile_text(MIXED, "fleet.yaml").fleet
    node = fleet.nodes[0]
    right = {c.component: c for c in check_node(fleet, node, facts("t01", [("Tesla T4", 1),
                                                                           ("NVIDIA A100-SXM4-80GB", 2)])).checks}
    assert right["gpu-model"].status is Status.OK, right["gpu-model"].message
    assert right["gpu-count"].status is Status.OK and right["gpu-count"].expected == "3"
    wrong = {c.component: c for c in check_node(fleet, node, facts("t01", [("Tesla T4", 2),
                                                                           ("NVIDIA A100-SXM4-80GB", 1)])).checks}
    assert wrong["gpu-model"].status is Status.DRIFT
    assert "1x a100, 2x t4 by model, the spec says 2x a100, 1x t4" in wrong["gpu-model"].message
