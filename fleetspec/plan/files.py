"""Changes in the rendered files, classified by what the file drives.

Every renderer's output is diffed (``render_all`` of both fleets), so a renderer added
later shows up here without code changes: a file this module does not know is a
``file:<path>`` change of class ``none``. Known files get a finer reading: slurm.conf
by line kind (NodeName lines restart daemons, PartitionName lines only need
``scontrol reconfigure``), Kubernetes manifests per object, Helm per release.
``fleet.json`` is left out: the node and partition changes already describe it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

from fleetspec.plan.model import Action, Change, Disruption
from fleetspec.site.slurm import reconfigurable

D = Disruption
Files = dict[PurePosixPath, str]
SKIPPED = {PurePosixPath("fleet.json")}
MAX_LINES = 40  # slurm.conf lines shown per side of a change

SLURM_FILES: dict[str, tuple[Disruption, str]] = {
    "gres.conf": (D.RESTART_DAEMON, "slurmd re-reads GRES only on restart"),
    "cgroup.conf": (D.RESTART_DAEMON, "slurmd restarts to apply cgroup limits; running jobs keep theirs"),
    "slurmdbd.conf": (D.RESTART_DAEMON, "slurmdbd restarts; accounting catches up, jobs keep running"),
    "topology.conf": (D.RECONFIGURE, "scontrol reconfigure; placement of new jobs changes"),
    "plugstack.conf": (D.NONE, "read at each job launch; running jobs are unaffected"),
    "accounts.json": (D.NONE, "sacctmgr changes the tenants' accounts, users and GPU limits; running jobs keep "
                              "running, new jobs meet the new limits"),
}


def file_changes(new: Files, old: Files) -> list[Change]:
    found: dict[str, Change] = {}
    for path in sorted(set(new) | set(old)):
        if path in SKIPPED or new.get(path) == old.get(path):
            continue
        for change in _classify(path, old.get(path), new.get(path), old, new):
            seen = found.get(change.target)
            if seen is None:
                found[change.target] = change
            elif change.reason not in seen.reason:  # a Helm release whose version and values both moved
                found[change.target] = dataclasses.replace(seen, reason=f"{seen.reason}; {change.reason}")
    return list(found.values())


def _classify(path: PurePosixPath, before: str | None, after: str | None, old: Files, new: Files) -> Iterator[Change]:
    top, rest = path.parts[0], PurePosixPath(*path.parts[1:]) if len(path.parts) > 1 else path
    action = Action.CREATE if before is None else Action.DELETE if after is None else Action.UPDATE
    if top == "slurm" and path.name == "slurm.conf":
        yield _slurm_conf(path, action, before, after)
    elif top == "slurm" and path.name == "accounts.json":
        yield _accounts(action, before, after)
    elif top == "slurm":
        disruption, why = SLURM_FILES.get(path.name, (D.RECONFIGURE, "Slurm re-reads it on scontrol reconfigure"))
        yield _whole_file(f"slurm:{rest}", action, disruption, before, after, f"{path.name} {action.value}: {why}")
    elif top == "kubernetes" and path.parent.name == "manifests" and path.suffix in (".yaml", ".yml"):
        yield from _manifest(path, action, before, after)
    elif top == "kubernetes" and path.parent.name == "helm" and path.name.endswith(".yaml"):
        yield from _helm(path, action, before, after, old, new)
    elif top == "ansible":
        yield _whole_file(f"ansible:{rest}", action, D.NONE, before, after,
                          "playbook input; what applying it does to nodes is in the node changes")
    elif top == "health":
        yield _whole_file(f"health:{rest}", action, D.NONE, before, after,
                          "the node check's policy or program: on Slurm nodes it rolls out with the nodes' "
                          "rolling changes (canary first, docs/health.md)")
    elif top == "kubernetes":
        yield _whole_file(f"kubernetes:{rest}", action, D.NONE, before, after, "helper file; nothing runs it by itself")
    else:
        yield _whole_file(f"file:{path}", action, D.NONE, before, after, "rendered file")


def _digest(text: str | None) -> dict[str, Any] | None:
    if text is None:
        return None
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "lines": text.count("\n")}


def _whole_file(target: str, action: Action, disruption: Disruption, before: str | None, after: str | None,
                reason: str) -> Change:
    return Change(target, action, disruption, _digest(before), _digest(after), reason)


def _account_table(text: str | None) -> dict[str, dict[str, Any]]:
    """{account: its settings} from a rendered accounts.json ({} for none or a foreign file)."""
    try:
        data = json.loads(text) if text else {}
        return {a["name"]: {k: a[k] for k in ("grp_tres", "users", "groups", "fairshare")} for a in data["accounts"]}
    except (ValueError, KeyError, TypeError):
        return {}


def _accounts(action: Action, before: str | None, after: str | None) -> Change:
    """The tenants' Slurm accounts: which accounts change, and their limits and members."""
    old, new = _account_table(before), _account_table(after)
    moved = sorted(name for name in set(old) | set(new) if old.get(name) != new.get(name))
    disruption, why = SLURM_FILES["accounts.json"]
    return Change("slurm:accounts.json", action, disruption, {n: old[n] for n in moved if n in old} or None,
                  {n: new[n] for n in moved if n in new} or None,
                  f"accounts {', '.join(moved) or '(none)'} change: {why}")


def _slurm_conf(path: PurePosixPath, action: Action, before: str | None, after: str | None) -> Change:
    old_lines, new_lines = _settings(before), _settings(after)
    old_set, new_set = set(old_lines), set(new_lines)
    removed = [line for line in old_lines if line not in new_set]
    added = [line for line in new_lines if line not in old_set]
    kinds = {line.split("=", 1)[0] for line in removed + added}
    if action is Action.CREATE:
        return Change(f"slurm:{path.name}", action, D.RESTART_DAEMON, None, _clip(added),
                      f"{path.name}: new ({len(added)} settings); slurmctld and the slurmds start with it")
    if "SwitchType" in kinds:
        # slurm.conf(5) SwitchType: "All Slurm daemons, commands and running jobs must be
        # restarted for a change in SwitchType to take effect. If running jobs exist at the
        # time slurmctld is restarted with a new value of SwitchType, records of all jobs in
        # any state may be lost." Not a restart under running work: an empty queue first.
        disruption, why = D.DRAIN, (
            f"{', '.join(sorted(kinds))} lines change, SwitchType among them: needs an empty queue. Drain every "
            "Slurm node, wait until squeue shows no job (running or pending), then restart slurmctld and the "
            "slurmds; restarted with jobs in the queue, slurmctld may lose the records of all jobs "
            "(slurm.conf(5) SwitchType)")
    elif not kinds:
        disruption, why = D.NONE, "only comments or order change"
    elif kinds <= {"PartitionName"}:
        disruption, why = D.RECONFIGURE, "only PartitionName lines change: scontrol reconfigure"
    elif all(k == "PartitionName" or reconfigurable(k) for k in kinds):
        disruption, why = D.RECONFIGURE, (f"{', '.join(sorted(kinds))} change: scontrol reconfigure (slurm.conf(5) "
                                          "asks no daemon restart for these)")
    else:
        named = ", ".join(sorted(kinds))
        disruption, why = D.RESTART_DAEMON, f"{named} lines change: slurmctld and the slurmds restart"
    return Change(f"slurm:{path.name}", action, disruption, _clip(removed), _clip(added),
                  f"{path.name}: {len(removed)} line(s) removed, {len(added)} added; {why}")


def needs_empty_queue(changes: list[Change]) -> list[Change]:
    """The slurm.conf changes that restart the daemons only with an empty queue (a SwitchType
    change: the one slurm.conf change planned as ``drain``); apply refuses them while jobs exist."""
    return [c for c in changes if c.target.startswith("slurm:") and c.target.endswith(".conf")
            and c.target != "slurm:slurmdbd.conf" and c.disruption is D.DRAIN]


def _settings(text: str | None) -> list[str]:
    if text is None:
        return []
    return [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _clip(lines: list[str]) -> list[str]:
    return lines if len(lines) <= MAX_LINES else lines[:MAX_LINES] + [f"... {len(lines) - MAX_LINES} more"]


def _manifest(path: PurePosixPath, action: Action, before: str | None, after: str | None) -> Iterator[Change]:
    old_objects, new_objects = _objects(before), _objects(after)
    if old_objects is None or new_objects is None:
        yield _whole_file(f"kubernetes:{PurePosixPath(*path.parts[1:])}", action, D.NONE, before, after,
                          "manifest changes (not readable per object)")
        return
    for key in sorted(set(old_objects) | set(new_objects)):
        b, a = old_objects.get(key), new_objects.get(key)
        if b == a:
            continue
        act = Action.CREATE if b is None else Action.DELETE if a is None else Action.UPDATE
        kind = key.split("/", 1)[0]
        note = "; everything in it is deleted with it" if kind == "Namespace" and a is None else ""
        yield Change(f"kubernetes:{key}", act, D.NONE, b, a,
                     f"{kind} {act.value}d by server-side apply; running pods are unaffected{note}")


def _objects(text: str | None) -> dict[str, Any] | None:
    """``Kind/name`` (``Kind/namespace/name`` when namespaced) -> object; None when unreadable."""
    import yaml

    if text is None:
        return {}
    try:
        documents = [d for d in yaml.safe_load_all(text) if d]
        return {"/".join(filter(None, (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]))): d
                for d in documents}
    except (yaml.YAMLError, KeyError, TypeError, AttributeError):
        return None


def _helm(path: PurePosixPath, action: Action, before: str | None, after: str | None, old: Files,
          new: Files) -> Iterator[Change]:
    releases_path = path.with_name("releases.yaml")
    old_releases, new_releases = _releases(old.get(releases_path)), _releases(new.get(releases_path))
    if old_releases is None or new_releases is None:
        yield _whole_file(f"kubernetes:{PurePosixPath(*path.parts[1:])}", action, D.NONE, before, after,
                          "Helm input changes")
        return
    if path == releases_path:
        names = set(old_releases) | set(new_releases)
        changed = sorted(n for n in names if _release_core(old_releases.get(n)) != _release_core(new_releases.get(n)))
    else:
        changed = sorted({n for r in (old_releases, new_releases) for n, rel in r.items()
                          if rel.get("valuesFile") == path.name})
    for name in changed:
        yield _release_change(name, old_releases.get(name), new_releases.get(name), path)


def _releases(text: str | None) -> dict[str, dict[str, Any]] | None:
    import yaml

    if text is None:
        return {}
    try:
        data = yaml.safe_load(text) or {}
        return {r["name"]: r for r in data.get("releases", [])}
    except (yaml.YAMLError, KeyError, TypeError, AttributeError):
        return None


def _release_core(release: dict[str, Any] | None) -> Any:
    return None if release is None else {k: v for k, v in release.items() if k != "valuesFile"}


def _release_change(name: str, b: dict[str, Any] | None, a: dict[str, Any] | None, path: PurePosixPath) -> Change:
    if b is None:
        return Change(f"helm:{name}", Action.CREATE, D.RECONFIGURE, None, a,
                      f"helm install {name} {a['version'] if a else ''}".rstrip())
    if a is None:
        return Change(f"helm:{name}", Action.DELETE, D.RECONFIGURE, b, None,
                      f"helm uninstall {name}: what it manages on the nodes goes with it")
    what = (f"{b.get('version')} -> {a.get('version')}" if b.get("version") != a.get("version")
            else f"values in {path.name}" if path.name != "releases.yaml" else "release settings")
    return Change(f"helm:{name}", Action.UPDATE, D.RECONFIGURE, b, a,
                  f"helm upgrade {name} ({what}): its pods roll; what it does to nodes is in the node changes")
