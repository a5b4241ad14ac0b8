"""The SIGINT/SIGTERM handlers an Ansible run borrows (``fleetspec.ansible_adhoc``): a
handler installed from C reads as None in Python and cannot be put back from there; it is
left in place, never replaced.

Real: a C program that installs a SIGTERM handler, then embeds this interpreter (as an
application embedding Python does), runs fleetspec's catch/restore, and finally raises SIGTERM:
its own handler must still be the one that runs. Needs gcc and Python.h (scripts/test: gcc,
python3-dev)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from tests.conftest import unavailable

PROGRAM = r"""
#include <Python.h>
#include <signal.h>
#include <stdio.h>

static volatile sig_atomic_t got = 0;
static void on_term(int signum) { (void)signum; got = 1; }

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    signal(SIGTERM, on_term);           /* the application's handler, installed from C */
    Py_Initialize();
    int rc = PyRun_SimpleString(argv[1]);
    raise(SIGTERM);                     /* after fleetspec's run: whose handler answers? */
    printf("c-handler:%d\n", (int)got);
    fflush(stdout);
    Py_Finalize();
    return rc == 0 ? 0 : 1;
}
"""

SCRIPT = """
import signal
from fleetspec.ansible_adhoc import catch_stop_signals, restore_stop_signals
assert signal.getsignal(signal.SIGTERM) is None, signal.getsignal(signal.SIGTERM)  # from C
sigint = signal.getsignal(signal.SIGINT)
received = []
saved = catch_stop_signals(received)
assert signal.getsignal(signal.SIGTERM) is None  # never replaced: the C handler acts during the run
assert signal.getsignal(signal.SIGINT) is not sigint  # a Python one is borrowed
restore_stop_signals(saved)
assert signal.getsignal(signal.SIGINT) is sigint
print("restored", flush=True)
"""


def _embedding_program(tmp_path: Path) -> Path:
    include = Path(sysconfig.get_paths()["include"])
    if shutil.which("gcc") is None or not (include / "Python.h").exists():
        unavailable("gcc and Python.h (python3-dev) are needed to embed the interpreter")
    # LIBDIR first: its shared libpython, not LIBPL's static one; --export-dynamic for the
    # static case, so extension modules (math) find the interpreter's symbols
    libdirs = list(dict.fromkeys(d for d in (sysconfig.get_config_var("LIBDIR"), sysconfig.get_config_var("LIBPL"))
                                 if d))
    library = f"python{sysconfig.get_config_var('LDVERSION') or sysconfig.get_python_version()}"
    source = tmp_path / "embed.c"
    source.write_text(PROGRAM)
    binary = tmp_path / "embed"
    flags = [f"-I{include}", *(f"-L{d}" for d in libdirs), *(f"-Wl,-rpath,{d}" for d in libdirs),
             "-Wl,--export-dynamic"]
    built = subprocess.run(["gcc", "-o", str(binary), str(source), *flags, f"-l{library}", "-lm"],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    return binary


def test_a_handler_installed_from_c_stays_in_place(tmp_path) -> None:
    binary = _embedding_program(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    ran = subprocess.run([str(binary), SCRIPT], capture_output=True, text=True, env=env, timeout=60)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.splitlines() == ["restored", "c-handler:1"], ran.stdout + ran.stderr


IGNORED = r"""
import os, signal, sys, time
from fleetspec.ansible_adhoc import catch_stop_signals, restore_stop_signals
received = []
saved = catch_stop_signals(received)
os.kill(os.getpid(), signal.SIGINT)   # as a Ctrl-C meant for the shell's foreground job
time.sleep(0.2)
during = signal.getsignal(signal.SIGINT)
restore_stop_signals(saved)
print(received, during is signal.SIG_IGN, signal.getsignal(signal.SIGINT) is signal.SIG_IGN,
      signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
"""


def test_an_ignored_signal_stays_ignored_during_a_run() -> None:
    """A signal the process was started with ignored (a background job of a script: the shell
    sets SIGINT to SIG_IGN; Python keeps it) must not cancel an Ansible run: before, the
    run's recorder replaced SIG_IGN, so a Ctrl-C meant for the script's foreground job
    cancelled an apply mid-wave. SIGTERM, not ignored, is still caught and put back."""
    out = subprocess.run([sys.executable, "-c", IGNORED], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
                         preexec_fn=lambda: __import__("signal").signal(2, __import__("signal").SIG_IGN))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[]", "True", "True", "True"], out.stdout
