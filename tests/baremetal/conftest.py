from __future__ import annotations

import pytest

from .emulator import running


@pytest.fixture(scope="session")
def bmc(tmp_path_factory):
    """One sushy-emulator for the session (gpu-01 on, gpu-02 off, spare-01): tests that
    change a system's state restore it or use their own system."""
    with running(tmp_path_factory.mktemp("bmc")) as emulator:
        yield emulator
