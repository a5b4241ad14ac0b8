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

    python3 benchmarks/bench_rollout.py --wave 1000
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
    parser.add_argument("--model", action="store_true")
    args = parser.parse_args()
    if args.wave:
        wave(args.wave, args.forks or args.wave)
    if args.model:
        model()
    return 0


if __name__ == "__main__":
    sys.exit(main())
