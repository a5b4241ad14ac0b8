"""fleetspec's collector output from a real H200 node (tests/data/fixtures/h200-node/
collector.json, its README says where and how), checked against a spec pinning that node's
tuple: what `fleetspec verify --local` printed there, verdict by verdict. Real drift included:
a system cuDNN older than the pin, newer cuDNN and NCCL wheels in a PyTorch environment,
cuDNN packages beside the held one left unheld, and a driver loaded with no module on disk."""

from __future__ import annotations

import json

from fleetspec.pipeline import compile_text
from fleetspec.verify.compare import compare
from tests.conftest import DATA

FACTS = json.loads((DATA / "fixtures" / "h200-node" / "collector.json").read_text())
SPEC = """
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {name: device}
spec:
  os: ubuntu-24.04
  stacks:
    hopper-cu13: {driver: "580.159.04", cuda: "13.0.2", cudnn: "9.17.0", nccl: "2.28.3"}
  fabric: {type: ethernet, spines: [spine-01]}
  racks:
    - name: r01
      leaf: leaf-01
      nodes:
        - {hosts: vm, gpu: {model: h200, count: 1}, stack: hopper-cu13, scheduler: slurm}
  slurm: {version: "25.11.8", mode: native, controllers: ctl-01}
"""


def test_the_real_h200_collector_output_gives_the_verdicts_verify_local_gave_there() -> None:
    fleet = compile_text(SPEC, "device.yaml").fleet
    assert fleet is not None
    report = compare(fleet, {"vm": FACTS}, hosts=["vm"])
    (node,) = report.nodes
    got = {c.component: (c.status.value, c.found) for c in node.checks}
    assert got["driver"] == ("ok", "580.159.04")
    assert got["kernel-module"] == ("ok", "open")
    assert got["gpu-model"] == ("ok", "NVIDIA H200") and got["gpu-count"] == ("ok", "1")
    assert got["persistence-mode"] == ("ok", "Enabled")
    assert got["cuda"] == ("ok", "13.0")  # no version.json: nvcc's 13.0 is all the node shows
    assert got["nccl"][0] == "ok" and got["nccl"][1] == "2.28.3"
    assert got["cudnn"] == ("drift", "9.14.0")
    assert got["cudnn-shadow"] == ("warning", "9.19.0") and got["nccl-shadow"] == ("warning", "2.28.9")
    assert got["package-holds"][0] == "warning" and "libcudnn9-dev-cuda-13" in got["package-holds"][1]
    assert got["loaded-module"] == ("warning", "580.159.04")
    assert node.status.value == "drift"
