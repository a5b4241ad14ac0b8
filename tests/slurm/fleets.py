"""Fleets for the Slurm tests, every one compiled by fleetspec's own compiler.

The examples come from ``examples/*.yaml``. Fleets no example has (Slurm-owned NVL72
racks, the real-Slurm lab, one node) are specs written here as a user would write them.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from fleetspec.compile.ir import Fleet
from fleetspec.pipeline import compile_file, compile_text

ROOT = Path(__file__).resolve().parents[2]

_HEAD = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {{name: {name}}}
spec:
  os: ubuntu-24.04
  stacks:
    hopper-cu13: {{driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"}}
    blackwell-cu13: {{driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"}}
    cdna3-rocm7: {{rocm: "7.0.2"}}
  fabric: {{type: infiniband, spines: [{spines}]}}
  racks:
"""


def _rack(name: str, leaf: str, hosts: str, model: str, stack: str, *, count: int = 8, cpus: int = 224,
          cores_per_socket: int = 56, threads_per_core: int = 2, memory_gb: int = 2048,
          nvlink_rack: bool = False, partition: str | None = None) -> str:
    return (f"    - name: {name}\n      leaf: {leaf}\n"
            + ("      nvlink_domain: rack\n" if nvlink_rack else "")
            + f"      nodes:\n        - hosts: {hosts}\n          gpu: {{model: {model}, count: {count}}}\n"
            f"          stack: {stack}\n          scheduler: slurm\n"
            + (f"          partition: {partition}\n" if partition else "")
            + f"          cpus: {cpus}\n          sockets: 2\n          cores_per_socket: {cores_per_socket}\n"
            f"          threads_per_core: {threads_per_core}\n          memory_gb: {memory_gb}\n")


def _compile(text: str, name: str) -> Fleet:
    result = compile_text(text, f"{name}.yaml")
    assert result.fleet is not None and result.valid, [f.message for f in result.findings]
    return result.fleet


def with_version(fleet: Fleet, version: str) -> Fleet:
    """The same fleet rendered for another Slurm release."""
    assert fleet.slurm is not None
    return dataclasses.replace(fleet, slurm=dataclasses.replace(fleet.slurm, version=version))


def _compiled(example: str) -> Fleet:
    """The example compiled by fleetspec's own compiler (an invalid example fails here)."""
    result = compile_file(ROOT / "examples" / f"{example}.yaml")
    assert result.fleet is not None, [f.message for f in result.findings]
    return result.fleet


def quickstart() -> Fleet:
    return _compiled("quickstart")


def museum() -> Fleet:
    return _compiled("museum")


def nvl72(with_tree_nodes: bool = True) -> Fleet:
    """Two Slurm-owned GB200 NVL72 racks (one NVLink domain each), and optionally a
    rack of H200s that needs the leaf tree: the fleet that needs tree and block at once.
    The GB200 group names its partition ``nvidia-blackwell`` (generated, it would be
    ``nvidia-blackwell-arm64``), as the golden trees were written."""
    racks = "".join(
        _rack(f"r0{r}", f"leaf-0{r - 4}", f"gb200-r0{r}-[01-18]", "gb200", "blackwell-cu13", count=4, cpus=144,
              cores_per_socket=72, threads_per_core=1, memory_gb=960, nvlink_rack=True, partition="nvidia-blackwell")
        for r in (7, 8))
    if with_tree_nodes:
        racks = _rack("r01", "leaf-01", "h200-[001-004]", "h200", "hopper-cu13") + racks
    return _compile(_HEAD.format(name="nvl72", spines="spine-01, spine-02") + racks + """\
  slurm:
    version: "25.11.8"
    mode: native
    controllers: ctl-01
    accounting: {host: db-01}
    containers: pyxis
    pyxis: {enroot: "3.5.0", pyxis: "0.20.0"}
    partitions:
      nvidia-blackwell: {default: true}
""", "nvl72")


_SMALL_SLURM = """\
  slurm:
    version: "22.05.8"
    mode: native
    controllers: ctl-01
    containers: none
"""


def lab() -> Fleet:
    """The fleet the real-Slurm tests start: six nodes, two vendors, three leaves.

    nvidia-hopper spans two leaves (H100 under leaf-01, H200 under leaf-02) so a
    topology test can tell a one-leaf placement from a two-leaf one; amd-cdna3 owns the
    mi300x type; ``debug`` is an extra partition over the H100s.
    """
    return _compile(
        _HEAD.format(name="lab", spines="spine-01")
        + _rack("r01", "leaf-01", "h100-[01-02]", "h100-sxm", "hopper-cu13")
        + _rack("r02", "leaf-02", "h200-[01-02]", "h200", "hopper-cu13")
        + _rack("r03", "leaf-03", "mi300x-[01-02]", "mi300x", "cdna3-rocm7", cpus=192, cores_per_socket=48)
        + _SMALL_SLURM + """\
    partitions:
      nvidia-hopper: {default: true, max_time: "2-00:00:00"}
      debug: {nodes: "h100-[01-02]", max_time: "00:30:00"}
""", "lab")


def lab_with_tenants(tenants: str) -> Fleet:
    """The lab fleet with accounting (slurmdbd on db-01) and ``tenants`` (the YAML lines of
    ``slurm.tenants``, indented four spaces): the accounts test's cluster."""
    return _compile(
        _HEAD.format(name="lab", spines="spine-01")
        + _rack("r01", "leaf-01", "h100-[01-02]", "h100-sxm", "hopper-cu13")
        + _rack("r02", "leaf-02", "h200-[01-02]", "h200", "hopper-cu13")
        + _rack("r03", "leaf-03", "mi300x-[01-02]", "mi300x", "cdna3-rocm7", cpus=192, cores_per_socket=48)
        + _SMALL_SLURM + """\
    accounting: {host: db-01}
    partitions:
      nvidia-hopper: {default: true, max_time: "2-00:00:00"}
      debug: {nodes: "h100-[01-02]", max_time: "00:30:00"}
""" + tenants, "lab")


def single_h100() -> Fleet:
    """One H100 node in one partition: the smallest cluster, for negative tests."""
    return _compile(_HEAD.format(name="single", spines="spine-01")
                    + _rack("r01", "leaf-01", "h100-01", "h100-sxm", "hopper-cu13") + _SMALL_SLURM, "single")


def mig() -> Fleet:
    """MIG nodes as a user would declare them (#46): two H200 nodes split by an explicit
    geometry, one H100 node by mig-parted's all-1g.10gb."""
    text = _HEAD.format(name="migs", spines="spine-01") + (
        "    - name: r01\n      leaf: leaf-01\n      nodes:\n"
        "        - hosts: h200-mig-[01-02]\n"
        "          gpu: {model: h200, count: 8, mig: {1g.18gb: 2, 2g.35gb: 1, 3g.71gb: 1}}\n"
        "          stack: hopper-cu13\n          scheduler: slurm\n          cpus: 224\n"
        "        - hosts: h100-mig-01\n"
        "          gpu: {model: h100-sxm, count: 8, mig: all-1g.10gb}\n"
        "          stack: hopper-cu13\n          scheduler: slurm\n          cpus: 224\n"
        "  slurm:\n    version: \"25.11.8\"\n    mode: native\n    controllers: ctl-01\n")
    return _compile(text, "migs")
