"""The rollout test harness: a real Slurm cluster's nodes as Ansible hosts on local
connections, the stand-in playbook (tests/apply/playbook), and verify over the real H200
node's facts, upgraded where the playbook ran. Runnable as a child process
(``python -m tests.apply.harness``) so a test can SIGKILL an apply in the middle."""

from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

import yaml

from fleetspec.apply.ansible import run_playbook
from fleetspec.apply.control import SlurmControl, local_runner
from fleetspec.apply.rollout import ApplyOptions, Engines, apply_plan
from fleetspec.lab.slurm import Cluster
from fleetspec.pipeline import compile_file, compile_text
from fleetspec.plan import plan_against_state, restrict_to_hosts
from fleetspec.plan.health_policy import policy_digest
from fleetspec.state import StateStore, open_state, parse_location
from fleetspec.verify.compare import compare
from tests.verify.h200_facts import h200_facts

HERE = Path(__file__).resolve().parent
ROOT_DIR = HERE.parents[1]
V1, V2 = HERE / "specs" / "v1.yaml", HERE / "specs" / "v2.yaml"
HOSTS = ["h200-001", "h200-002", "h200-003", "h200-004"]


def upgraded(facts: dict, nccl: str) -> dict:
    """The node after the playbook moved its system NCCL (the venv copy stays a shadow)."""
    out = copy.deepcopy(facts)
    for lib in out["nccl"]["libraries"]:
        if lib["origin"] == "system":
            lib["version"] = nccl
    out["nccl"]["versions"] = sorted({lib["version"] for lib in out["nccl"]["libraries"]})
    return out


class Rollout:
    def __init__(self, cluster: Cluster, tmp: Path, initial: bool = True, state: str | None = None,
                 hosts: list[str] | None = None, base: Path = V1) -> None:
        self.cluster = cluster
        self.hosts = list(hosts or HOSTS)
        self.markers = tmp / "markers"
        self.markers.mkdir(exist_ok=True)
        self.inventory = tmp / "inventory.yml"
        self.inventory.write_text(yaml.safe_dump({"all": {
            "hosts": {h: {"ansible_connection": "local", "ansible_python_interpreter": "python3"} for h in self.hosts},
            "vars": {"marker_dir": str(self.markers)},
        }}))
        self.store = open_state(parse_location(state), "rollout", tmp / "work") if state else \
            StateStore(tmp / "state", "rollout")
        self.broken_after_upgrade: set[str] = set()
        self.node_roots: Path | None = None  # with node_health(): each host's stand-in node root
        self.policy: str | None = None  # the applied spec's health policy digest: what the playbook installs
        if initial:
            with self.store.lock("test"):
                self.store.record_applied(compile_file(base).fleet, "initial fleet")

    def verify(self, fleet, hosts):
        facts = {}
        for host in hosts:
            ran = (self.markers / host).exists() and host not in self.broken_after_upgrade
            facts[host] = upgraded(h200_facts(host), "2.28.9") if ran else h200_facts(host)
        return compare(fleet, facts, hosts=hosts)

    def node_health(self, tmp: Path) -> Path:
        """Turn on apply's health gate: the real node check on a stand-in root per host
        (tests/health/nodes.py: kernel log, nvidia-smi printing the real H200's XML, IB port),
        as apply's gate runs it on a node over Ansible (read-only)."""
        from tests.health.nodes import make_node

        self.node_roots = tmp / "nodes"
        for host in HOSTS:
            make_node(self.node_roots / host)
        return self.node_roots

    def health(self, fleet, hosts):
        import os

        from fleetspec.node_side.classify import reason
        from fleetspec.node_side.collector import Host
        from fleetspec.node_side.node_check import run_check
        from fleetspec.render.health import node_config

        assert self.node_roots is not None
        if fleet.health is None:  # a spec without a policy: the gate's own
            fleet = compile_text(V2.read_text() + "  health: {interval: 60, checks: [kernel-log, gpu-memory]}\n").fleet
        sick = {}
        for host in hosts:
            root = self.node_roots / host
            path = os.environ["PATH"]
            os.environ["PATH"] = f"{root / 'bin'}{os.pathsep}{path}"
            try:
                verdict = run_check(node_config(fleet), host, Host(str(root)), persist=False)
            finally:
                os.environ["PATH"] = path
            if verdict["action"] != "none":
                sick[host] = f"{verdict['status']}: {reason(verdict)}"
        return sick

    def engines(self, fail_hosts=(), fail_message=None, slow_hosts=(), hook_fail_hosts=()) -> Engines:
        def playbook(**kwargs):
            extra = {"fail_hosts": list(fail_hosts), "slow_hosts": list(slow_hosts),
                     "hook_fail_hosts": list(hook_fail_hosts), "slurm_conf": str(self.cluster.conf),
                     **({"health_policy": self.policy, "node_roots": str(self.node_roots)}
                        if self.policy and self.node_roots is not None else {}),
                     **({"fail_message": fail_message} if fail_message else {})}
            kwargs["extravars"] = {**kwargs.get("extravars", {}), **extra}
            return run_playbook(self.inventory, project_dir=HERE / "playbook", **kwargs)

        return Engines(run_playbook=playbook, verify=self.verify,
                       slurm=SlurmControl(self.slurm_runner(), poll_s=0.2),
                       kubernetes=None, all_hosts=lambda: list(self.hosts),
                       health=self.health if self.node_roots is not None else None)

    def slurm_runner(self):
        """apply's Slurm client runner, as where the cluster's clients are installed: the
        host's for 22.05, inside the release's root for a newer one (`Cluster.prefix`)."""
        run = local_runner({"SLURM_CONF": str(self.cluster.conf)})
        prefix = self.cluster.prefix
        return run if not prefix else (lambda argv: run([*prefix, *argv]))

    def apply(self, spec: Path, fail_hosts=(), max_unavailable=2, fail_message=None, redact=None, slow_hosts=(),
              limit=None, hook_fail_hosts=(), report=None, drain_timeout_s=20.0):
        """Plan against the state and apply; ``limit`` restricts it to those hosts, as 'apply --limit' does.
        ``report(plan)`` may return a second event sink (what 'apply' prints, `TextReport.emit`)."""
        events = []
        fleet = compile_file(spec).fleet
        self.policy = policy_digest(fleet)
        with self.store.lock("apply"):
            plan = plan_against_state(fleet, self.store.read(), canary=1, max_unavailable=max_unavailable)
            engines = self.engines(fail_hosts, fail_message, slow_hosts, hook_fail_hosts)
            if limit is not None:
                plan = restrict_to_hosts(plan, set(limit), f"--limit {','.join(limit)}")
                engines.all_hosts = lambda: [h for h in self.hosts if h in limit]
            sink = report(plan) if report is not None else None
            emit = events.append if sink is None else lambda e: (events.append(e), sink(e))
            result = apply_plan(plan, self.store, engines, ApplyOptions(drain_timeout_s=drain_timeout_s,
                                                                              hooks_dir=spec.parent),
                                emit, redact)
        return plan, result, events

    def sinfo(self) -> dict[str, tuple[str, str]]:
        out = self.cluster.run("sinfo", "-h", "-N", "-o", "%N|%T|%E").stdout
        rows = [line.split("|") for line in out.splitlines()]
        return {r[0]: (r[1], r[2]) for r in rows}

    def settled(self, timeout: float = 60.0) -> dict[str, tuple[str, str]]:
        """sinfo once no node is still marked not-responding ("idle*": slurmctld pings a
        resumed node before it shows plain idle)."""
        end = time.monotonic() + timeout
        while True:
            states = self.sinfo()
            if not any(state.endswith("*") for state, _ in states.values()) or time.monotonic() > end:
                return states
            time.sleep(0.5)

    def installed_policy(self, host: str) -> str | None:
        """The health policy the playbook installed on ``host`` (its digest), None for none."""
        assert self.node_roots is not None
        path = self.node_roots / host / "etc" / "fleetspec" / "health.json"
        return path.read_text().strip() if path.exists() else None

    def touched(self) -> set[str]:
        return {p.name for p in self.markers.iterdir()}


if __name__ == "__main__":  # python -m tests.apply.harness SLURM_ROOT TMP SPEC SLOW_HOST [STATE_LOCATION]
    slurm_root, tmp, spec, slow = sys.argv[1:5]
    child = Rollout(Cluster(Path(slurm_root)), Path(tmp), initial=False,
                    state=sys.argv[5] if len(sys.argv) > 5 else None)
    print("starting", flush=True)
    child.apply(Path(spec), slow_hosts=[slow])
