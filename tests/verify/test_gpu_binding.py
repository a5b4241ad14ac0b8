"""gres.conf Cores= against the node's real GPU affinity. The collector reads each GPU's
device minor, NUMA node and the sockets of its local CPUs from a sysfs tree
(tests/data/fixtures/sysfs: an HGX H100 with GPUs 0-3 behind socket 0 and 4-7 behind
socket 1; a PCIe server with both H100 cards behind socket 0); verify compares that with
the socket the rendered gres.conf binds each device file to."""

from __future__ import annotations

import copy

from fleetspec.compile.ir import Fleet
from fleetspec.pipeline import compile_text
from fleetspec.render.slurm import render_slurm
from fleetspec.verify.compare import Status, check_node
from tests.verify.h200_facts import h200_facts
from tests.verify.test_node_runtime import collected

SPEC = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: binding}}
spec:
  os: ubuntu-24.04
  stacks:
    hopper: {{driver: "580.159.04", cuda: "13.0", nccl: "2.28.3"}}
  racks:
    - name: r01
      nodes:
        - {{hosts: "hgx-01", gpu: {{model: h100-sxm, count: 8}}, stack: hopper, scheduler: slurm,
            sockets: {hgx_sockets}, cores_per_socket: 56, threads_per_core: 2}}
        - {{hosts: "pcie-01", gpu: {{model: h100-pcie, count: 2}}, stack: hopper, scheduler: slurm,
            sockets: 2, cores_per_socket: 32, threads_per_core: 2}}
  slurm: {{version: "25.11.8", mode: native, controllers: ctl-01{autodetect}}}
"""


def fleet(hgx_sockets: int = 2, autodetect: bool = False) -> Fleet:
    text = SPEC.format(hgx_sockets=hgx_sockets, autodetect=", gres_autodetect: true" if autodetect else "")
    compiled = compile_text(text)
    assert compiled.fleet is not None, compiled.located()
    return compiled.fleet


def binding(f: Fleet, host: str, tree: str | None):
    facts = copy.deepcopy(h200_facts())
    if tree is not None:
        facts["gpu_topology"] = collected(tree)["gpu_topology"]
    node = f.node(host)
    assert node is not None
    return [c for c in check_node(f, node, facts).checks if c.component == "gpu-binding"]


def test_an_hgx_board_matches_the_rendered_socket_binding() -> None:
    f = fleet()
    gres = next(t for p, t in render_slurm(f).items() if p.name == "gres.conf")
    assert "NodeName=hgx-01 Name=gpu Type=h100 File=/dev/nvidia[4-7] Cores=56-111" in gres
    (check,) = binding(f, "hgx-01", "hgx-h100")
    assert check.status is Status.OK, check.message
    assert check.expected == check.found == "0:0 1:0 2:0 3:0 4:1 5:1 6:1 7:1"


def test_pcie_cards_behind_one_socket_are_drift_against_the_assumed_split() -> None:
    f = fleet()
    gres = next(t for p, t in render_slurm(f).items() if p.name == "gres.conf")
    assert "NodeName=pcie-01 Name=gpu Type=h100_pcie File=/dev/nvidia1 Cores=32-63" in gres
    (check,) = binding(f, "pcie-01", "pcie-h100")
    assert check.status is Status.DRIFT
    assert "/dev/nvidia1 (0000:65:00.0) is local to socket 0, gres.conf binds it to socket 1 (Cores=32-63)" \
        in check.message
    assert "/dev/nvidia0" not in check.message and "gres_autodetect" in check.message


def test_a_socket_count_the_node_does_not_have_is_drift() -> None:
    (check,) = binding(fleet(hgx_sockets=4), "hgx-01", "hgx-h100")
    assert check.status is Status.DRIFT
    assert "the node has 2 socket(s), the spec says sockets: 4" in check.message


def test_nothing_to_check_without_topology_facts_or_with_autodetect() -> None:
    assert binding(fleet(), "hgx-01", None) == []  # facts from a collector before gpu_topology
    assert binding(fleet(autodetect=True), "pcie-01", "pcie-h100") == []  # NVML binds, not Cores=
    (check,) = binding(fleet(), "hgx-01", "gb200-tray")  # no local_cpulist to read
    assert check.status is Status.NOT_APPLICABLE
