"""``state show``, ``state list`` and a refused ``plan`` name the lock's holder and how long
it has held the lock (issue #28 item 8)."""

from __future__ import annotations

import calendar
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.state import StateStore
from fleetspec.state.lock import LockInfo
from tests.conftest import EXAMPLES


def test_the_age_reads_like_a_person_would_say_it() -> None:
    info = LockInfo("ctl", 7, None, "ops", "apply", "2026-12-01T18:00:00Z")
    at = calendar.timegm(time.strptime("2026-12-02T19:05:30Z", "%Y-%m-%dT%H:%M:%SZ"))
    assert info.describe(at) == "ops@ctl pid 7 since 2026-12-01T18:00:00Z (1d 1h ago) running 'apply'"
    assert "(12s ago)" in info.describe(calendar.timegm(time.strptime("2026-12-01T18:00:12Z", "%Y-%m-%dT%H:%M:%SZ")))


def test_show_and_plan_name_the_holder_and_its_age(tmp_path: Path) -> None:
    store = StateStore(tmp_path, "quickstart")
    with store.lock("fleetspec apply fleet.yaml"):
        shown = subprocess.run([sys.executable, "-m", "fleetspec.cli", "state", "show", "quickstart", "--state",
                                str(tmp_path)], capture_output=True, text=True, env={**os.environ, "COLUMNS": "300"},
                               check=True).stdout
        assert re.search(r"lock: held by \S+ pid \d+ since \S+ \(\d+s ago\) running 'fleetspec apply fleet.yaml'",
                         shown), shown
        plan = CliRunner().invoke(app, ["plan", str(EXAMPLES / "quickstart.yaml"), "--state", str(tmp_path)])
        assert plan.exit_code == 1
        assert re.search(r"state is locked by \S+ pid \d+ since \S+ \(\d+s ago\) running", plan.output), plan.output
