"""``local_runner`` (fleetspec/apply/control.py): the scontrol/kubectl calls apply and
``health --remediate`` make on this machine."""

from __future__ import annotations

import pytest

from fleetspec.apply.control import ControlError, checked, local_runner


def test_a_command_that_outlives_its_timeout_is_a_control_error_not_a_traceback() -> None:
    """A hung kubectl or scontrol (an API server that accepts and never answers): the child is
    killed at the timeout and the caller gets a ControlError, which apply turns into 'wave
    stopped, its nodes stay drained' and health --remediate into 'not acted on'. Before, the
    subprocess.TimeoutExpired ended apply (mid-wave) and health --remediate with a traceback."""
    run = local_runner(timeout=0.5)
    with pytest.raises(ControlError, match=r"sleep 30 did not finish within 0.5 s"):
        checked(run, ["sleep", "30"])
    assert checked(run, ["true"]) == ""
