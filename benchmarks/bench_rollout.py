"""Benchmark: the controller's side of a rollout (issue #30 item 7).

``--wave N``: one wave's Ansible run as apply makes it (``fleetspec.apply.ansible.run_playbook``,
forks = the wave, the wave's own inventory) over N hosts on ``ansible_connection=local``,
with the rollout tests' stand-in play (tests/apply/playbook/site.yml: a skipped failure
check, a skipped slow step, and a file written per host). The process's CPU (run.py
measures it with its children) divided by N is the controller's CPU per node: with local
connections it is Ansible's own work per host and task (templating, forking a worker,
the module run), without SSH. ``--model``: the modelled duration of the 20,000-node driver
bump (benchmarks/fleetgen.py ``driver_bump_yaml``) at 12.75 min per batch, printed as
minutes, with forks unlimited and at 50 (ansible.cfg's default).

``--native N``: the controller's side of one Slurm-native wave (#30 item 2) over N nodes:
``scontrol reboot`` once, ``sinfo`` polls, each node's result (the real H200 node's
facts document, docs/facts.md shape, as the node's converge writes it) read and verified
against the fleet (``fleetspec.verify.compare``): what ``apply --engine slurm-native``
does per wave. The Slurm clients answer from canned output (no slurmctld with N nodes
here): their own CPU is per wave, not per node, and is not counted. Prints the CPU of
that work (process time) per node and how many Slurm client calls the wave made.
``--native-in-place N``: the same for a wave whose change
needs no reboot: ``scontrol update ... state=drain`` once, ``squeue``/``sinfo`` polls until
drained, one converge request written per node, the results read (each answering its
request) and verified, the requests withdrawn, ``scontrol update ... state=resume`` once.

    python3 benchmarks/bench_rollout.py --wave 1000
    python3 benchmarks/bench_rollout.py --native 1000
    python3 benchmarks/bench_rollout.py --native-in-place 1000
    python3 benchmarks/bench_rollout.py --model
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))


def wave(hosts: int, forks: int) -> None:
    from fleetspec.apply.ansible import run_playbook

    names = [f"node-{i:05d}" for i in range(hosts)]
    with tempfile.TemporaryDirectory(prefix="fleetspec-bench-rollout-") as tmp:
        work = Path(tmp)
        (work / "markers").mkdir()
        inventory = work / "inventory.yml"
        inventory.write_text(yaml.safe_dump({"all": {
            "hosts": dict.fromkeys(names),
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable,
                     "marker_dir": str(work / "markers")}}}))
        result = run_playbook(inventory, project_dir=ROOT / "tests" / "apply" / "playbook", limit=names,
                              extravars={"fleetspec_allow_reboot": False}, forks=forks, work_dir=work)
        if not result.ok or len(list((work / "markers").iterdir())) != hosts:
            raise SystemExit(f"the wave's run failed: {result.status} {result.failed_hosts[:5]}")


def native(hosts: int, in_place: bool = False) -> None:
    import json
    import subprocess
    import time

    sys.path.insert(0, str(ROOT))
    from fleetspec.apply.control import SlurmControl
    from fleetspec.apply.slurm_native import NativeSlurm
    from fleetspec.node_side.hostlist import compress
    from fleetspec.pipeline import compile_text
    from tests.apply.harness import upgraded
    from tests.verify.h200_facts import h200_facts

    spec = yaml.safe_load((ROOT / "tests" / "apply" / "specs" / "multi-v2.yaml").read_text())
    template = spec["spec"]["racks"][0]["nodes"][0]
    spec["spec"]["racks"] = [{"name": f"r{r:03d}", "leaf": "leaf-01", "nodes": [
        {**template, "hosts": f"h200-[{r * 16 + 1:04d}-{min(hosts, r * 16 + 16):04d}]"}]}
        for r in range((hosts + 15) // 16)]
    fleet = compile_text(yaml.safe_dump(spec), "native.yaml").fleet
    names = [n.hostname for n in fleet.nodes]
    facts = upgraded(h200_facts(names[0]), "2.28.9")
    with tempfile.TemporaryDirectory(prefix="fleetspec-bench-native-") as tmp:
        results = Path(tmp)
        sinfo = "".join(f"{h}|idle|none\n" for h in names)

        calls: list[str] = []
        if in_place:
            sinfo = sinfo.replace("|idle|none", "|drained|fleetspec: NCCL")

        def run(argv):  # the Slurm clients, canned (counted: per wave, never per node)
            calls.append(argv[0])
            return subprocess.CompletedProcess(list(argv), 0, sinfo if argv[0] == "sinfo" else "", "")

        engine = NativeSlurm(run, results, version=2, poll_s=0, requests=results / "requests")
        control = SlurmControl(run, poll_s=0)
        cpu = 0.0
        request = None
        if in_place:  # drained until Slurm shows it, then asked
            start = time.process_time()
            control.drain(names, "fleetspec: NCCL 2.28.3 -> 2.28.9")
            assert not control.wait_drained(names, 60) and not engine.settled(names)
            request = engine.request(names)
            cpu += time.process_time() - start
        else:
            engine.reboot(names, "fleetspec: driver")
        for h in names:  # the nodes' work: each writes its result
            (results / f"{h}.json").write_text(json.dumps({"host": h, "ok": True, "version": 2, "error": None,
                                                           "request": request, "facts": {**facts, "hostname": h}}))
        start = time.process_time()
        outcome = engine.wait(names, request=request)
        report = engine.verify(fleet, outcome.facts, names)
        if in_place:
            engine.withdraw(names)
            control.resume(names)
        cpu += time.process_time() - start
    drift = [c for n in report.nodes for c in n.checks if c.status.name == "DRIFT"]
    if outcome.failed or drift or len(outcome.facts) != len(names):
        raise SystemExit(f"the native wave failed: {list(outcome.failed.items())[:3]} {drift[:3]}")
    print(f"{'native-in-place' if in_place else 'native'} hosts={len(names)} cpu_s={cpu:.3f} "
          f"per_node_s={cpu / len(names):.5f} ({compress(names[:32])}...) slurm_calls={len(calls)}")


def model() -> None:
    from fleetgen import driver_bump_yaml

    from fleetspec.pipeline import compile_text
    from fleetspec.plan import make_plan
    from fleetspec.plan.schedule import with_rollout_figures

    old = compile_text(driver_bump_yaml(20000), "old.yaml").fleet
    new = compile_text(driver_bump_yaml(20000, bumped=True), "new.yaml").fleet
    plan = make_plan(new, old)
    for forks in (None, 50):
        sched = with_rollout_figures(plan, 12.75, forks).schedule
        print(f"forks={forks or 'wave'} minutes={sched.minutes:.2f} lanes={sched.lanes} "
              f"serial_minutes={sum(s.batches for s in sched.steps) * 12.75:.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--wave", type=int, metavar="HOSTS")
    parser.add_argument("--forks", type=int, default=0, help="default: the whole wave")
    parser.add_argument("--native", type=int, metavar="HOSTS")
    parser.add_argument("--native-in-place", type=int, metavar="HOSTS")
    parser.add_argument("--model", action="store_true")
    args = parser.parse_args()
    if args.wave:
        wave(args.wave, args.forks or args.wave)
    if args.native:
        native(args.native)
    if args.native_in_place:
        native(args.native_in_place, in_place=True)
    if args.model:
        model()
    return 0


if __name__ == "__main__":
    sys.exit(main())
