"""Generate large fleet specs for benchmarks: racks of 16 nodes written with hostlists."""

from __future__ import annotations

NVIDIA = [("h100-sxm", "hopper-cu13"), ("h200", "hopper-cu13"), ("b200", "blackwell-cu13"), ("a100", "ampere-cu12")]
AMD = [("mi300x", "cdna3-rocm7"), ("mi355x", "cdna4-rocm7")]


def fleet_yaml(nodes: int, per_rack: int = 16, name: str = "bench") -> str:
    racks = []
    models = NVIDIA + AMD
    for r in range(nodes // per_rack):
        model, stack = models[r % len(models)]
        scheduler = "kubernetes" if r % 5 == 4 else "slurm"
        racks.append(
            f"    - name: r{r:05d}\n"
            f"      leaf: leaf-{r // 8:04d}\n"
            f"      nodes:\n"
            f"        - hosts: {model}-r{r:05d}-[01-{per_rack:02d}]\n"
            f"          gpu: {{model: {model}, count: 8}}\n"
            f"          stack: {stack}\n"
            f"          scheduler: {scheduler}\n"
            f"          cpus: 224\n"
            f"          sockets: 2\n"
            f"          cores_per_socket: 56\n"
            f"          threads_per_core: 2\n"
            f"          memory_gb: 2048\n"
        )
    return f"""\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata:
  name: {name}
spec:
  os: ubuntu-24.04
  stacks:
    ampere-cu12: {{driver: "580.95.05", cuda: "12.8.1", cudnn: "9.10.2", nccl: "2.26.2"}}
    hopper-cu13: {{driver: "580.95.05", cuda: "13.0.2", cudnn: "9.17.0", nccl: "2.28.3"}}
    blackwell-cu13: {{driver: "580.173.02", cuda: "13.0.2", nccl: "2.28.3"}}
    cdna3-rocm7: {{rocm: "7.0.2", rccl: "2.26.6"}}
    cdna4-rocm7: {{rocm: "7.0.2"}}
  fabric:
    type: infiniband
    spines: [spine-01, spine-02]
  racks:
{"".join(racks)}  slurm:
    version: "25.11.8"
    controllers: ctl-[01-02]
    state_save_location: /shared/slurm/statesave   # HA: on storage both controllers mount
    accounting: {{host: db-01}}
  kubernetes:
    version: "1.36"
    gpu_operator: {{version: v26.7.0, driver: operator}}
    amd_gpu_operator: {{version: v1.5.1}}
    queueing: kueue
    gang: kueue
"""


# The driver bump of issue #30: 16 nodes a rack, every fifth rack AMD (MI300X, untouched
# by an NVIDIA driver), the other racks H100, H200 and A100 on stacks pinned to driver
# 580.95.05 (CUDA 13.0 Update 2's driver, reference/compat-facts.yaml "13.0") moving to
# 580.173.02 (a driver the GPU Operator v26.7.0 validates, compat-facts "v26.7.0").
DRIVER_BEFORE, DRIVER_AFTER = "580.95.05", "580.173.02"


def driver_bump_yaml(nodes: int = 20000, per_rack: int = 16, amd_every: int = 5, bumped: bool = False) -> str:
    """All Slurm: partitions nvidia-hopper (H100 + H200), nvidia-ampere, amd-cdna3."""
    driver = DRIVER_AFTER if bumped else DRIVER_BEFORE
    nvidia = [("h100-sxm", "hopper-cu13"), ("h200", "hopper-cu13"), ("a100", "ampere-cu12")]
    racks = []
    for r in range(nodes // per_rack):
        model, stack = ("mi300x", "cdna3-rocm7") if r % amd_every == amd_every - 1 else nvidia[r % len(nvidia)]
        racks.append(
            f"    - name: r{r:05d}\n"
            f"      leaf: leaf-{r // 8:04d}\n"
            f"      nodes:\n"
            f"        - hosts: {model}-r{r:05d}-[01-{per_rack:02d}]\n"
            f"          gpu: {{model: {model}, count: 8}}\n"
            f"          stack: {stack}\n"
            f"          scheduler: slurm\n"
            f"          cpus: 224\n"
            f"          memory_gb: 2048\n"
        )
    return f"""\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata:
  name: bump
spec:
  os: ubuntu-24.04
  stacks:
    ampere-cu12: {{driver: "{driver}", cuda: "12.8.1", cudnn: "9.10.2", nccl: "2.26.2"}}
    hopper-cu13: {{driver: "{driver}", cuda: "13.0.2", cudnn: "9.17.0", nccl: "2.28.3"}}
    cdna3-rocm7: {{rocm: "7.0.2", rccl: "2.26.6"}}
  fabric:
    type: infiniband
    spines: [spine-01, spine-02]
  racks:
{"".join(racks)}  slurm:
    version: "25.11.8"
    controllers: ctl-01
    accounting: {{host: db-01}}
"""
