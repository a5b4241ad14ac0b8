"""Run fleetspec's playbooks through ansible-runner and return a typed result.

Why ansible-runner and not a subprocess of ansible-playbook: it hands us structured
events (per host, per task) while the run goes, which is what apply needs to report
progress and to decide per wave. Two traps it sets are avoided here: it silently reuses
extra vars left in ``<private_data_dir>/env/extravars`` by a previous run, so every run
gets a fresh private data dir; and ``project_dir`` is passed apart so the playbooks are
never copied or written into. A third: without a cancel callback it replaces the process's
SIGINT and SIGTERM handlers (in the main thread) with one that cancels the run, status
``canceled``, rc 254, and never puts them back, so every later SIGINT/SIGTERM to the process
is swallowed. ``run_playbook`` restores them after each run and names the signal.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fleetspec.ansible_adhoc import catch_stop_signals, restore_stop_signals

PLAYBOOKS_ENV = "FLEETSPEC_PLAYBOOKS"


def playbooks_dir() -> Path:
    """The playbooks apply runs: $FLEETSPEC_PLAYBOOKS, else ``playbooks/`` of the source
    checkout this package was installed from (``pip install -e .``)."""
    return Path(os.environ.get(PLAYBOOKS_ENV) or Path(__file__).resolve().parents[2] / "playbooks")


PLAYBOOKS = playbooks_dir()


def ansible_config_env(project_dir: Path, *, lab: bool = False, explicit: Path | None = None) -> dict[str, str]:
    """The environment that chooses the ansible.cfg apply's playbook runs read (#28 item 5).

    The lab: fleetspec's own (``playbooks/ansible.cfg``) with host-key checking off, since its
    hosts get new keys at each ``lab up``. Anywhere else the site's configuration wins, in
    Ansible's own order (https://docs.ansible.com/ansible/latest/reference_appendices/config.html,
    "The configuration file"), ahead of it ``--ansible-config FILE``: $ANSIBLE_CONFIG,
    ``ansible.cfg`` in the directory fleetspec runs in (not when that directory is
    world-writable, as Ansible refuses it), ``~/.ansible.cfg``, ``/etc/ansible/ansible.cfg``;
    fleetspec's own only when the site has none. Host keys are checked outside the lab unless
    the site's file says otherwise."""
    own = str(Path(project_dir) / "ansible.cfg")
    if lab:
        return {"ANSIBLE_CONFIG": own, "ANSIBLE_HOST_KEY_CHECKING": "False"}
    if explicit is not None:
        return {"ANSIBLE_CONFIG": str(Path(explicit).resolve())}
    if os.environ.get("ANSIBLE_CONFIG"):
        return {"ANSIBLE_CONFIG": str(Path(os.environ["ANSIBLE_CONFIG"]).expanduser().resolve())}
    cwd = Path.cwd()
    candidates = [] if cwd.stat().st_mode & 0o002 else [cwd / "ansible.cfg"]
    candidates += [Path.home() / ".ansible.cfg", Path("/etc/ansible/ansible.cfg")]
    for candidate in candidates:
        if candidate.is_file():
            return {"ANSIBLE_CONFIG": str(candidate.resolve())}
    return {"ANSIBLE_CONFIG": own}


@dataclass(frozen=True, slots=True)
class HostResult:
    """What one host went through. ``failures``: "task: message" for every failed task."""

    changed: int = 0
    failed: bool = False
    unreachable: bool = False
    failures: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PlaybookResult:
    ok: bool
    hosts: dict[str, HostResult]
    status: str = ""  # ansible-runner's status: successful, failed, timeout, canceled (with the signal)
    rc: int = 0
    private_data_dir: str | None = None  # kept only when the caller asks (keep=True)

    @property
    def failed_hosts(self) -> list[str]:
        return sorted(h for h, r in self.hosts.items() if r.failed or r.unreachable)

    @property
    def changed_hosts(self) -> list[str]:
        return sorted(h for h, r in self.hosts.items() if r.changed)


@dataclass(frozen=True, slots=True)
class HostEvent:
    """One per-host progress event: a task started on the host, or finished ok, changed,
    failed, failed but ignored (``ignore_errors``), skipped, unreachable. A loop reports
    each item (``per_item``, named in ``item``) and then the task as a whole."""

    host: str
    task: str
    status: str  # started | ok | changed | failed | ignored | skipped | unreachable
    message: str = ""
    item: str | None = None
    per_item: bool = False


EventCallback = Callable[[HostEvent], None]

_STATUS = {
    "runner_on_start": "started",
    "runner_on_ok": "ok",
    "runner_on_failed": "failed",
    "runner_on_skipped": "skipped",
    "runner_on_unreachable": "unreachable",
    "runner_item_on_ok": "ok",
    "runner_item_on_failed": "failed",
    "runner_item_on_skipped": "skipped",
}


@dataclass
class _Collector:
    """Folds the event stream into per-host results, passing each host event on."""

    on_event: EventCallback | None
    changed: dict[str, int] = field(default_factory=dict)
    failures: dict[str, list[str]] = field(default_factory=dict)
    unreachable: set[str] = field(default_factory=set)

    def __call__(self, event: Mapping[str, Any]) -> bool:
        status = _STATUS.get(event.get("event", ""))
        data = event.get("event_data") or {}
        host = data.get("host")
        if status is None or not host:
            return True
        res = data.get("res") or {}
        if status == "ok" and res.get("changed"):
            status = "changed"
        per_item = event["event"].startswith("runner_item_")
        item = _label(res)
        message = _message(res) if status in ("failed", "unreachable") else ""
        task = data.get("task", "")
        if status == "started" or per_item:
            pass  # a task starting, or one item of a loop: reported; the task-level event counts
        elif status == "changed":
            self.changed[host] = self.changed.get(host, 0) + 1
        elif status == "failed" and not data.get("ignore_errors"):
            self.failures.setdefault(host, []).append(f"{task}: {message}")
        elif status == "unreachable":
            self.unreachable.add(host)
            self.failures.setdefault(host, []).append(f"{task}: unreachable: {message}")
        if status == "failed" and data.get("ignore_errors"):
            status = "ignored"  # ansible's "...ignoring": the host goes on
        if self.on_event is not None:
            self.on_event(HostEvent(host, task, status, message, item, per_item))
        return True


def _label(res: Mapping[str, Any]) -> str | None:
    item = res.get("item")
    if item is None:
        return None
    if isinstance(item, Mapping):
        return str(item.get("name", item))
    return str(item)


def _message(res: Mapping[str, Any]) -> str:
    for key in ("msg", "stderr", "module_stderr"):
        value = res.get(key)
        if value:
            return str(value).strip()
    return ""


def run_playbook(
    inventory: Path | Iterable[Path],
    *,
    playbook: str = "site.yml",
    project_dir: Path = PLAYBOOKS,
    limit: Iterable[str] | None = None,
    extravars: Mapping[str, Any] | None = None,
    on_event: EventCallback | None = None,
    envvars: Mapping[str, str] | None = None,
    forks: int | None = None,
    work_dir: Path | None = None,
    keep: bool = False,
    cancel: Callable[[], bool] | None = None,
) -> PlaybookResult:
    """Run ``playbook`` from ``project_dir`` against ``inventory`` and fold the events.

    ``limit``: the hosts of one wave (never an empty wave: that would mean "all"), given to
    Ansible as ``--limit @FILE``: as one ``h1,h2,...`` argument, a converge run over a new
    fleet's ~12,000 hosts passed MAX_ARG_STRLEN (128 KiB) and ansible-playbook could not start.
    ``extravars`` win over every inventory variable (e.g. ``fleetspec_allow_reboot``).
    ``envvars`` are added to the environment of ansible-playbook (SSH settings, ANSIBLE_*).
    ``cancel``: polled during the run; True cancels it (a run in a thread, where no signal
    handler can be set: apply's lanes, ``apply.lanes``).
    """
    import ansible_runner  # lazy: ansible is heavy and optional for render/validate

    hosts = list(limit) if limit is not None else None
    if hosts is not None and not hosts:
        raise ValueError("limit is empty: refusing to run against every host")
    # Absolute: ansible-runner resolves relative inventory paths against the project dir.
    inventories = [str(Path(p).resolve()) for p in ([inventory] if isinstance(inventory, Path | str) else inventory)]
    base = Path(work_dir) if work_dir is not None else None
    if base is not None:
        base.mkdir(parents=True, exist_ok=True)
    private = tempfile.mkdtemp(prefix="fleetspec-run-", dir=base)  # fresh: no stale env/extravars
    env = {"ANSIBLE_CONFIG": str(Path(project_dir) / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_HOME": os.path.join(private, "ansible-home"), **(envvars or {})}  # fmt: skip
    collector = _Collector(on_event)
    received: list[int] = []
    saved = catch_stop_signals(received)
    try:
        if extravars:
            _write_extravars(Path(private), extravars)
        limit_file = Path(private) / "hosts.limit"
        if hosts:
            limit_file.write_text("".join(f"{host}\n" for host in hosts))
        runner = ansible_runner.run(
            private_data_dir=private,
            project_dir=str(project_dir),
            playbook=playbook,
            inventory=inventories,
            limit=f"@{limit_file}" if hosts else None,
            envvars=env,
            forks=forks,
            event_handler=collector,
            cancel_callback=(lambda: bool(received) or (cancel is not None and cancel()))
            if saved or cancel is not None else None,
            quiet=True,
        )
        results = _host_results(runner.stats or {}, collector)
        ok = runner.status == "successful" and not any(r.failed or r.unreachable for r in results.values())
        status = runner.status
        if status == "canceled" and received:
            status = f"canceled ({signal.Signals(received[0]).name} received during the run)"
        return PlaybookResult(ok, results, status, runner.rc, private if keep else None)
    finally:
        restore_stop_signals(saved)
        if not keep:
            shutil.rmtree(private, ignore_errors=True)


class _UnsafeDumper(yaml.SafeDumper):
    """Every string ``!unsafe``: extra vars are data (a secret file's path, a password), and a
    ``{{`` in one must never be evaluated by Ansible on the control machine."""


_UnsafeDumper.add_representer(str, lambda dumper, data: dumper.represent_scalar("!unsafe", data, style="'"))


def _write_extravars(private: Path, extravars: Mapping[str, Any]) -> None:
    """``env/extravars`` in ansible-runner's private data dir, which it passes as ``-e @file``
    (it would write JSON there itself, which cannot say ``!unsafe``). Mode 0600: it may hold secrets."""
    env = private / "env"
    env.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(env / "extravars", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as handle:
        yaml.dump(dict(extravars), handle, Dumper=_UnsafeDumper, default_flow_style=False)


def _host_results(stats: Mapping[str, Mapping[str, int]], collector: _Collector) -> dict[str, HostResult]:
    names: set[str] = set(collector.failures) | collector.unreachable
    for key in ("ok", "changed", "failures", "dark", "skipped", "processed"):
        names |= set(stats.get(key) or {})
    return {
        h: HostResult(
            changed=(stats.get("changed") or {}).get(h, collector.changed.get(h, 0)),
            failed=h in (stats.get("failures") or {}) or (h in collector.failures and h not in collector.unreachable),
            unreachable=h in (stats.get("dark") or {}) or h in collector.unreachable,
            failures=tuple(collector.failures.get(h, ())),
        )
        for h in sorted(names)
    }
