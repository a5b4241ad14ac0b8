"""One ad-hoc Ansible run over an inventory's hosts, without a playbook.

The one place fleetspec ships a program to nodes and reads what each printed:
``verify --inventory/--lab`` (the fact collector), ``health --inventory/--lab`` (the
node check) and apply's commands on the Slurm controller. ansible-runner is imported
here, lazily, so the commands that never reach a node do not pay for it.

ansible-runner without a cancel callback replaces the process's SIGINT and SIGTERM
handlers with its own and never puts them back (fleetspec/apply/ansible.py says more), so
every run here catches them itself (``catch_stop_signals``), cancels the run when one
arrives, restores the process's handlers and then raises the signal again: a Ctrl-C during
``verify --inventory`` or during apply's drain on the controller still stops fleetspec.
"""

from __future__ import annotations

import json
import shlex
import signal
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# ansible-runner's per-host outcome events (ansible-runner docs, "Runner Events").
HOST_EVENTS = {"runner_on_ok": "ok", "runner_on_failed": "failed", "runner_on_unreachable": "unreachable"}


def missing_ansible() -> str | None:
    """Why the Ansible extra is not usable here, with the exact command that installs it
    into this Python (None: ansible-runner and ansible-playbook are both at hand). Every
    command that reaches nodes asks this first, so it stops before it plans, drains or
    writes anything (issue #28: a quick start without the extra died mid-apply)."""
    import importlib.util
    import shutil
    import sys

    missing = [name for name in ("ansible_runner", "ansible") if importlib.util.find_spec(name) is None]
    if not missing and shutil.which("ansible-playbook") is None:
        bindir = Path(sys.executable).parent
        if (bindir / "ansible-playbook").exists():  # installed, but this shell's PATH does not reach it
            return (f"this command runs Ansible, and ansible-playbook is in {bindir} but not on PATH: activate "
                    f"the virtual environment (. {bindir}/activate) or add {bindir} to PATH")
        missing = ["the ansible-playbook program"]
    if not missing:
        return None
    checkout = Path(__file__).resolve().parents[1]
    if (checkout / "pyproject.toml").is_file():  # installed from a source checkout (pip install -e .)
        target = f"-e '{checkout}[ansible]'"
    else:
        target = "'fleetspec[ansible]'"
    verb = "is" if len(missing) == 1 else "are"
    return (f"this command runs Ansible, and {' and '.join(missing)} {verb} not installed for {sys.executable}. "
            f"Install fleetspec's ansible extra first: {sys.executable} -m pip install {target}")


class AdhocError(RuntimeError):
    """The run could not happen at all (no ansible-runner, no inventory, Ansible failed)."""


@dataclass(frozen=True)
class HostResult:
    """What one host answered: ``status`` ok | failed | unreachable."""

    host: str
    status: str
    stdout: str = ""
    stderr: str = ""
    msg: str = ""
    rc: int | None = None

    def last_line(self, *, prefer_stdout: bool = False) -> str:
        """The last line of stderr (else the message, else stdout): why it failed."""
        texts = (self.stdout, self.stderr, self.msg) if prefer_stdout else (self.stderr, self.msg, self.stdout)
        for text in texts:
            lines = str(text or "").strip().splitlines()
            if lines:
                return lines[-1]
        return "no output"


def run_script(inventory: Path | Sequence[Path], hosts: Sequence[str], name: str, content: bytes,
               args: str = "", forks: int = 20, executable: str = "python3",
               timeouts: tuple[int, int] | None = None,
               on_result: Callable[[HostResult], None] | None = None) -> dict[str, HostResult]:
    """Copy ``content`` to every host in ``hosts`` and run it there (Ansible's ``script``
    module: ``executable`` FILE ARGS, one round trip per host, ``forks`` hosts at a time).
    ``args`` is templated by Ansible per host (``{{ inventory_hostname }}``). ``timeouts``:
    (seconds to connect, seconds the script may run) per host, Ansible's ``TIMEOUT`` and
    ``TASK_TIMEOUT`` (ansible-config list); ``on_result`` is called as each host answers."""

    def module_args(private: Path) -> str:
        script = private / name
        script.write_bytes(content)
        return " ".join(part for part in (shlex.quote(str(script)), args, f"executable={executable}") if part)

    envvars = None if timeouts is None else {"ANSIBLE_TIMEOUT": str(timeouts[0]),
                                             "ANSIBLE_TASK_TIMEOUT": str(timeouts[1])}
    return _run(inventory, hosts, "ansible.builtin.script", module_args, forks, envvars, on_result)


def run_command(inventory: Path | Sequence[Path], host: str, argv: Sequence[str]) -> HostResult:
    """``argv`` on one host (Ansible's ``command`` module, no shell)."""
    # ansible-runner takes module_args as one string; ad-hoc Ansible reads a string that is
    # a JSON object as the module's arguments (ansible/cli/adhoc.py, _play_ds).
    results = _run(inventory, [host], "ansible.builtin.command", lambda _: json.dumps({"argv": list(argv)}), 1)
    return results.get(host) or next(iter(results.values()), HostResult(host, "failed", msg="no result from Ansible"))


def _run(inventory: Path | Sequence[Path], hosts: Sequence[str], module: str, module_args: Any,
         forks: int, envvars: dict[str, str] | None = None,
         on_result: Callable[[HostResult], None] | None = None) -> dict[str, HostResult]:
    """Run ``module`` on ``hosts``. The hosts go to Ansible as a ``--limit @FILE`` (one per
    line: ansible/inventory/manager.py ``subset``), never as one host-pattern argument: an
    argument over 128 KiB (the kernel's MAX_ARG_STRLEN) cannot be passed to a program at all,
    and ``h1:h2:...`` reaches that near 12,000 hosts (execve fails: E2BIG)."""
    if not hosts:  # an empty --limit file restricts nothing: Ansible would run on every host
        raise AdhocError("no hosts to run on")
    try:
        import ansible_runner
    except ImportError:
        raise AdhocError("this needs ansible-runner: pip install 'fleetspec[ansible]'") from None
    inventories = [Path(p) for p in ([inventory] if isinstance(inventory, (str, Path)) else inventory)]
    for path in inventories:
        if not path.exists():
            raise AdhocError(f"{path}: no such inventory")
    received: list[int] = []
    saved = catch_stop_signals(received)
    try:
        with tempfile.TemporaryDirectory(prefix="fleetspec-adhoc-") as private:
            limit = Path(private) / "hosts.limit"
            limit.write_text("".join(f"{host}\n" for host in hosts))
            result = ansible_runner.run(
                private_data_dir=private,
                inventory=[str(p.resolve()) for p in inventories],
                host_pattern="all",
                limit=f"@{limit}",
                module=module,
                module_args=module_args(Path(private)),
                forks=max(1, forks),
                cancel_callback=(lambda: bool(received)) if saved else None,
                quiet=True,
                **({"envvars": envvars} if envvars else {}),
                **({"event_handler": _reporting(on_result)} if on_result else {}),
            )
            results = host_results(result.events)
            if not results and result.rc != 0 and not received:
                tail = (result.stdout.read().strip().splitlines() or ["no output"])[-1]
                raise AdhocError(f"ansible-runner failed (rc {result.rc}): {tail}")
    finally:
        restore_stop_signals(saved)
    if received:
        signal.raise_signal(received[0])  # to the process's own handler, now the run is canceled
        raise AdhocError(f"canceled: {signal.Signals(received[0]).name} received during the run")
    return results


def catch_stop_signals(received: list[int]) -> dict[int, Any]:
    """In the main thread: record SIGINT/SIGTERM during a run (the caller cancels the run,
    as ansible-runner's own handler would) and return the handlers to put back afterwards
    (``restore_stop_signals``). Elsewhere (no handler can be set) ansible-runner installs
    none either: {}.

    A handler installed from C (an embedding program's, one set before the interpreter
    started) reads as None (``signal.getsignal``: "None means that the previous signal
    handler was not installed from Python", https://docs.python.org/3/library/signal.html#signal.getsignal)
    and cannot be put back from Python: ``signal.signal(s, None)`` raises TypeError, and
    SIG_DFL would change what the signal does. So that signal is left to its handler (kept
    in place, never replaced, never restored): it still acts during the run as it did before,
    and the run is cancelled only by the signals fleetspec could catch. A signal the process
    ignores (SIG_IGN: a script's background job gets SIGINT ignored) stays ignored: a Ctrl-C
    meant for the script's foreground job must not cancel an apply mid-wave."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s, handler in saved.items():
        if handler is not None and handler is not signal.SIG_IGN:
            signal.signal(s, lambda signum, _frame: received.append(signum))
    return saved


def restore_stop_signals(saved: dict[int, Any]) -> None:
    """Put back what ``catch_stop_signals`` replaced; a C handler (None) or an ignored signal
    was never replaced."""
    for signum, handler in saved.items():
        if handler is not None and handler is not signal.SIG_IGN:
            signal.signal(signum, handler)


def _reporting(on_result: Callable[[HostResult], None]) -> Callable[[dict[str, Any]], bool]:
    """An ansible-runner event handler that hands each host's outcome to ``on_result``
    as it arrives (and keeps every event: True)."""

    def handle(event: dict[str, Any]) -> bool:
        for result in host_results([event]).values():
            on_result(result)
        return True

    return handle


def host_results(events: Any) -> dict[str, HostResult]:
    """Each host's last outcome event, as a HostResult."""
    results: dict[str, HostResult] = {}
    for event in events:
        status = HOST_EVENTS.get(event.get("event"))
        data = event.get("event_data", {})
        host, res = data.get("host"), data.get("res") or {}
        if status is None or host is None:
            continue
        rc = res.get("rc")
        results[host] = HostResult(host, status, str(res.get("stdout") or ""), str(res.get("stderr") or ""),
                                   str(res.get("msg") or ""), int(rc) if isinstance(rc, int) else None)
    return results
