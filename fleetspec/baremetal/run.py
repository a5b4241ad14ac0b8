"""Read every BMC, plan the BMC changes, apply them in waves.

``observe`` opens one Redfish session per node (``parallel`` at a time) and returns what
each reports, with the nodes whose BMC could not be read and why. ``plan_bmcs`` turns that
into a `Plan` (changes with their disruption, the waves apply runs) and findings.
``apply_bmcs`` performs a plan's BMC changes wave by wave: in a drain-reboot wave each node
is drained through its scheduler first (when a `NodeControl` is given), its BMC's own
firmware updated first (the BMC's reset waited out), its BIOS attributes staged, its other
firmware updated (pushed, or fetched by the BMC; staged for the reboot; each task followed to
its end), it is restarted (the power read back until On), the BIOS attributes and the
firmware are read back and compared with what was set and the stack's pins, and it is
resumed after; a node whose only change is the BMC's firmware is neither
drained nor rebooted (``rolling``: the host keeps its work); a node that is off gets the same
BIOS and firmware, is set to boot once from the network (read back: ``Pxe``/``Once``, or the
node fails before it is powered on) and powered on, held drained (with a
`NodeControl`) until `fleetspec.baremetal.join` has verified it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from fleetspec.apply.control import NodeControl
from fleetspec.baremetal.drift import bmc_changes, firmware_reported
from fleetspec.baremetal.join import JOIN_REASON
from fleetspec.baremetal.redfish import BMC_BACK_S, READ_DEADLINE_S, BmcError, Observed, Session
from fleetspec.compile.ir import Fleet, NodeBmc
from fleetspec.findings import Finding
from fleetspec.plan.model import Change, Disruption, Plan
from fleetspec.plan.waves import MaxUnavailable, plan_waves
from fleetspec.secrets import Redactor

DRAIN_REASON = "fleetspec: BMC change (BIOS, firmware, reboot)"
READBACK_S = 900  # after the reboot, how long the BMC may take to report the new firmware version
READBACK_POLL_S = 5
POWER_S = 60  # how long a BMC may report PoweringOn before On


@dataclass
class Observation:
    seen: dict[str, Observed] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)  # host -> why


def observe(fleet: Fleet, base_dir: Path, hosts: Sequence[str] | None = None, parallel: int = 16,
            redactor: Redactor | None = None, deadline_s: float | None = READ_DEADLINE_S) -> Observation:
    """Read every BMC (``hosts``: those only); each BMC within ``deadline_s`` in all, else
    it is unreachable, with the reason."""
    if fleet.baremetal is None:
        return Observation()
    wanted = set(hosts) if hosts is not None else None
    bmcs = [b for b in fleet.baremetal.bmcs if wanted is None or b.host in wanted]
    redactor = redactor or Redactor()

    def read(bmc: NodeBmc) -> Observed | str:
        try:
            with Session(bmc, base_dir, redactor, deadline_s) as session:
                return session.read()
        except BmcError as exc:
            return str(exc)

    result = Observation()
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(bmcs) or 1))) as pool:
        for bmc, got in zip(bmcs, pool.map(read, bmcs)):
            if isinstance(got, str):
                result.unreachable[bmc.host] = got
            else:
                result.seen[bmc.host] = got
    return result


def plan_bmcs(fleet: Fleet, observation: Observation, canary: int = 1,
              max_unavailable: MaxUnavailable = "25%") -> tuple[Plan, list[Finding]]:
    changes, findings = bmc_changes(fleet, observation.seen)
    waves = plan_waves(changes, fleet, canary, max_unavailable)
    plan = Plan(fleet, tuple(changes), waves, base="the BMCs, read over Redfish",
                settings={"canary": canary, "max_unavailable": max_unavailable})
    return plan, findings


@dataclass
class BmcApplyResult:
    done: list[str] = field(default_factory=list)  # "host: what was done"
    failed: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed


def apply_bmcs(plan: Plan, base_dir: Path, control: NodeControl | None = None,
               on_line: Callable[[str], None] = lambda line: None, drain_deadline_s: float = 3600,
               redactor: Redactor | None = None, readback_s: float = READBACK_S,
               bmc_back_s: float = BMC_BACK_S) -> BmcApplyResult:
    """Apply the plan's BMC changes: nodes that are off first, then the waves (drain-reboot,
    and rolling for BMC-only updates, which drain nothing). Without ``control`` a drain-reboot
    change is refused (nothing restarts a node under running
    work); a node that fails stops the run, its wave left drained."""
    assert plan.fleet.baremetal is not None
    result = BmcApplyResult()
    redactor = redactor or Redactor()
    by_host: dict[str, list[Change]] = {}
    for change in plan.changes:
        if change.host is not None and change.reason.startswith("BMC: "):
            by_host.setdefault(change.host, []).append(change)

    def note(host: str, line: str) -> None:
        result.done.append(f"{host}: {line}")
        on_line(f"{host}: {line}")

    in_waves = {h for wave in plan.waves for h in wave.hosts}
    booting = sorted(set(by_host) - in_waves)
    if booting and control is not None:  # out of service until `baremetal join` has verified them
        control.drain(booting, JOIN_REASON)
        for host in booting:
            note(host, "held drained until it joins (fleetspec baremetal join)")
    for host in booting:  # nodes that are off: nothing to drain
        if not _apply_one(plan, host, by_host[host], base_dir, redactor, result, note, readback_s, bmc_back_s):
            return result
    for wave in plan.waves:
        hosts = [h for h in wave.hosts if h in by_host]
        draining = [h for h in hosts if any(c.disruption.drains for c in by_host[h])]
        if draining:
            if control is None:
                for host in draining:
                    result.failed[host] = ("a BIOS or firmware change needs a drain and a reboot: give the scheduler "
                                           "to drain through (--drain slurm or --drain kubernetes)")
                return result
            control.drain(draining, DRAIN_REASON)
            busy = control.wait_drained(draining, drain_deadline_s)
            if busy:
                for host in busy:
                    result.failed[host] = f"still running work after {drain_deadline_s:g} s: not rebooted (left drained)"
                return result
        for host in hosts:
            _apply_one(plan, host, by_host[host], base_dir, redactor, result, note, readback_s, bmc_back_s)
        if result.failed:
            return result  # the wave's drained nodes stay drained: look before going on
        if draining and control is not None:
            control.resume(draining)
            for host in draining:
                note(host, "resumed")
    return result


def _apply_one(plan: Plan, host: str, changes: list[Change], base_dir: Path, redactor: Redactor,
               result: BmcApplyResult, note: Callable[[str, str], None], readback_s: float,
               bmc_back_s: float) -> bool:
    assert plan.fleet.baremetal is not None
    bmc = plan.fleet.baremetal.bmc(host)
    assert bmc is not None
    try:
        _apply_node(bmc, changes, base_dir, redactor, lambda line: note(host, line), readback_s, bmc_back_s)
    except BmcError as exc:
        result.failed[host] = str(exc)
        return False
    return True


def _apply_node(bmc: NodeBmc, changes: list[Change], base_dir: Path, redactor: Redactor,
                note: Callable[[str], None], readback_s: float, bmc_back_s: float) -> None:
    with Session(bmc, base_dir, redactor) as session:
        power_on = any(c.disruption is Disruption.NONE and c.after.get("power") == "On" for c in changes)
        bios: dict = {}
        firmware: dict[str, dict[str, str]] = {}
        for change in changes:
            bios.update(change.after.get("bios", {}))
            firmware.update(change.after.get("firmware", {}))
        if "bmc" in firmware:  # first: its reset would drop what is staged before it
            _update(session, "bmc", firmware["bmc"], note)
            away = session.wait_reset(back_within_s=bmc_back_s)
            note(f"the BMC reset after its update and answers again ({away:.0f} s away)" if away
                 else "the BMC did not reset after its update")
            _read_back(session, {"bmc": firmware["bmc"]["version"]}, readback_s, note)
        host_side = {c: u for c, u in firmware.items() if c != "bmc"}
        if bios:
            session.set_bios(bios)
            note(f"BIOS staged: {', '.join(f'{k}={v}' for k, v in sorted(bios.items()))}")
        for component, update in sorted(host_side.items()):
            _update(session, component, update, note)
        if power_on:
            session.boot_pxe_once()
            _boot_read_back(session)
            session.power("On")
            _power_read_back(session, readback_s)
            note("boot once from the network (PXE), powered on")
        elif bios or host_side:
            session.power("restart")
            _power_read_back(session, readback_s)
            note("restarted (the BIOS or firmware change takes effect)")
        if bios:
            _bios_read_back(session, bios, readback_s, note)
        if host_side:
            _read_back(session, {c: u["version"] for c, u in host_side.items()}, readback_s, note)


def _update(session: Session, component: str, update: dict[str, str], note: Callable[[str], None]) -> None:
    note(f"{component} firmware {update['version']}: UpdateService from {update['image']}")
    targets = update.get("targets")
    done = session.update_firmware(component, update["image"], update.get("sha256"),
                                   planned=list(targets) if isinstance(targets, list) else None)
    note(f"{component} firmware update {done.line()}")


def _boot_read_back(session: Session) -> None:
    """The boot override as the BMC holds it after fleetspec asked for PXE once: anything but
    ``Pxe``/``Once`` fails the node before it is powered on (a ``Continuous`` override boots the
    installer at every start; sushy-emulator's fake driver answers ``Continuous`` whatever it is
    asked, its templates/system.json)."""
    seen = session.read()
    if (seen.boot_target, seen.boot_enabled) != ("Pxe", "Once"):
        raise BmcError(f"{session.bmc.host}: asked to boot once from the network, the BMC holds boot override "
                       f"{seen.boot_target}/{seen.boot_enabled} (BootSourceOverrideTarget/Enabled), not Pxe/Once: "
                       "not powered on. Set the override in the BMC, or boot the node from its console")


def _until_held(session: Session, deadline_s: float, wrong_of: Callable[[Observed], dict]) -> tuple[Observed, dict]:
    """Read the BMC until ``wrong_of`` finds nothing wrong or ``deadline_s`` has passed: the
    last reading and what was still wrong in it (a BMC reports a change once the host has
    gone through its firmware's setup, or has booted the new image)."""
    deadline = time.monotonic() + deadline_s
    while True:
        seen = session.read()
        wrong = wrong_of(seen)
        if not wrong or time.monotonic() >= deadline:
            return seen, wrong
        time.sleep(READBACK_POLL_S)


def _power_read_back(session: Session, deadline_s: float) -> None:
    """The power state read back until the BMC reports On (it may report PoweringOn first)."""
    seen, wrong = _until_held(session, max(deadline_s, POWER_S), lambda o: {} if o.power == "On" else {"power": o.power})
    if wrong:
        raise BmcError(f"{session.bmc.host}: the BMC reports power {seen.power} after fleetspec powered the node "
                       "on: look at it (its console, its power supplies)")


def _bios_read_back(session: Session, wanted: dict, deadline_s: float, note: Callable[[str], None]) -> None:
    """The BIOS attributes read back after the reset that applies them, until they hold."""
    _, wrong = _until_held(session, deadline_s,
                           lambda o: {k: o.bios.get(k) for k, v in wanted.items() if o.bios.get(k) != v})
    if wrong:
        raise BmcError(f"{session.bmc.host}: after the reset the BMC reports BIOS "
                       + ", ".join(f"{k} {v!r} (staged {wanted[k]!r})" for k, v in sorted(wrong.items()))
                       + ": the setting did not take. Left drained")
    note("BIOS read back: " + ", ".join(f"{k}={v}" for k, v in sorted(wanted.items())))


def _read_back(session: Session, wanted: dict[str, str], deadline_s: float, note: Callable[[str], None]) -> None:
    """Read the firmware inventory until it reports every pinned version."""
    def wrong_of(o: Observed) -> dict:
        return {c: v for c in wanted if (v := firmware_reported(c, o.firmware)) != wanted[c]}

    _, wrong = _until_held(session, deadline_s, wrong_of)
    if wrong:
        raise BmcError(f"{session.bmc.host}: after the update and the reboot the BMC reports "
                       + ", ".join(f"{c} {v or 'no version'} (the stack pins {wanted[c]})" for c, v in sorted(wrong.items()))
                       + ": the image did not carry the pinned version, or the update did not take. Left drained")
    note("firmware read back: " + ", ".join(f"{c} {v}" for c, v in sorted(wanted.items())))


def unreachable_lines(observation: Observation) -> list[str]:
    return [why for _, why in sorted(observation.unreachable.items())]


# A MAC as Redfish reports it (EthernetInterface.MACAddress: six hex pairs joined by ':' in
# all 123 MACAddress/PermanentMACAddress values of the four real BMCs' trees in
# NVIDIA/libredfish tests/mockups, upper and lower case) or by '-'. Nothing else becomes a file name.
MAC = re.compile(r"[0-9A-Fa-f]{2}([:-])[0-9A-Fa-f]{2}(\1[0-9A-Fa-f]{2}){4}")


class BootScriptError(ValueError):
    """The BMCs' NIC addresses cannot be trusted to route boots: nothing was written."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def boot_macs(fleet: Fleet, observation: Observation) -> tuple[dict[str, str], list[str]]:
    """{MAC (lower case, ':'): host} from what each BMC reported, and what was left out.

    A reported address is used only if it is a MAC (`MAC`, normalised) and a NIC's own:
    unicast and not all zeros (a multicast or broadcast address belongs to no NIC, so a
    boot script there could only be a BMC's trick). One MAC reported by two nodes' BMCs
    is a `BootScriptError` naming both: the boot server would chain one node's boot to the
    other's script (a compromised BMC claiming a neighbour's MAC takes over its boot)."""
    owner: dict[str, str] = {}
    skipped: list[str] = []
    clashes: dict[str, set[str]] = {}
    for host, seen in sorted(observation.seen.items()):
        if fleet.node(host) is None:
            continue
        for reported in seen.nics:
            text = str(reported)
            if not MAC.fullmatch(text):
                skipped.append(f"{host}: its BMC reports the NIC address {_shown(text)}, not a MAC (six hex pairs "
                               "joined by ':' or '-'): no boot script for it")
                continue
            mac = text.lower().replace("-", ":")
            first = int(mac[:2], 16)
            if first & 1 or mac == "00:00:00:00:00:00":
                skipped.append(f"{host}: its BMC reports {mac}, a multicast, broadcast or zero address that is no "
                               "NIC's own: no boot script for it")
                continue
            if owner.setdefault(mac, host) != host:
                clashes.setdefault(mac, {owner[mac]}).add(host)
    if clashes:
        raise BootScriptError([f"the MAC {mac} is reported by the BMCs of {' and '.join(sorted(hosts))}: a node boots "
                               "by its MAC, so one would boot the other's script. No boot script was written and "
                               "nothing applied: check both BMCs (EthernetInterfaces), one may be misconfigured or "
                               "compromised, and leave it out with --hosts meanwhile"
                               for mac, hosts in sorted(clashes.items())])
    return owner, skipped


def _shown(text: str, limit: int = 40) -> str:
    clean = "".join(c if c.isprintable() else "?" for c in text[:limit])
    return repr(clean + ("..." if len(text) > limit else ""))


def mac_scripts(fleet: Fleet, observation: Observation) -> dict:
    """``baremetal/tftp/nodes/<mac>.ipxe`` for every NIC each BMC reported (`boot_macs`): the
    boot chain knows a node by its MAC before DHCP has given it a name
    (fleetspec/render/baremetal.py). Raises `BootScriptError`."""
    from pathlib import PurePosixPath

    from fleetspec.render.baremetal import OUT, node_script_for_mac

    owner, _ = boot_macs(fleet, observation)
    return {PurePosixPath(OUT / "tftp" / "nodes" / f"{mac.replace(':', '-')}.ipxe"): node_script_for_mac(host)
            for mac, host in sorted(owner.items())}


def write_boot_scripts(tftp: Path, fleet: Fleet, observation: Observation) -> tuple[list[Path], list[str]]:
    """``mac_scripts`` into the boot server's TFTP root (``tftp/nodes/<mac>.ipxe``), each
    replaced whole (a node booting meanwhile reads the old script or the new) and readable by
    the TFTP server's user (dnsmasq drops root); the written paths and the addresses left out
    (`boot_macs`). Every address is checked before the first file is written: a
    `BootScriptError` leaves the TFTP root as it was."""
    from fleetspec.safe_io import atomic_write

    _, skipped = boot_macs(fleet, observation)
    scripts = mac_scripts(fleet, observation)
    (tftp / "nodes").mkdir(exist_ok=True)
    written = []
    for path, text in sorted(scripts.items()):
        target = tftp / "nodes" / path.name
        atomic_write(target, text.encode())
        target.chmod(0o644)
        written.append(target)
    return written, skipped


__all__ = ["BootScriptError", "Observation", "apply_bmcs", "boot_macs", "mac_scripts", "observe", "plan_bmcs",
           "unreachable_lines", "write_boot_scripts"]
