"""Which nodes a plan would create are already running (#28 item 4), asked live: by apply
before it shows its plan, and by ``plan --live`` so the plan the operator reviews is the
one apply will run.

A node the state does not know is "new, provisioned before it takes jobs" only if nothing
says it runs. Asked, in this order, each only about the nodes still unexplained:

- Slurm (``sinfo -h -N``, where apply drains: here, in the lab, or on the first controller
  through Ansible): a node Slurm has is adopted, drained through Slurm.
- Kubernetes (``kubectl get nodes -o json`` and ``kubectl get pods --all-namespaces -o
  json``, where kubectl is on PATH, as apply cordons and drains): a node the cluster has is
  adopted, cordoned and drained; its pods outside DaemonSets are named.
- SSH (the fact collector over the rendered inventory plus ``--inventory``, as verify runs
  it): a node that answers is adopted though its scheduler does not have it (a standalone
  node, a Kubernetes node where kubectl is not at hand). No scheduler can drain it, so its
  waves skip the drain (``Plan.unowned``) but keep the canary and the budget.

A node nothing answers for stays new. The lab's hosts are made by ``lab up``: new by
construction, so SSH is not asked there. What was asked, and what could not be, is the
plan's ``membership`` in words; an offline plan (``plan`` without ``--live``) says so.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetspec.apply.control import ControlError, Runner, SlurmControl, checked, local_runner
from fleetspec.compile.ir import Fleet
from fleetspec.node_side.hostlist import compress
from fleetspec.plan.model import Action, Plan

# A pod that keeps a node busy: not a DaemonSet's (kubectl drain --ignore-daemonsets leaves
# those, they run on every node), not a static pod's mirror (the kubelet's own, kubectl drain
# does not evict it: annotation kubernetes.io/config.mirror, ownerReferences kind Node), not
# finished (status.phase Succeeded or Failed). Field names from the Kubernetes API reference,
# Pod v1: metadata.ownerReferences[].kind, metadata.annotations, spec.nodeName, status.phase
# (https://kubernetes.io/docs/reference/kubernetes-api/workload-resources/pod-v1/), and
# kubectl drain (https://kubernetes.io/docs/reference/kubectl/generated/kubectl_drain/).
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
FINISHED_PHASES = ("Succeeded", "Failed")
NAMED_PODS = 3  # pods named in a node's evidence; the rest are counted


class MembershipError(Exception):
    """A live answer could not be read; the message names the command."""


@dataclass(frozen=True)
class Membership:
    known: dict[str, str]  # node -> what its scheduler says of it: drained through the scheduler
    unowned: dict[str, str]  # node -> answers SSH, its scheduler does not have it: no drain
    asked: tuple[str, ...]  # what was consulted, one phrase each
    warnings: tuple[str, ...] = ()

    @property
    def words(self) -> str:
        return "; ".join(self.asked)


def created_nodes(plan: Plan) -> list[str]:
    """The fleet's nodes the plan would create (the state has no record of them)."""
    fleet = plan.fleet
    return sorted(c.host for c in plan.changes if c.action is Action.CREATE and c.host is not None
                  and fleet.node(c.host) is not None)


def kubernetes_known(nodes_json: str, pods_json: str, hosts: Sequence[str]) -> dict[str, str]:
    """{node: evidence} for the ``hosts`` the cluster has, from ``kubectl get nodes -o json``
    and ``kubectl get pods --all-namespaces -o json`` (each a v1 List of Node / Pod objects).
    Every node the cluster has is adopted (a schedulable node takes pods at any time); the
    evidence names its pods outside DaemonSets. Raises MembershipError on another shape."""
    nodes = _items(nodes_json, "kubectl get nodes -o json")
    pods = _items(pods_json, "kubectl get pods --all-namespaces -o json")
    wanted = set(hosts)
    have: dict[str, bool] = {}
    for node in nodes:
        name = _get(node, "metadata", "name")
        if isinstance(name, str) and name in wanted:
            have[name] = bool(_get(node, "spec", "unschedulable"))
    busy: dict[str, list[str]] = {}
    for pod in pods:
        where = _get(pod, "spec", "nodeName")
        if where in have and _keeps_node_busy(pod):
            busy.setdefault(where, []).append(f"{_get(pod, 'metadata', 'namespace')}/{_get(pod, 'metadata', 'name')}")
    found = {}
    for name, cordoned in sorted(have.items()):
        names = sorted(busy.get(name, []))
        pods_words = (f"{len(names)} pod(s) outside DaemonSets: {', '.join(names[:NAMED_PODS])}"
                      + (f" and {len(names) - NAMED_PODS} more" if len(names) > NAMED_PODS else "")
                      if names else "no pods outside DaemonSets")
        found[name] = f"Kubernetes has it ({'cordoned, ' if cordoned else ''}{pods_words})"
    return found


def _keeps_node_busy(pod: Mapping[str, Any]) -> bool:
    if _get(pod, "status", "phase") in FINISHED_PHASES:
        return False
    annotations = _get(pod, "metadata", "annotations") or {}
    if isinstance(annotations, Mapping) and MIRROR_ANNOTATION in annotations:
        return False
    owners = _get(pod, "metadata", "ownerReferences") or []
    kinds = {o.get("kind") for o in owners if isinstance(o, Mapping)} if isinstance(owners, list) else set()
    return not kinds & {"DaemonSet", "Node"}


def _items(text: str, command: str) -> list[Mapping[str, Any]]:
    try:
        data = json.loads(text)
    except ValueError:
        raise MembershipError(f"{command}: not JSON") from None
    items = data.get("items") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise MembershipError(f"{command}: no 'items' list (not a kubectl list)")
    return [i for i in items if isinstance(i, Mapping)]


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        obj = obj.get(key) if isinstance(obj, Mapping) else None
    return obj


def ssh_answers(inventories: Sequence[Path], hosts: Sequence[str], forks: int = 20) -> dict[str, str]:
    """{node: evidence} for the ``hosts`` that answer over the inventory's connection: the
    fact collector (verify's) ran there, or started and failed. Unreachable: not listed."""
    from fleetspec.ansible_adhoc import AdhocError, run_script
    from fleetspec.verify.run import COLLECTOR

    try:
        results = run_script(list(inventories), hosts, "fleetspec-collector.py", COLLECTOR.read_bytes(), forks=forks)
    except AdhocError as exc:
        raise MembershipError(f"the fact collector over SSH: {exc}") from None
    found = {}
    for host, res in sorted(results.items()):
        if res.status == "unreachable":
            continue
        driver = ""
        if res.status == "ok":
            with contextlib.suppress(ValueError, AttributeError):
                version = (json.loads(res.stdout).get("driver") or {}).get("version")
                driver = f", driver {version} installed" if isinstance(version, str) and version else ""
        found[host] = f"it answers SSH (the fact collector {'ran' if res.status == 'ok' else 'started'} there{driver})"
    return found


def live_membership(plan: Plan, *, lab: Path | None = None, inventory: Sequence[Path] | None = None,
                    slurm_mode: str = "auto", kubectl: Runner | None = None) -> Membership:
    """Ask Slurm, Kubernetes and SSH which of the nodes ``plan`` would create already run.
    ``kubectl``: the runner for kubectl (default: here, when kubectl is on PATH). Never
    raises for a source that cannot be asked: it is named in ``asked`` and ``warnings``."""
    fleet = plan.fleet
    left = created_nodes(plan)
    known: dict[str, str] = {}
    unowned: dict[str, str] = {}
    asked: list[str] = []
    warnings: list[str] = []
    if not left:
        return Membership({}, {}, ("no node is new to the state: nothing to ask",))
    with contextlib.ExitStack() as stack:
        tree: list[Path] = []

        def rendered() -> Path:  # one temporary render, only when a source needs the inventory
            if not tree:
                from fleetspec.render import render_all
                from fleetspec.render.writer import write_tree

                tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="fleetspec-membership-")))
                write_tree(render_all(fleet), tmp / "tree")
                tree.append(tmp / "tree" / "ansible" / "inventory.yml")
            return tree[0]

        slurm_nodes = [h for h in left if _scheduler(fleet, h) == "slurm"]
        if slurm_nodes and fleet.slurm is not None and fleet.slurm.mode == "native":
            try:
                control = _slurm_control(fleet, lab, inventory, slurm_mode, rendered)
                found = control.known(slurm_nodes)
                known.update({h: f"Slurm already has it (state {state})" for h, state in found.items()})
                asked.append(f"Slurm (sinfo): {len(found)} of {len(slurm_nodes)} new node(s) known")
            except ControlError as exc:
                asked.append("Slurm: could not be asked")
                warnings.append(f"could not ask Slurm which of the {len(slurm_nodes)} new node(s) it already runs "
                                f"({exc}); if they run jobs, stop and fix the Slurm access (--slurm-control)")
        left = [h for h in left if h not in known]
        kube_nodes = [h for h in left if _scheduler(fleet, h) == "kubernetes"]
        if kube_nodes and lab is None:
            run = kubectl or (local_runner() if shutil.which("kubectl") else None)
            if run is None:
                asked.append("Kubernetes: not asked (kubectl is not on PATH here)")
            else:
                try:
                    found = kubernetes_known(checked(run, ["kubectl", "get", "nodes", "-o", "json"]),
                                             checked(run, ["kubectl", "get", "pods", "--all-namespaces", "-o", "json"]),
                                             kube_nodes)
                    known.update(found)
                    asked.append(f"Kubernetes (kubectl get nodes/pods): {len(found)} of {len(kube_nodes)} new "
                                 "node(s) known")
                except (ControlError, MembershipError) as exc:
                    asked.append("Kubernetes: could not be asked")
                    warnings.append(f"could not ask Kubernetes which of the {len(kube_nodes)} new node(s) it has "
                                    f"({exc})")
        left = [h for h in left if h not in known]
        if left and lab is not None:
            asked.append("SSH: not asked (the lab's hosts are made by 'lab up')")
        elif left:
            try:
                unowned = ssh_answers([rendered(), *(inventory or [])], left)
                asked.append(f"SSH (the fact collector): {len(unowned)} of {len(left)} other new node(s) answer")
            except MembershipError as exc:
                asked.append("SSH: could not be asked")
                warnings.append(f"could not reach the new nodes over SSH to see whether they run ({exc})")
    return Membership(known, unowned, tuple(asked), tuple(warnings))


def with_membership(plan: Plan, membership: Membership) -> Plan:
    """The plan with the nodes found running planned as adoptions (drain-class, in waves
    with a canary), the unowned ones marked so apply drains them through no scheduler, and
    what was asked recorded in the plan."""
    from fleetspec.plan import adopt_known

    adopted = adopt_known(plan, {**membership.known, **membership.unowned})
    return dataclasses.replace(adopted, membership=membership.words, unowned=tuple(sorted(membership.unowned)))


def stale_news(plan: Plan, membership: Membership) -> str | None:
    """For a saved plan: why it can no longer be applied as planned (a node it creates
    is found running), or None."""
    found = {**membership.known, **membership.unowned}
    news = [h for h in created_nodes(plan) if h in found]
    if not news:
        return None
    shown = "; ".join(f"{h}: {found[h]}" for h in news[:NAMED_PODS])
    return (f"the saved plan provisions {compress(news)} as new, but {len(news)} of them already run ({shown}). "
            "Applying it would install under their work without a drain: plan again with 'plan --live' "
            "(or apply the spec) and review the adoption")


def _scheduler(fleet: Fleet, host: str) -> str | None:
    node = fleet.node(host)
    return node.scheduler if node is not None else None


@contextlib.contextmanager
def slurm_control(fleet: Fleet, lab: Path | None, inventory: Sequence[Path] | None,
                  mode: str) -> Iterator[SlurmControl]:
    """:func:`_slurm_control` with its own temporary render, made only when the control
    runs on the controller through the rendered inventory."""
    with tempfile.TemporaryDirectory(prefix="fleetspec-slurm-control-") as tmp:
        def rendered() -> Path:
            tree = Path(tmp) / "tree"
            if not tree.exists():
                from fleetspec.render import render_all
                from fleetspec.render.writer import write_tree

                write_tree(render_all(fleet), tree)
            return tree / "ansible" / "inventory.yml"

        yield _slurm_control(fleet, lab, inventory, mode, rendered)


def _slurm_control(fleet: Fleet, lab: Path | None, inventory: Sequence[Path] | None, mode: str,
                   rendered: Any) -> SlurmControl:
    """The Slurm control apply drains with: the lab's, here, or on the first controller
    through Ansible over the rendered inventory."""
    from fleetspec.apply.control import ansible_runner_on

    if lab is not None:
        from fleetspec.lab.fleet import LabHandle

        handle = LabHandle.load(lab)
        return SlurmControl(local_runner({"SLURM_CONF": str(handle.slurm_conf)} if handle.slurm_conf else {}))
    if mode == "local" or (mode == "auto" and shutil.which("scontrol")):
        return SlurmControl(local_runner())
    assert fleet.slurm is not None
    return SlurmControl(ansible_runner_on([rendered(), *(inventory or [])], fleet.slurm.controllers[0]))

