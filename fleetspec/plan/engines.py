"""Which engine rolls each wave, and why (#30 item 2): the one rule ``plan`` shows and
``apply`` follows.

``apply --engine ssh`` (the default) runs every wave through Ansible from the controller.
``apply --engine slurm-native`` hands a wave to Slurm and the nodes' own converge when
every node of the wave can take it:

* ``slurm-native``/``reboot``: a change that needs a reboot (a kernel module: driver,
  fabric manager, ...): ``scontrol reboot ASAP nextstate=RESUME``, the node converges at
  boot before slurmd starts;
* ``slurm-native``/``in-place``: a change that needs only a drain (CUDA toolkit, NCCL,
  cuDNN: user space): drained through Slurm, the node runs its converge unit when it finds
  a converge request for itself (docs/security.md), apply resumes it; no reboot.

A wave falls back to SSH (Ansible from the controller), and the plan says why, when any
of its nodes cannot take the native path: a rolling health-policy change (the nodes keep
their jobs; the node check runs before the policy goes out), adopted nodes no scheduler
has (Slurm can neither drain nor reboot them), CPU-only nodes (a bundle holds a
partition's GPU nodes), removed or replaced nodes (nothing to converge: provisioned anew),
Slurm in Kubernetes (Slinky: no host slurmd). Kubernetes pools are cordoned and drained
through kubectl; where the GPU Operator owns the driver its upgrade controller rolls it
(``NVIDIADriver.spec.upgradePolicy``, set from the wave policy), else Ansible does.

Pure: the plan and the engine name in, one `WaveEngine` per wave out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # plan.model shows each wave's engine (Plan.to_dict)
    from fleetspec.plan.model import Plan, Wave

SSH = "ssh"
SLURM_NATIVE = "slurm-native"
GPU_OPERATOR = "gpu-operator"
ENGINES = (SSH, SLURM_NATIVE)  # what 'plan/apply --engine' take
REBOOT, IN_PLACE = "reboot", "in-place"


@dataclass(frozen=True)
class WaveEngine:
    engine: str  # ssh | slurm-native | gpu-operator
    method: str | None  # slurm-native: reboot | in-place
    why: str

    @property
    def native(self) -> bool:
        return self.engine == SLURM_NATIVE

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "method": self.method, "why": self.why}


def parse_engine(value: str | None) -> str:
    engine = SSH if value is None else str(value)
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, not {value!r}")
    return engine


def wave_engines(plan: Plan, engine: str | None = None) -> dict[tuple[str, int], WaveEngine]:
    """Per wave, keyed by (partition, index): the engine ``apply --engine ENGINE`` uses
    (``engine`` None: the plan's ``settings['engine']``, default ssh)."""
    chosen = parse_engine(engine if engine is not None else plan.settings.get("engine"))
    drains = {c.host for c in plan.changes if c.host is not None and c.disruption.drains}
    removed = {c.host for c in plan.changes if c.host is not None and c.action.value == "delete"}
    return {(w.partition, w.index): wave_engine(plan, w, chosen, drains, removed) for w in plan.waves}


def wave_engine(plan: Plan, wave: Wave, engine: str, drains: set[str], removed: set[str]) -> WaveEngine:
    fleet = plan.fleet
    partition = fleet.partition(wave.partition)
    owner = partition.scheduler if partition is not None else "slurm"
    if owner == "kubernetes":
        return _kubernetes(plan, wave)
    if engine == SSH:
        return WaveEngine(SSH, None, "apply --engine ssh (the default): Ansible from the controller, per wave")
    hosts = list(wave.hosts)
    fallback = _native_blocker(plan, wave, hosts, drains, removed)
    if fallback is not None:
        return WaveEngine(SSH, None, f"falls back to SSH: {fallback}")
    if wave.disruption.value in ("replace", "drain-reboot"):
        return WaveEngine(SLURM_NATIVE, REBOOT, "a kernel-module change: scontrol reboot ASAP nextstate=RESUME, "
                                                "each node converges from its signed bundle at boot")
    return WaveEngine(SLURM_NATIVE, IN_PLACE, "no reboot needed: drained through Slurm, each node converges "
                                              "from its signed bundle on a converge request, then resumed")


def _native_blocker(plan: Plan, wave: Wave, hosts: list[str], drains: set[str], removed: set[str]) -> str | None:
    """Why some node of the wave cannot take the Slurm-native path; None when all can."""
    fleet = plan.fleet
    if fleet.slurm is None or fleet.slurm.mode != "native":
        return "Slurm runs in Kubernetes (Slinky): no host slurmd to drain, reboot or converge before"
    unowned = sorted(set(hosts) & set(plan.unowned))
    if unowned:
        return (f"adopted node(s) {', '.join(unowned[:5])} answer SSH but Slurm does not have them: Slurm can "
                "neither drain nor reboot them")
    gone = sorted(set(hosts) & removed)
    if gone:
        return f"{', '.join(gone[:5])} leave the fleet: nothing to converge"
    if wave.disruption.value == "replace":
        return "a replaced node (new hardware or owner) is provisioned anew, not converged in place"
    cpu = sorted(h for h in hosts if fleet.node(h) is None)
    if cpu:
        return f"CPU-only node(s) {', '.join(cpu[:5])}: a bundle holds a partition's GPU nodes only"
    rolling = [h for h in hosts if h not in drains]
    if rolling:
        return (f"a rolling health-policy change on {', '.join(rolling[:5])}: the nodes keep their jobs and the "
                "node check runs on them before the policy goes out")
    return None


def _kubernetes(plan: Plan, wave: Wave) -> WaveEngine:
    k8s = plan.fleet.kubernetes
    vendors = {n.gpu.vendor for h in wave.hosts if (n := plan.fleet.node(h)) is not None}
    operator = k8s is not None and bool(vendors) and all(
        (v == "nvidia" and k8s.gpu_operator is not None and k8s.gpu_operator.driver == "operator")
        or (v == "amd" and k8s.amd_gpu_operator_version is not None and k8s.amd_driver == "operator")
        for v in vendors)
    if operator:
        return WaveEngine(GPU_OPERATOR, None, "Kubernetes pool: cordoned and drained through kubectl; the GPU "
                                              "Operator's upgrade controller rolls the driver (upgradePolicy from "
                                              "the wave policy), Ansible the host's other roles")
    return WaveEngine(SSH, None, "Kubernetes pool whose driver the host roles install (no operator-owned "
                                 "driver): cordoned and drained through kubectl, Ansible from the controller")
