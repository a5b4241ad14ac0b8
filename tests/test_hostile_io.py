"""Where fleetspec writes and what it reads (issue 13, items 2, 3, 7, 9): devices, FIFOs,
sockets and links are refused and left as they are; ``-`` is standard output; secret
files that are not files, and vault files that do not decode, give an error that shows
no secret; state, lock and plan files of the wrong shape give an error, never a
traceback or a hang."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.exit_codes import ERROR
from fleetspec.state.lock import StateLock
from tests.conftest import EXAMPLES

runner = CliRunner()
QUICKSTART = EXAMPLES / "quickstart.yaml"


def run(*args):
    return runner.invoke(app, [str(a) for a in args])  # a crash fails the test (tests/conftest.py)


def _char_device(path: Path) -> Path:
    """A real character device node (the null device, 1:3), as 'plan --out' found one."""
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return path


def _unix_socket(path: Path) -> Path:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()
    return path


SPECIAL = {
    "character device": _char_device,
    "FIFO": lambda p: (os.mkfifo(p), p)[1],
    "socket": _unix_socket,
    "symlink to a device": lambda p: (p.symlink_to(_char_device(p.with_name("dev-null"))), p)[1],
    "symlink to a file": lambda p: (p.with_name("real.json").write_text("{}"), p.symlink_to("real.json"), p)[2],
}


def _node(path: Path) -> tuple[int, int, str | None]:
    st = os.lstat(path)
    return st.st_mode, st.st_rdev, os.readlink(path) if stat.S_ISLNK(st.st_mode) else None


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="mknod of a device node needs root")


@needs_root
@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_plan_out_refuses_special_files_and_leaves_them(tmp_path, kind):
    target = SPECIAL[kind](tmp_path / "plan.json")
    before = _node(target)
    result = run("plan", QUICKSTART, "--state", tmp_path / "state", "--out", target)
    assert result.exit_code == ERROR, result.output
    assert "Traceback" not in result.output
    assert any(why in result.output for why in ("does not write through links", "writes only regular files"))
    assert _node(target) == before


def test_plan_out_dash_is_standard_output(tmp_path):
    result = run("plan", QUICKSTART, "--state", tmp_path / "state", "--out", "-")
    assert result.exit_code == 0, result.output
    saved = json.loads(result.stdout)
    assert saved["kind"] == "fleetspec-plan"
    assert not (tmp_path / "-").exists() and not Path("-").exists()


@needs_root
@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_verify_junit_refuses_special_files(tmp_path, kind):
    facts = tmp_path / "facts"
    facts.mkdir()
    target = SPECIAL[kind](tmp_path / "report.xml")
    before = _node(target)
    result = run("verify", QUICKSTART, "--facts", facts, "--junit", target)
    assert result.exit_code == ERROR
    assert "Traceback" not in result.output
    assert _node(target) == before


def test_verify_junit_dash_is_standard_output(tmp_path):
    facts = tmp_path / "facts"
    facts.mkdir()
    result = run("verify", QUICKSTART, "--facts", facts, "--junit", "-", "--format", "json")
    assert "<testsuites" in result.stdout


@needs_root
@pytest.mark.parametrize("kind", ["character device", "FIFO", "symlink to a device"])
def test_the_state_file_is_never_replaced_by_a_write(tmp_path, kind):
    from fleetspec.pipeline import compile_file
    from fleetspec.state import StateError, StateStore

    fleet = compile_file(QUICKSTART).fleet
    store = StateStore(tmp_path, fleet.name)
    target = SPECIAL[kind](store.path)
    before = _node(target)
    with pytest.raises(StateError), store.lock("test"):
        store.record_applied(fleet, "x")  # reading first: a FIFO must not hang it
    assert _node(target) == before


# -- secrets ------------------------------------------------------------------------------

def _spec_with_secret(tmp_path: Path, reference: str) -> Path:
    spec = tmp_path / "fleet.yaml"
    spec.write_text(QUICKSTART.read_text() + f"  secrets:\n    munge_key: \"{reference}\"\n")
    return spec


@pytest.mark.parametrize("kind", ["directory", "FIFO", "unreadable"])
def test_secrets_check_on_a_secret_that_is_not_a_readable_file(tmp_path, kind):
    path = tmp_path / "munge.key"
    if kind == "directory":
        path.mkdir()
    elif kind == "FIFO":
        os.mkfifo(path, 0o600)
    else:
        path.write_bytes(b"x" * 1024)
        path.chmod(0o000)
    spec = _spec_with_secret(tmp_path, f"file:{path}")
    # A FIFO used to hang 'secrets check' for ever: run it with a deadline.
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(run("secrets", "check", spec)), daemon=True)
    thread.start()
    thread.join(20)
    assert outcome, "secrets check hung"
    result = outcome[0]
    assert result.exit_code == ERROR, result.output
    assert "munge_key" in result.output and "Traceback" not in result.output
    if kind == "unreadable" and os.geteuid() != 0:
        assert "Permission denied" in result.output


def test_a_vault_file_that_does_not_decode_shows_none_of_its_contents(tmp_path, monkeypatch):
    vault = shutil.which("ansible-vault")
    if vault is None:
        pytest.fail("ansible-vault is missing: ansible-core comes with the test extra (pip install -e '.[test]')")
    secret = "s3cr3t-Pa55w0rd-from-the-vault"
    password = tmp_path / "vault-pass"
    password.write_text("vault password\n")
    plain = tmp_path / "vault.yml"
    plain.write_text(f"munge: {secret}\n  broken: [yaml\n")  # what a bad edit leaves: not YAML
    subprocess.run([vault, "encrypt", "--vault-password-file", str(password), str(plain)], check=True,
                   capture_output=True)
    assert secret.encode() not in plain.read_bytes()
    monkeypatch.setenv("ANSIBLE_VAULT_PASSWORD_FILE", str(password))
    spec = tmp_path / "fleet.yaml"
    spec.write_text(QUICKSTART.read_text() + f"  secrets:\n    slurmdbd_password: \"vault:{plain}#munge\"\n")
    result = run("secrets", "check", spec)
    assert result.exit_code == ERROR
    assert "slurmdbd_password" in result.output and "not YAML" in result.output
    assert secret not in result.output and "Traceback" not in result.output


def test_secrets_init_warns_on_a_world_writable_or_symlinked_directory(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    spec = _spec_with_secret(tmp_path, f"file:{shared}/munge.key")
    result = run("secrets", "init", spec)
    assert result.exit_code == 0
    assert "writable by group or others" in result.stderr and "chmod 700" in result.stderr
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    (tmp_path / "linked").symlink_to(real)
    spec = _spec_with_secret(tmp_path, f"file:{tmp_path}/linked/munge.key")
    result = run("secrets", "init", spec)
    assert "symbolic link" in result.stderr
    dangling = tmp_path / "dangling.key"
    dangling.symlink_to(tmp_path / "nowhere")
    result = run("secrets", "init", _spec_with_secret(tmp_path, f"file:{dangling}"))
    assert result.exit_code == 0 and "Traceback" not in result.output
    assert not (tmp_path / "nowhere").exists()  # never created through the link


# -- state, lock and saved plan decoders ----------------------------------------------------

def _state_doc(fleet_name="quickstart", **changes):
    from fleetspec.pipeline import compile_file

    fleet = compile_file(QUICKSTART).fleet
    doc = {"format_version": 1, "fleet": fleet_name, "lineage": "l", "serial": 1, "applied": fleet.to_dict(),
           "nodes": {}, "journal": []}
    doc.update(changes)
    return doc


def _set(doc, path, value):
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = value
    return doc


@pytest.mark.parametrize(("path", "value"), [
    (("applied", "nodes", 0, "hostname"), ["h100-001"]),
    (("applied", "nodes", 0, "cpus"), "224"),
    (("applied", "nodes", 0, "scheduler"), "pbs"),
    (("applied", "stacks"), {"a": 1}),
    (("applied", "nodes", 0, "gpu"), "h100"),
    (("nodes",), {"h100-001": "x"}),
    (("nodes",), {"h100-001": {"node": {"hostname": 5}}}),
    (("journal",), ["not a record"]),
    (("serial",), True),
    (("applied", "nodes"), "[" * 100_000),
    # Malformed versions (issue 27, item 10): a plan renders and resolves packages from them.
    (("format_version",), True),
    (("format_version",), -1),
    (("applied", "stacks", 0, "driver"), "abc"),
    (("applied", "stacks", 0, "driver"), "9" * 5000),
    (("applied", "stacks", 0, "cuda"), ""),
    (("applied", "slurm", "version"), "25.x"),
])
def test_a_state_of_wrong_types_is_an_error_not_a_traceback(tmp_path, path, value):
    (tmp_path / "quickstart.state.json").write_text(json.dumps(_set(_state_doc(), path, value)))
    result = run("plan", QUICKSTART, "--state", tmp_path)
    assert result.exit_code == ERROR, result.output
    assert "Traceback" not in result.output and "left as it is" in result.output


def test_a_number_of_5000_digits_in_a_state_or_facts_is_an_error(tmp_path):
    """json.loads raises a bare ValueError past Python's 4,300-digit limit."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "quickstart.state.json").write_text(json.dumps(_state_doc()).replace('"serial": 1', '"serial": ' + "9" * 5000))
    result = run("plan", QUICKSTART, "--state", state)
    assert result.exit_code == ERROR and "more than 4,300 digits" in result.output, result.output
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "h100-001.json").write_text('{"cpus": ' + "9" * 5000 + "}")
    result = run("verify", QUICKSTART, "--facts", facts, "--format", "json")
    assert result.exit_code == ERROR and "more than 4,300 digits" in result.stdout, result.output


def test_deeply_nested_state_lock_plan_and_facts_json(tmp_path):
    deep = "[" * 200_000 + "]" * 200_000
    state = tmp_path / "state"
    state.mkdir()
    (state / "quickstart.state.json").write_text(deep)
    result = run("plan", QUICKSTART, "--state", state)
    assert result.exit_code == ERROR and "nested too deeply" in result.output
    plan = tmp_path / "plan.json"
    plan.write_text(deep)
    result = run("apply", plan, "--yes", "--state", state)
    assert result.exit_code == ERROR and "Traceback" not in result.output
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "h100-001.json").write_text(deep)
    result = run("verify", QUICKSTART, "--facts", facts, "--format", "json")
    assert result.exit_code == ERROR and "nested too deeply" in result.stdout


@pytest.mark.parametrize(("table", "column"), [("fleetspec_node", "applied"), ("fleetspec_head", "header"),
                                               ("fleetspec_serial", "entry")])
def test_a_deeply_nested_value_in_a_postgresql_state_row_is_an_error_not_a_traceback(postgres_url, tmp_path, table,
                                                                                    column):
    """#41 item 11: whoever can write the state database nests a value 3,000 deep in one of
    the rows plan reads (a real PostgreSQL stores it: its jsonb takes that depth); plan says
    the state is nested too deeply, as the file store does, instead of a RecursionError."""
    import psycopg

    from fleetspec.pipeline import compile_file
    from fleetspec.state.postgres import PostgresStore

    store = PostgresStore(postgres_url, "quickstart", tmp_path)
    with store.lock("test"):
        store.record_applied(compile_file(QUICKSTART).fleet, "first")
    deep = "[" * 3000 + "]" * 3000
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        changed = conn.execute(f"UPDATE {table} SET {column} = jsonb_set({column}, '{{deep}}', %s::jsonb) "
                               "WHERE fleet = 'quickstart'", (deep,)).rowcount
    assert changed >= 1
    result = run("plan", QUICKSTART, "--state", postgres_url)
    assert result.exit_code == ERROR and "nested too deeply" in result.output, result.output
    result = run("state", "show", "quickstart", "--state", postgres_url)
    assert result.exit_code == ERROR and "nested too deeply" in result.output, result.output


@pytest.mark.parametrize("garbage", [
    b"\xff\xfe garbage", b"[1, 2]", b'"text"', b"{}", b"[" * 100_000,
    json.dumps({"host": "h", "pid": "12", "pid_started": None, "user": "u", "command": "c", "started": "s"}).encode(),
    json.dumps({"host": "h", "pid": -1, "pid_started": None, "user": "u", "command": "c", "started": "s"}).encode(),
    json.dumps({"host": "h", "pid": 10**30, "pid_started": None, "user": "u", "command": "c", "started": "s"}).encode(),
    json.dumps({"host": ["h"], "pid": 1, "pid_started": None, "user": "u", "command": "c", "started": "s"}).encode(),
])
def test_a_lock_file_with_garbage_is_reported_not_a_traceback(tmp_path, garbage):
    from fleetspec.state.lock import LockHeld

    lock = tmp_path / "fleet.lock"
    lock.write_bytes(garbage)
    with pytest.raises(LockHeld, match="remove .* by hand"):
        StateLock(lock, "test").acquire()
    assert lock.read_bytes() == garbage


def test_a_lock_file_that_is_a_fifo_does_not_hang(tmp_path):
    from fleetspec.state.lock import LockHeld

    os.mkfifo(tmp_path / "fleet.lock")
    with pytest.raises(LockHeld):
        StateLock(tmp_path / "fleet.lock", "test").acquire()


def test_no_traceback_reaches_the_console_script(tmp_path):
    """The installed entry point, end to end: a garbage state through a real process."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "quickstart.state.json").write_text(json.dumps(_state_doc(applied={"irVersion": 5})))
    proc = subprocess.run([sys.executable, "-m", "fleetspec.cli", "plan", str(QUICKSTART), "--state", str(state)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert proc.returncode == ERROR and "Traceback" not in proc.stderr


@needs_root
@pytest.mark.parametrize("kind", ["character device", "FIFO", "symlink to a device"])
def test_health_junit_refuses_special_files(tmp_path, kind):
    facts = tmp_path / "verdicts"
    facts.mkdir()
    target = SPECIAL[kind](tmp_path / "health.xml")
    before = _node(target)
    result = run("health", QUICKSTART, "--facts", facts, "--junit", target)
    assert result.exit_code == ERROR and "Traceback" not in result.output
    assert _node(target) == before


def test_apply_never_truncates_through_a_link_planted_as_its_log(tmp_path):
    """The event log is opened O_TRUNC as root: a link there must not empty its target."""
    state = tmp_path / "state"
    state.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (state / "quickstart.apply.log").symlink_to(victim)
    result = run("apply", QUICKSTART, "--yes", "--state", state)
    assert result.exit_code == ERROR, result.output
    assert "symbolic link" in result.output and "Traceback" not in result.output
    assert victim.read_text() == "keep me\n"


def test_an_event_log_apply_cannot_open_is_an_error_line_not_a_traceback(tmp_path):
    """A log apply cannot open (here: an immutable file, which even root cannot truncate; a
    read-only or full disk fails the same way) stops apply before it touches a node, with one
    `error:` line and exit 1."""
    from tests.conftest import unavailable

    if os.geteuid() != 0:
        pytest.skip("needs root (the immutable flag)")
    if shutil.which("chattr") is None:
        unavailable("chattr (e2fsprogs) is missing")
    state = tmp_path / "state"
    state.mkdir()
    log = state / "quickstart.apply.log"
    log.write_text("an earlier apply\n")
    if subprocess.run(["chattr", "+i", str(log)], capture_output=True).returncode != 0:
        pytest.skip("the filesystem under tmp_path has no immutable flag (tmpfs)")
    try:
        result = run("apply", QUICKSTART, "--yes", "--state", state)
    finally:
        subprocess.run(["chattr", "-i", str(log)], check=True)
    assert result.exit_code == ERROR, result.output
    assert "Traceback" not in result.output and isinstance(result.exception, (SystemExit, type(None)))
    assert f"error: cannot write the event log {log}: Operation not permitted; nothing was applied." in \
        " ".join(result.output.split()), result.output
    assert log.read_text() == "an earlier apply\n"
    assert not (state / "quickstart.json").exists()  # no wave recorded, the lock released
    assert not any(p.name.endswith(".lock") for p in state.iterdir()), list(state.iterdir())


def test_a_full_disk_under_the_event_log_never_stops_an_apply(tmp_path):
    """A write that fails mid-apply (ENOSPC from /dev/full, as a full .fleetspec/ gives) is said
    once and the apply goes on: stopping there would leave a wave's nodes drained."""
    from rich.console import Console

    from fleetspec.apply.report import TextReport
    from fleetspec.apply.rollout import ApplyEvent

    console = Console(record=True, width=200, force_terminal=False)
    report = TextReport(console, tmp_path / "fleet.apply.log", [("canary", ("n-1",))])
    report._log.close()
    report._log = open("/dev/full", "w", encoding="utf-8")  # finish() closes it
    report.emit(ApplyEvent("wave-start", "wave canary: draining n-1", wave="canary", hosts=("n-1",)))
    report.emit(ApplyEvent("drain", "wave canary: applying", wave="canary", hosts=("n-1",)))
    report.finish(None)
    text = console.export_text()
    assert text.count("No space left on device; the apply goes on, its events are no longer logged") == 1, text
    assert "wave canary: applying" in text


def test_state_show_prints_a_rows_escape_sequences_and_markup_as_text(tmp_path):
    """A state row is written by whoever can write the database: an OSC 52 clipboard write
    or a screen clear in its journal or lineage is shown escaped, Rich markup as text."""
    doc = _state_doc(lineage="l\x1b[2J[bold]x", journal=[
        {"serial": 1, "time": "[red]t", "kind": "apply", "summary": "done\x1b]52;c;aGk=\x07", "hosts": "h\x9b31m"}])
    (tmp_path / "quickstart.state.json").write_text(json.dumps(doc))
    result = run("state", "show", "quickstart", "--state", tmp_path)
    assert result.exit_code == 0, result.output
    for raw in ("\x1b", "\x07", "\x9b"):
        assert raw not in result.output, result.output
    for shown in ("\\x1b[2J[bold]x", "done\\x1b]52;c;aGk=\\x07", "[red]t", "h\\x9b31m"):
        assert shown in result.output, result.output
