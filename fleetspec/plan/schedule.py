"""The rollout's schedule: which waves run side by side, which wait for which, and how
long the whole rollout takes under stated figures.

Waves come from ``waves.plan_waves`` (per partition: a canary, then waves within the
partition's ``max_unavailable``). The schedule adds three things:

* **Canaries first.** Every canary wave runs before any other wave: a change that breaks
  a good node stops the rollout before the mass of the fleet leaves service. Canaries of
  independent partitions run side by side.
* **Independent partitions side by side.** The waves of a partition run one after
  another (each within its budget). Partitions that share a node through an extra
  partition (``debug: h100-[001-002]`` over ``nvidia-hopper``) form one *lane*: their
  waves run one after another, so the extra partition's budget holds too. Lanes run side
  by side; two waves of different lanes never take nodes of one partition.
* **The estimate.** A wave works on ``parallel`` hosts at once (the whole wave, or at most
  ``forks`` when that is set: the hosts one Ansible run works on at once); each batch of
  ``parallel`` hosts takes ``batch_minutes`` (install + reboot). The modelled duration is
  the longest path through the waves' ``after`` relation. Drain waits are not modelled:
  nodes whose jobs outlive the drain timeout are carried to a later round (docs/plan.md).

Pure: waves and the fleet in, a Schedule out. Ids are ``<partition>#<index>``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fleetspec.compile.ir import Fleet

if TYPE_CHECKING:  # plan.model reads the schedule of a plan (Plan.schedule)
    from fleetspec.plan.model import Wave

# Install + reboot of one batch of GPU nodes: the figure issue #30 measured (a driver
# package, DKMS or precompiled module, and a reboot of an 8-GPU server with its POST).
DEFAULT_BATCH_MINUTES = 12.75


def parse_batch_minutes(value: float | str) -> float:
    """Minutes per install+reboot batch: a finite number > 0 and at most a day."""
    try:
        minutes = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"batch minutes must be a number of minutes > 0, not {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(minutes) or not 0 < minutes <= 24 * 60:
        raise ValueError(f"batch minutes must be a number of minutes > 0 and at most 1440, not {value!r}")
    return minutes


def parse_forks(value: int | str | None) -> int | None:
    """Hosts one wave's run works on at once: None (the whole wave) or a count >= 1."""
    if value is None:
        return None
    text = str(value).strip()
    if isinstance(value, bool) or not text.isascii() or not text.isdigit() or not 1 <= int(text) <= 1_000_000:
        raise ValueError(f"forks must be a host count >= 1, not {value!r}")
    return int(text)


def wave_id(wave: Wave) -> str:
    return f"{wave.partition}#{wave.index}"


@dataclass(frozen=True)
class Step:
    """One wave in the schedule."""

    id: str
    wave: Wave
    parallel: int  # hosts worked on at once
    after: tuple[str, ...]  # ids of the waves it waits for
    lane: int  # waves of one lane run one after another; lanes run side by side
    batches: int
    start_min: float  # modelled
    end_min: float


@dataclass(frozen=True)
class Schedule:
    steps: tuple[Step, ...]
    batch_minutes: float
    forks: int | None

    @property
    def minutes(self) -> float:
        return max((s.end_min for s in self.steps), default=0.0)

    @property
    def lanes(self) -> int:
        return len({s.lane for s in self.steps})

    def by_id(self) -> dict[str, Step]:
        return {s.id: s for s in self.steps}

    def critical_batches(self) -> int:
        return round(self.minutes / self.batch_minutes) if self.steps else 0

    def peak_out(self, fleet: Fleet) -> dict[str, int]:
        """Per partition, the most of its nodes out at once in the modelled timeline
        (waves whose modelled intervals overlap): never more than its budget."""
        member_of = _membership(fleet)
        peak: dict[str, int] = {}
        points = sorted({s.start_min for s in self.steps})
        for t in points:
            out: dict[str, int] = {}
            for s in self.steps:
                if s.start_min <= t < s.end_min:
                    for host in s.wave.hosts:
                        for p in member_of.get(host, [s.wave.partition]):
                            out[p] = out.get(p, 0) + 1
            for p, n in out.items():
                peak[p] = max(peak.get(p, 0), n)
        return peak

    def assumptions(self) -> str:
        per_wave = "the whole wave at once" if self.forks is None else f"at most {self.forks} hosts of a wave at once"
        return (f"{self.batch_minutes:g} min per install+reboot batch, {per_wave}, {self.lanes} lane(s) side by "
                "side after the canaries; drain waits not counted (jobs that outlive the drain timeout are "
                "carried to a later round)")

    def wave_fields(self) -> dict[str, dict[str, Any]]:
        """Per wave (keyed by id): the keys plan JSON adds to each wave."""
        return {s.id: {"id": s.id, "parallel": s.parallel, "after": list(s.after)} for s in self.steps}

    def to_dict(self) -> dict[str, Any]:
        return {"batch_minutes": self.batch_minutes, "forks": self.forks, "lanes": self.lanes,
                "modelled_minutes": round(self.minutes, 2), "critical_batches": self.critical_batches()}


def schedule(waves: Sequence[Wave], fleet: Fleet, batch_minutes: float = DEFAULT_BATCH_MINUTES,
             forks: int | None = None) -> Schedule:
    """The schedule of ``waves`` (in plan order) over ``fleet``."""
    member_of = _membership(fleet)
    lanes = _lanes(waves, member_of)
    canaries = [w for w in waves if w.canary]
    steps: list[Step] = []
    last_in_lane: dict[int, str] = {}
    gated: set[int] = set()
    end: dict[str, float] = {}
    canary_ids = [wave_id(w) for w in canaries]
    for wave in sorted(waves, key=lambda w: not w.canary):  # stable: canaries first, plan order kept
        wid = wave_id(wave)
        lane = lanes[wave.partition]
        after: list[str] = []
        if lane in last_in_lane:
            after.append(last_in_lane[lane])
        if not wave.canary and lane not in gated:  # the lane's first wave after the canaries waits for all
            gated.add(lane)
            after.extend(c for c in canary_ids if c not in after and lanes[c.rsplit("#", 1)[0]] != lane)
        parallel = max(1, len(wave.hosts) if forks is None else min(forks, len(wave.hosts)))
        batches = math.ceil(len(wave.hosts) / parallel)
        start = max((end[a] for a in after), default=0.0)
        end[wid] = start + batches * batch_minutes
        last_in_lane[lane] = wid
        steps.append(Step(wid, wave, parallel, tuple(after), lane, batches, start, end[wid]))
    order = {wave_id(w): i for i, w in enumerate(waves)}
    steps.sort(key=lambda s: order[s.id])
    return Schedule(tuple(steps), batch_minutes, forks)


def _membership(fleet: Fleet) -> dict[str, list[str]]:
    member_of: dict[str, list[str]] = {}
    for p in fleet.partitions:
        for host in p.nodes:
            member_of.setdefault(host, []).append(p.name)
    return member_of


def _lanes(waves: Sequence[Wave], member_of: dict[str, list[str]]) -> dict[str, int]:
    """Primary partition -> lane number: partitions whose waves touch a common partition
    share a lane (union-find over the partitions each wave's hosts belong to)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for wave in waves:
        root = find(wave.partition)
        for host in wave.hosts:
            for p in member_of.get(host, ()):
                other = find(p)
                if other != root:
                    parent[other] = root
    numbers: dict[str, int] = {}
    lanes: dict[str, int] = {}
    for wave in waves:
        lanes[wave.partition] = numbers.setdefault(find(wave.partition), len(numbers))
    return lanes


def with_rollout_figures(plan: Any, batch_minutes: float | None = None, forks: int | None = None,
                         engine: str | None = None) -> Any:
    """``plan`` with the figures its schedule assumes in its settings (saved plans carry
    them to apply): minutes per install+reboot batch, hosts a wave works on at once, and
    the engine apply runs the waves with (``plan/engines.py``)."""
    import dataclasses

    from fleetspec.plan.engines import parse_engine

    settings = {**plan.settings, "batch_minutes": parse_batch_minutes(
        batch_minutes if batch_minutes is not None else plan.settings.get("batch_minutes", DEFAULT_BATCH_MINUTES))}
    settings["forks"] = parse_forks(forks if forks is not None else plan.settings.get("forks"))
    settings["engine"] = parse_engine(engine if engine is not None else plan.settings.get("engine"))
    return dataclasses.replace(plan, settings=settings)
