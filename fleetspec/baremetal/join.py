"""The join step: a node that has booted (PXE into its golden image, or provisioned any other
way) is let into Slurm only once ``verify`` passes for it.

The node is already defined in the rendered slurm.conf (``State=UNKNOWN``: Slurm lists it
DOWN and not responding until its slurmd registers). Because the rendered ``ReturnToService=1``
would put a registering node straight into service, `hold` drains it first with
`JOIN_REASON`; `baremetal apply` holds every node it powers on. Given ``register``, `join`
first registers each node: a golden image holds slurmd but no munge key (the image is
served to anyone on the provisioning network), so `register_script` installs the fleet's
key and starts munge and slurmd, which fetches its configuration from slurmctld
(configless). A node it could not register stays drained saying why. `join` then waits for each
node's slurmd to register (sinfo no longer marks it not responding), runs ``verify`` on the
registered nodes, and resumes each that conforms; a node that does not stays drained with the
first failing check as the reason, and one whose slurmd never registered stays drained saying
so. Every reason starts with ``fleetspec: ``, so apply owns it and an operator's is never
touched (fleetspec.apply.control.APPLY_REASON_PREFIX).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from fleetspec.apply.control import APPLY_REASON_PREFIX, SlurmControl
from fleetspec.compile.ir import Fleet
from fleetspec.verify.compare import Status, VerifyReport

JOIN_REASON = f"{APPLY_REASON_PREFIX}joining: verify pending"
REGISTER_TIMEOUT_S = 900  # a node PXE-boots, unpacks its image and starts slurmd in minutes
REASON_MAX = 200  # Slurm keeps the whole reason; sinfo's column is what people read
Verify = Callable[[Fleet, list[str]], VerifyReport]
# hosts -> {host: (retry, why)} for each host not registered; retry: it could not be reached
# (still booting), so it is tried again until the timeout
Register = Callable[[list[str]], dict[str, tuple[bool, str]]]


@dataclass(frozen=True)
class Joined:
    host: str
    in_service: bool
    reason: str  # why it stays out ("" when it joined)


def hold(control: SlurmControl, hosts: Sequence[str]) -> None:
    """Keep ``hosts`` out of service until `join` has verified them (drain with JOIN_REASON)."""
    if hosts:
        control.drain(hosts, JOIN_REASON)


def registered(state: str) -> bool:
    """Whether sinfo's long state shows the node's slurmd answering."""
    base = state.lower()
    return not base.endswith("*") and not base.startswith(("down", "unknown", "future", "no_respond"))


def check_hosts(fleet: Fleet, hosts: Sequence[str]) -> None:
    """Raise ValueError naming the hosts that are not Slurm nodes of ``fleet``."""
    unknown = sorted(set(hosts) - {n.hostname for n in fleet.nodes if n.scheduler == "slurm"})
    if unknown:
        raise ValueError(f"not Slurm nodes of this spec: {', '.join(unknown)}")


def register_script(munge_key: bytes) -> bytes:
    """The shell script `join` runs on each booted node: the fleet's munge key in place
    (owner munge, mode 0400, replaced only when it differs), munge and slurmd enabled and
    (re)started. The key travels inside the script, which Ansible copies into its private
    remote directory and deletes after the run; it is never an argument on a command line."""
    encoded = base64.b64encode(munge_key).decode()
    return f"""\
#!/bin/sh
set -eu
umask 077
key=/etc/munge/munge.key
mkdir -p /etc/munge
printf '%s' '{encoded}' | base64 -d > "$key.fleetspec"
chown munge:munge "$key.fleetspec"
chmod 0400 "$key.fleetspec"
if cmp -s "$key.fleetspec" "$key" 2>/dev/null; then rm -f "$key.fleetspec"; verb=start; else mv "$key.fleetspec" "$key"; verb=restart; fi
systemctl enable --quiet munge.service slurmd.service
systemctl "$verb" munge.service
systemctl "$verb" slurmd.service
echo "fleetspec join: munge and slurmd ${{verb}}ed"
""".encode()


def join(fleet: Fleet, hosts: Sequence[str], control: SlurmControl, verify: Verify,
         on_line: Callable[[str], None] = lambda line: None, timeout_s: float = REGISTER_TIMEOUT_S,
         poll_s: float = 2.0, register: Register | None = None) -> list[Joined]:
    """Hold ``hosts``, register them (``register``), wait for their slurmd to register with
    slurmctld, verify them, resume those that pass."""
    check_hosts(fleet, hosts)
    hold(control, hosts)
    results: dict[str, Joined] = {}

    def stays_out(host: str, reason: str) -> None:
        reason = reason[:REASON_MAX].replace("\n", " ")
        control.drain([host], reason)
        results[host] = Joined(host, False, reason)
        on_line(f"{host}: stays drained, {reason}")

    unstarted = list(hosts) if register is not None else []  # munge and slurmd not started yet
    why_not: dict[str, str] = {}
    waiting = list(hosts)
    deadline = time.monotonic() + timeout_s
    while True:
        if unstarted and register is not None:  # a node still booting is unreachable: tried again
            answers = register(unstarted)
            for host, (retry, why) in sorted(answers.items()):
                if not retry:
                    stays_out(host, f"{APPLY_REASON_PREFIX}join: could not start munge and slurmd: {why}")
                why_not[host] = why
            unstarted = [h for h in unstarted if h in answers and answers[h][0]]
            waiting = [h for h in waiting if h not in results]
        asked = [h for h in waiting if h not in unstarted]
        states = control.states(asked) if asked else {}
        waiting = [h for h in waiting if h in unstarted or not registered(states.get(h, ("unknown", ""))[0])]
        if not waiting or time.monotonic() >= deadline:
            break
        time.sleep(poll_s)
    for host in unstarted:
        stays_out(host, f"{APPLY_REASON_PREFIX}join: not reachable within {timeout_s:g} s to start munge and "
                        f"slurmd: {why_not.get(host, 'no answer')}")
    waiting = [h for h in waiting if h not in results]
    for host in waiting:
        stays_out(host, f"{APPLY_REASON_PREFIX}join: slurmd did not register within {timeout_s:g} s")
    up = [h for h in hosts if h not in results]
    if up:
        report = verify(fleet, up)
        by_host = {n.hostname: n for n in report.nodes}
        passed = []
        for host in up:
            node = by_host.get(host)
            failed = [c for c in node.checks if c.status is Status.DRIFT] if node else []
            if node is not None and not failed:
                passed.append(host)
                continue
            detail = f"{failed[0].component}: {failed[0].message}" if failed else "no verify result"
            more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
            stays_out(host, f"{APPLY_REASON_PREFIX}join: verify failed: {detail}"[: REASON_MAX - len(more)] + more)
        if passed:
            control.resume(passed)
            for host in passed:
                results[host] = Joined(host, True, "")
                on_line(f"{host}: verify passed, resumed")
    return [results[h] for h in hosts]
