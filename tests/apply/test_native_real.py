"""Issue #30 item 2 on a real slurmctld: the Slurm-native path.

A driver change (multi-v3): apply hands each wave to Slurm with a real ``scontrol reboot
ASAP nextstate=RESUME reason="fleetspec: ..."``; the six real slurmd's run a ``RebootProgram`` that does what a
node's boot does: slurmd stops, ``fleetspec.node_side.converge`` verifies the partition's
signed bundle (real ``ssh-keygen -Y``) and runs it with a real ``ansible-playbook -c local``,
writes its result, and only a converged node starts slurmd again (``slurmd -b``: "report
node rebooted", so slurmctld sees the reboot done and resumes it). The controller reads
``sinfo`` and the results, verifies, and records the waves.

An NCCL change (multi-v2, no reboot needed): apply drains each wave through Slurm, waits
until Slurm shows the nodes drained, writes one converge request per node; each node's
``fleetspec-converge-request.timer`` (here a loop calling the same entry every 0.3 s, with
a real ``sinfo``) finds it, checks it is drained by fleetspec, converges from its signed
bundle and answers; apply verifies and resumes. No ``scontrol reboot``, slurmd never
restarts.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetspec.apply.bundle import publish
from fleetspec.apply.control import local_runner
from fleetspec.apply.rollout import ApplyOptions, apply_plan
from fleetspec.apply.slurm_native import NativeSlurm
from fleetspec.lab.slurm import Cluster, Daemon, process_start_time
from fleetspec.pipeline import compile_file
from fleetspec.plan import plan_against_state
from fleetspec.render.slurm import render_slurm
from fleetspec.state import StateStore
from fleetspec.verify.compare import compare
from tests.apply.harness import HERE, upgraded
from tests.slurm.conftest import slurm_release  # noqa: F401  (the release fixture)
from tests.verify.h200_facts import h200_facts

pytestmark = pytest.mark.slurm

ROOT = HERE.parents[1]
MULTI_V1, MULTI_V2 = HERE / "specs" / "multi-v1.yaml", HERE / "specs" / "multi-v2.yaml"
MULTI_V3 = HERE / "specs" / "multi-v3.yaml"  # v2 and a driver bump: the waves reboot
HOSTS = [f"h200-00{i}" for i in range(1, 7)]
PARTITION = {h: ("hopper-b" if h in ("h200-005", "h200-006") else "nvidia-hopper") for h in HOSTS}

SITE = """\
- name: Converge (stand-in for the roles, records the NCCL its bundle pins)
  hosts: all
  gather_facts: false
  tasks:
    - name: Record
      ansible.builtin.copy:
        dest: "{{ lookup('env', 'FLEETSPEC_TEST_MARKERS') }}/{{ inventory_hostname }}"
        content: "{{ fleetspec_stack.nccl }}"
        mode: "0644"
"""

# RebootProgram: slurmd runs it (through sh -c); it finds its slurmd and the node's name,
# and leaves the "boot" to a detached script, as a real reboot leaves slurmd behind.
REBOOT = """#!/bin/bash
pid=$PPID
while [ "$pid" -gt 1 ]; do
  case "$(tr '\\0' ' ' < /proc/$pid/cmdline)" in slurmd\\ *) break;; esac
  pid=$(awk '{{print $4}}' /proc/$pid/stat)
done
node=$(tr '\\0' '\\n' < /proc/$pid/cmdline | sed -n '/^-N$/{{n;p}}')
setsid {boot} "$pid" "$node" </dev/null >>{work}/boot.log 2>&1 &
exit 0
"""

# The node's boot: slurmd is gone, the converge unit runs (Before=slurmd), and slurmd
# starts only when it converged (the unit is Requires='d by slurmd's drop-in).
BOOT = """#!/bin/bash
pid=$1 node=$2
kill "$pid" 2>/dev/null
while [ "$(awk '{{print $3}}' /proc/$pid/stat 2>/dev/null || echo Z)" != Z ]; do sleep 0.1; done
export PYTHONPATH={root} FLEETSPEC_TEST_MARKERS={work}/markers SLURM_CONF={conf}
{python} -m fleetspec.node_side.converge --host "$node" --bundle "$(cat {work}/bundle-of/$node)" \\
    --fleet rollout --partition "$(cat {work}/partition-of/$node)" \\
    --allowed-signers {work}/allowed_signers --state-dir {work}/state/$node --result-dir {work}/results \\
    --ansible-playbook {ansible_playbook} --collect-root {work}/noroot || exit 1
echo $$ > {work}/booted/$node
exec slurmd -b -D -N "$node"
"""


@pytest.fixture(scope="module")
def native(slurm_installed, tmp_path_factory):
    work = tmp_path_factory.mktemp("native")
    for sub in ("markers", "results", "booted", "bundle-of", "playbooks", "state", "requests"):
        (work / sub).mkdir()
    for host in HOSTS:
        (work / "partition-of" / host).parent.mkdir(exist_ok=True)
        (work / "partition-of" / host).write_text(PARTITION[host])
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / "key")], check=True)
    kind, key = (work / "key.pub").read_text().split()[:2]
    (work / "allowed_signers").write_text(f'fleetspec namespaces="fleetspec-bundle" {kind} {key}\n')
    (work / "playbooks" / "site.yml").write_text(SITE)
    (work / "playbooks" / "ansible.cfg").write_text("[defaults]\ninterpreter_python = /usr/bin/python3\n")
    cluster = Cluster(work / "slurm", render_slurm(compile_file(MULTI_V1).fleet))
    fmt = {"root": ROOT, "work": work, "conf": cluster.conf, "python": sys.executable, "boot": work / "boot.sh",
           "ansible_playbook": Path(sys.executable).parent / "ansible-playbook"}
    (work / "reboot.sh").write_text(REBOOT.format(**fmt))
    (work / "boot.sh").write_text(BOOT.format(**fmt))
    for script in ("reboot.sh", "boot.sh"):
        (work / script).chmod(0o755)
    with open(cluster.conf, "a") as conf:
        conf.write(f"RebootProgram={work / 'reboot.sh'}\nResumeTimeout=120\n")
    cluster.start()
    try:
        yield cluster, work
    finally:
        _adopt_booted(cluster, work)
        cluster.stop()


def _adopt_booted(cluster: Cluster, work: Path) -> None:
    """The slurmd's the boot script started are this test's: stop() ends them by pid."""
    for marker in (work / "booted").iterdir():
        pid = int(marker.read_text())
        start = process_start_time(pid)
        if start is not None and all(d.pid != pid for d in cluster.daemons):
            cluster.daemons.append(Daemon(f"slurmd-{marker.name}", pid, start))
    cluster._save_daemons()


def _verify_from_results(work: Path):
    """Verify on the nodes' results: each result carries real collector facts of this
    machine (no GPU), so the H200 node's facts stand in, upgraded to the NCCL the node's
    own play recorded from its bundle (and to the fleet's driver: a driver change's reboot)."""
    def verify(fleet, facts, hosts):
        assert set(facts) == set(hosts) and all(facts[h].get("schema") for h in hosts)
        found = {}
        for h in hosts:
            doc = upgraded(h200_facts(h), (work / "markers" / h).read_text())
            driver = fleet.stack(fleet.node(h).stack).driver
            doc["nvidia"]["driver_version"] = doc["nvidia"]["smi_driver_version"] = driver
            found[h] = doc
        return compare(fleet, found, hosts=hosts)
    return verify


def _apply(cluster: Cluster, work: Path, store: StateStore, version: int, override: dict | None = None,
           spec: Path = MULTI_V3, drain_timeout: float = 20, on_event=None):
    """Publish both partitions' bundles, point each node at its own (or ``override``'s), apply."""
    fleet = compile_file(spec).fleet
    for partition in ("nvidia-hopper", "hopper-b"):
        published = publish(fleet, partition, version, f"file:{work / 'key'}", work, work / "playbooks",
                            work / "mirror")
        for host in HOSTS:
            if PARTITION[host] == partition:
                (work / "bundle-of" / host).write_text(str((override or {}).get(host, published.bundle)))
    os.chmod(work / "key", 0o600)
    events: list = []
    commands: list[list[str]] = []
    local = local_runner({"SLURM_CONF": str(cluster.conf)})

    def run(argv):
        commands.append(list(argv))
        return local(argv)

    with store.lock("apply"):
        plan = plan_against_state(fleet, store.read(), canary=1, max_unavailable=2)
        from fleetspec.apply.control import SlurmControl
        from fleetspec.apply.rollout import Engines

        engines = Engines(run_playbook=_no_ssh, verify=None, slurm=SlurmControl(run, poll_s=0.2), kubernetes=None,
                          all_hosts=lambda: list(HOSTS),
                          native=NativeSlurm(run, work / "results", version, timeout_s=150, poll_s=0.3,
                                             verify=_verify_from_results(work), requests=work / "requests"))
        def emit(event):
            events.append(event)
            if on_event is not None:
                on_event(event)

        result = apply_plan(plan, store, engines, ApplyOptions(drain_timeout_s=drain_timeout), emit)
    return plan, result, events, commands


def _no_ssh(**kwargs):
    raise AssertionError(f"the Slurm-native path ran an Ansible play from the controller: {kwargs.get('limit')}")


def test_waves_go_to_slurm_and_the_nodes_converge_themselves(native, tmp_path):
    cluster, work = native
    store = StateStore(tmp_path / "state", "rollout")
    with store.lock("test"):
        store.record_applied(compile_file(MULTI_V1).fleet, "initial fleet")
    plan, result, events, _ = _apply(cluster, work, store, version=2)
    _adopt_booted(cluster, work)
    assert result.ok, [e.message for e in events if not e.ok]
    assert sorted(p.name for p in (work / "markers").iterdir()) == HOSTS
    assert {(work / "markers" / h).read_text() for h in HOSTS} == {"2.28.9"}  # the bundle's pinned tuple
    for host in HOSTS:
        doc = json.loads((work / "results" / f"{host}.json").read_text())
        assert doc["ok"] and doc["version"] == 2 and doc["spec_digest"].startswith("sha256:")
    log = cluster.log("slurmctld.log")
    assert log.count("reboot request queued for nodes") == len(plan.waves)
    handed = [e for e in events if e.kind == "drain"]
    assert len(handed) == len(plan.waves) and all("reboot ASAP, nextstate=RESUME" in e.message for e in handed)
    states = {line.split("|")[0]: line.split("|")[1] for line in
              cluster.run("sinfo", "-h", "-N", "-o", "%N|%T").stdout.split()}
    assert all(states[h] == "idle" for h in HOSTS), states  # Slurm resumed every node
    assert not plan_against_state(
        compile_file(MULTI_V3).fleet, store.read(), canary=1, max_unavailable=2).waves


@contextlib.contextmanager
def _converge_timers(cluster: Cluster, work: Path):
    """Each node's ``fleetspec-converge-request.timer``: the same entry the unit runs
    (``converge_request.main``), every 0.3 s for each node, with a real ``sinfo`` against
    the test's slurmctld; one process for the six nodes (ended by pid)."""
    loop = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from fleetspec.node_side import converge_request\n"
        "work = Path(sys.argv[1])\n"
        "while True:\n"
        "    for host in sys.argv[2:]:\n"
        "        converge_request.main(['--host', host, '--requests', str(work / 'requests'),\n"
        "            '--bundle', (work / 'bundle-of' / host).read_text(),\n"
        "            '--fleet', 'rollout', '--partition', (work / 'partition-of' / host).read_text(),\n"
        "            '--allowed-signers', str(work / 'allowed_signers'), '--state-dir', str(work / 'state' / host),\n"
        "            '--result-dir', str(work / 'results'),\n"
        "            '--ansible-playbook', str(Path(sys.executable).parent / 'ansible-playbook'),\n"
        "            '--collect-root', str(work / 'noroot')])\n"
        "    time.sleep(0.3)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FLEETSPEC_TEST_MARKERS": str(work / "markers"),
           "SLURM_CONF": str(cluster.conf)}
    with open(work / "timers.log", "ab") as log:
        proc = subprocess.Popen([sys.executable, "-c", loop, str(work), *HOSTS], env=env, stdout=log,
                                stderr=subprocess.STDOUT)
    try:
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _slurmd_started(cluster: Cluster) -> dict[str, str]:
    """Each node's SlurmdStartTime: it changes when slurmd restarts (a reboot)."""
    out = cluster.run("scontrol", "-o", "show", "node").stdout
    return {re.search(r"NodeName=(\S+)", line).group(1): re.search(r"SlurmdStartTime=(\S+)", line).group(1)
            for line in out.splitlines() if "NodeName=" in line}


def _idle_soon(cluster: Cluster, timeout_s: float = 30.0) -> dict[str, str]:
    """The nodes' states once all are idle, or at the timeout. A resumed node reads
    ``idle*`` until slurmctld's ping right after the resume answers (slurmctld.log: "Node
    h200-003 now responding" within a second)."""
    end = time.monotonic() + timeout_s
    while True:
        states = {line.split("|")[0]: line.split("|")[1] for line in
                  cluster.run("sinfo", "-h", "-N", "-o", "%N|%T").stdout.split()}
        if all(states.get(h) == "idle" for h in HOSTS) or time.monotonic() >= end:
            return {h: states.get(h, "") for h in HOSTS}
        time.sleep(0.5)


def test_a_change_without_reboot_drains_converges_in_place_and_resumes(native, tmp_path):
    cluster, work = native
    store = StateStore(tmp_path / "state", "rollout")
    with store.lock("test"):
        store.record_applied(compile_file(MULTI_V1).fleet, "initial fleet")
    booted = {p.name: p.read_text() for p in (work / "booted").iterdir()}
    started = _slurmd_started(cluster)
    reboots = cluster.log("slurmctld.log").count("reboot request queued for nodes")
    with _converge_timers(cluster, work):
        plan, result, events, commands = _apply(cluster, work, store, 3, spec=MULTI_V2)
    assert result.ok, [e.message for e in events if not e.ok]
    assert all(e.message.endswith("slurm-native (in-place)") for e in events if e.kind == "wave-start")
    assert not [c for c in commands if c[:2] == ["scontrol", "reboot"]]  # no reboot issued
    assert cluster.log("slurmctld.log").count("reboot request queued for nodes") == reboots
    assert {p.name: p.read_text() for p in (work / "booted").iterdir()} == booted  # no boot ran
    assert _slurmd_started(cluster) == started  # no slurmd restarted
    drains = [c for c in commands if c[:2] == ["scontrol", "update"] and "state=drain" in c]
    assert len(drains) == len(plan.waves) and all(c[-1].startswith("reason=fleetspec: ") for c in drains)
    assert len([c for c in commands if "state=resume" in c]) == len(plan.waves)
    for host in HOSTS:
        doc = json.loads((work / "results" / f"{host}.json").read_text())
        assert doc["ok"] and doc["version"] == 3 and doc["request"].startswith("3-"), doc
        assert not (work / "requests" / f"{host}.json").exists()  # withdrawn after the wave
    assert {(work / "markers" / h).read_text() for h in HOSTS} == {"2.28.9"}
    assert _idle_soon(cluster) == {h: "idle" for h in HOSTS}  # apply resumed every node
    assert not plan_against_state(compile_file(MULTI_V2).fleet, store.read(), canary=1, max_unavailable=2).waves


def test_a_failed_converge_in_place_leaves_the_node_drained_with_the_reason(native, tmp_path):
    cluster, work = native
    store = StateStore(tmp_path / "state", "rollout")
    with store.lock("test"):
        store.record_applied(compile_file(MULTI_V1).fleet, "initial fleet")
    fleet = compile_file(MULTI_V2).fleet
    published = publish(fleet, "nvidia-hopper", 4, f"file:{work / 'key'}", work, work / "playbooks", work / "mirror")
    bad = work / "mirror" / "tampered-4.tar.gz"
    data = bytearray(published.bundle.read_bytes())
    data[100] ^= 1
    bad.write_bytes(bytes(data))
    shutil.copy(str(published.signature), str(bad) + ".sig")
    plan = plan_against_state(fleet, store.read(), canary=1, max_unavailable=2)
    canary = next(w for w in plan.waves if w.canary and w.partition == "nvidia-hopper").hosts[0]
    try:
        with _converge_timers(cluster, work):
            _, result, events, commands = _apply(cluster, work, store, 4, {canary: bad}, spec=MULTI_V2)
        assert not result.ok and canary in result.drained
        assert not [c for c in commands if c[:2] == ["scontrol", "reboot"]]
        doc = json.loads((work / "results" / f"{canary}.json").read_text())
        assert not doc["ok"] and "bad bundle signature" in doc["error"] and doc["request"].startswith("4-")
        line = cluster.run("sinfo", "-h", "-N", "-n", canary, "-o", "%T|%E").stdout.strip()
        state, reason = line.split("|", 1)
        assert state == "drained" and reason.startswith("fleetspec: node converge failed"), line
        assert "bad bundle signature" in reason
        assert not (work / "requests" / f"{canary}.json").exists()
    finally:  # the next test's nodes start in service
        cluster.run("scontrol", "update", f"nodename={','.join(HOSTS)}", "state=resume", check=False)


def test_an_in_place_node_whose_job_outlives_the_drain_timeout_is_carried(native, tmp_path):
    """Item 5 on the in-place path: a job on h200-004 outlives the drain timeout, so its
    wave goes on without it (h200-004 resumed, at work); the job ends (cancelled when the
    carry is announced), and the round after the last wave drains it again and converges it
    in place. No reboot."""
    cluster, work = native
    store = StateStore(tmp_path / "state", "rollout")
    with store.lock("test"):
        store.record_applied(compile_file(MULTI_V1).fleet, "initial fleet")
    job = cluster.sbatch("-p", "nvidia-hopper", "-w", "h200-004", "-N", "1", script="#!/bin/sh\nsleep 300\n")
    job_id = job.stdout.strip().split(";")[0]
    assert job.returncode == 0 and job_id, job.stderr
    end = time.monotonic() + 30
    while cluster.run("squeue", "-h", "-j", job_id, "-o", "%T").stdout.strip() != "RUNNING":
        assert time.monotonic() < end, "the job never started"
        time.sleep(0.3)

    def cancel(event):
        if event.kind == "carried" and "h200-004" in event.hosts:
            cluster.run("scancel", job_id)

    try:
        with _converge_timers(cluster, work):
            _, result, events, commands = _apply(cluster, work, store, 5, spec=MULTI_V2, drain_timeout=3,
                                                 on_event=cancel)
    finally:
        cluster.run("scancel", job_id, check=False)
    assert result.ok and result.carried == (), [e.message for e in events if not e.ok]
    assert any(e.kind == "carried" and e.hosts == ("h200-004",) for e in events)
    assert any(e.kind == "wave-start" and e.wave == "nvidia-hopper#3 (carried)" for e in events)
    assert not [c for c in commands if c[:2] == ["scontrol", "reboot"]]
    doc = json.loads((work / "results" / "h200-004.json").read_text())
    assert doc["ok"] and doc["version"] == 5 and doc["request"].startswith("5-")
    assert _idle_soon(cluster) == {h: "idle" for h in HOSTS}


def test_a_request_for_a_node_in_service_is_refused_by_the_node(native):
    """Whoever writes a request: the node converges only when Slurm shows it drained by
    fleetspec. Here h200-006 is idle (in service): its converge entry refuses, runs no play,
    and says so in its result; the request counts as handled (it never runs later)."""
    from fleetspec.node_side import converge_request

    cluster, work = native
    host = "h200-006"
    marker = (work / "markers" / host).read_text() if (work / "markers" / host).exists() else None
    (work / "results" / f"{host}.json").unlink(missing_ok=True)
    (work / "requests" / f"{host}.json").write_text(json.dumps({"format": 1, "request": "9-0123456789abcdef",
                                                                "version": 9}))
    argv = ["--host", host, "--fleet", "rollout", "--partition", PARTITION[host],
            "--requests", str(work / "requests"), "--bundle", str(work / "mirror" / "nowhere"),
            "--allowed-signers", str(work / "allowed_signers"), "--state-dir", str(work / "state" / host),
            "--result-dir", str(work / "results"), "--collect-root", str(work / "noroot")]
    old = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(cluster.conf)
    try:
        assert converge_request.main(argv) == 1
        doc = json.loads((work / "results" / f"{host}.json").read_text())
        assert not doc["ok"] and doc["request"] == "9-0123456789abcdef"
        assert "not drained by fleetspec" in doc["error"] and "idle" in doc["error"], doc
        (work / "results" / f"{host}.json").unlink()
        assert converge_request.main(argv) == 0  # handled once: nothing written again
        assert not (work / "results" / f"{host}.json").exists()
    finally:
        os.environ.pop("SLURM_CONF") if old is None else os.environ.__setitem__("SLURM_CONF", old)
        (work / "requests" / f"{host}.json").unlink(missing_ok=True)
    assert ((work / "markers" / host).read_text() if (work / "markers" / host).exists() else None) == marker


def test_a_node_that_refuses_its_bundle_stops_the_rollout_and_stays_out(native, tmp_path):
    cluster, work = native
    store = StateStore(tmp_path / "state", "rollout")
    with store.lock("test"):
        store.record_applied(compile_file(MULTI_V1).fleet, "initial fleet")
    # The nvidia-hopper canary gets a bundle whose signature does not match (tampered after signing).
    fleet = compile_file(MULTI_V3).fleet
    published = publish(fleet, "nvidia-hopper", 6, f"file:{work / 'key'}", work, work / "playbooks", work / "mirror")
    bad = work / "mirror" / "tampered.tar.gz"
    data = bytearray(published.bundle.read_bytes())
    data[100] ^= 1
    bad.write_bytes(bytes(data))
    shutil.copy(str(published.signature), str(bad) + ".sig")
    plan = plan_against_state(fleet, store.read(), canary=1, max_unavailable=2)
    canary = next(w for w in plan.waves if w.canary and w.partition == "nvidia-hopper").hosts[0]
    _, result, events, _ = _apply(cluster, work, store, 6, {canary: bad})
    _adopt_booted(cluster, work)
    assert not result.ok and canary in result.drained
    doc = json.loads((work / "results" / f"{canary}.json").read_text())
    assert not doc["ok"] and "bad bundle signature" in doc["error"]
    assert any("bad bundle signature" in e.message for e in events if not e.ok)
    state = cluster.run("sinfo", "-h", "-N", "-n", canary, "-o", "%T").stdout.strip()
    assert state != "idle"  # not back in service: it never converged



def test_a_fifo_link_or_directory_planted_as_a_result_fails_that_node_never_the_wave(native):
    """#41 item 5: every node writes the results directory, so one node's root plants a FIFO,
    a link and a directory under other nodes' names. The controller's wait (real sinfo for
    the node still converging) neither hangs on the FIFO nor follows the link past its
    deadline; a directory it cannot clear keeps that node out of the reboot instead of
    raising out of it. Each is that node's failure, with why."""
    import threading

    cluster, work = native
    results = work / "results"
    victim = work / "victim.json"
    victim.write_text(json.dumps({"ok": True, "version": 99, "request": "99-0123456789abcdef", "facts": {}}))
    hosts = ["h200-001", "h200-002", "h200-003", "h200-004"]
    saved = {h: (results / f"{h}.json").read_bytes() for h in hosts if (results / f"{h}.json").is_file()}
    for host in hosts:
        (results / f"{host}.json").unlink(missing_ok=True)
    os.mkfifo(results / "h200-002.json")
    (results / "h200-003.json").mkdir()
    (results / "h200-003.json" / "x").write_text("")  # not empty: no rmdir clears it either
    os.symlink(victim, results / "h200-004.json")  # a result that would pass, planted for another node
    commands: list[list[str]] = []
    local = local_runner({"SLURM_CONF": str(cluster.conf)})

    def run(argv):
        commands.append(list(argv))
        return local(argv)

    controller = NativeSlurm(run, results, 99, timeout_s=1, poll_s=0.2)
    outcome: list = []
    waiter = threading.Thread(target=lambda: outcome.append(controller.wait(hosts, request="99-0123456789abcdef")),
                              daemon=True)
    started = time.monotonic()
    try:
        waiter.start()
        waiter.join(30)
        assert not waiter.is_alive(), "wait() hung on a planted result"
        assert time.monotonic() - started < 15
        failed = outcome[0].failed
        assert set(failed) == set(hosts) and not outcome[0].facts
        assert "h200-002.json is a FIFO (named pipe), not a regular file" in failed["h200-002"]
        assert "h200-003.json is a directory, not a regular file" in failed["h200-003"]
        assert "h200-004.json is a symbolic link, not a regular file" in failed["h200-004"]
        assert "within 1s" in failed["h200-001"]  # no result: its deadline, with Slurm's word
        assert any(c[0] == "sinfo" for c in commands)

        commands.clear()
        controller.reboot(["h200-003"], "fleetspec: test")  # its old result is a directory
        assert not [c for c in commands if c[0] == "scontrol"]  # not handed to Slurm
        back = controller.wait(["h200-003"])
        assert "cannot be removed" in back.failed["h200-003"] and "a directory" in back.failed["h200-003"]
    finally:
        if waiter.is_alive():  # the FIFO blocked the reader: a writer releases it
            os.close(os.open(results / "h200-002.json", os.O_WRONLY | os.O_NONBLOCK))
        (results / "h200-002.json").unlink(missing_ok=True)
        shutil.rmtree(results / "h200-003.json", ignore_errors=True)
        (results / "h200-004.json").unlink(missing_ok=True)
        for host, raw in saved.items():
            (results / f"{host}.json").write_bytes(raw)
    assert json.loads(victim.read_text())["version"] == 99


# At 26.05 (#47) the RebootProgram runs inside the release's root (its slurmd's child), which
# has no ansible-playbook: it hands the "boot" to the test (as a real RebootProgram hands it
# to the machine's firmware), which ends that slurmd and starts it again with `slurmd -b`.
REBOOT_HANDOFF = """#!/bin/bash
pid=$PPID
while [ "$pid" -gt 1 ]; do
  case "$(tr '\\0' ' ' < /proc/$pid/cmdline)" in slurmd\\ *) break;; esac
  pid=$(awk '{{print $4}}' /proc/$pid/stat)
done
node=$(tr '\\0' '\\n' < /proc/$pid/cmdline | sed -n '/^-N$/{{n;p}}')
echo "$pid" > {work}/boot-requests/$node
exit 0
"""


def test_reboot_asap_nextstate_resume_on_26_05(slurm_installed, slurm_release, tmp_path_factory):
    """NativeSlurm.reboot's command (``scontrol reboot ASAP nextstate=RESUME reason=...``) on
    real 26.05.5, whose scontrol(1) changed the reboot text since 22.05 (a bare ASAP now means
    nextstate=UNDRAIN; a node already REBOOT_REQUESTED ignores another request): the node
    drains for the reboot with fleetspec's reason, a job on it keeps running and it reboots
    only once the job ends, a second request meanwhile is no error, and once its slurmd comes
    back (``-b``) the node is IDLE with no DRAIN and no reason."""
    from fleetspec.lab.slurm_releases import release_prefix

    slurm_release("26.05")
    work = tmp_path_factory.mktemp("native-26.05")
    (work / "boot-requests").mkdir()
    cluster = Cluster(work / "slurm", render_slurm(compile_file(MULTI_V1).fleet),
                      prefix=release_prefix("26.05", work))
    (work / "reboot.sh").write_text(REBOOT_HANDOFF.format(work=work))
    (work / "reboot.sh").chmod(0o755)
    with open(cluster.conf, "a") as conf:
        conf.write(f"RebootProgram={work / 'reboot.sh'}\nResumeTimeout=120\n")
    cluster.start()
    try:
        run = local_runner({"SLURM_CONF": str(cluster.conf)})
        native = NativeSlurm(lambda argv: run([*cluster.prefix, *argv]), work / "results", 1, poll_s=0.2)
        job = cluster.sbatch("-p", "nvidia-hopper", "-w", "h200-001", "-N1", script="#!/bin/sh\nsleep 300\n")
        job_id = job.stdout.split()[-1]
        cluster.wait_job(job_id, {"RUNNING"})
        native.reboot(["h200-001"], "fleetspec: driver 580")
        native.reboot(["h200-001"], "fleetspec: driver 580")  # ignored by 26.05, not refused
        state, reason = native._states(["h200-001"])["h200-001"]
        assert "drain" in state or "reboot" in state, state
        assert reason.startswith("fleetspec: driver 580"), reason
        assert cluster.job(job_id)["JobState"] == "RUNNING"
        assert not (work / "boot-requests" / "h200-001").exists()  # ASAP: not while the job runs
        cluster.run("scancel", job_id)
        request = work / "boot-requests" / "h200-001"
        end = time.monotonic() + 60
        while not request.exists() and time.monotonic() < end:
            time.sleep(0.2)
        assert request.exists(), native._states(["h200-001"])
        pid = int(request.read_text())
        old = next(d for d in cluster.daemons if d.pid == pid)
        os.kill(pid, 15)
        while old.alive:
            time.sleep(0.1)
        cluster._spawn("slurmd-h200-001", "slurmd", "-b", "-D", "-N", "h200-001")
        end = time.monotonic() + 60
        while time.monotonic() < end and native._states(["h200-001"])["h200-001"] != ("idle", "none"):
            time.sleep(0.3)
        assert native._states(["h200-001"])["h200-001"] == ("idle", "none")
        assert cluster.run("scontrol", "--version").stdout.split()[-1].startswith("26.05.")
    finally:
        cluster.stop()
