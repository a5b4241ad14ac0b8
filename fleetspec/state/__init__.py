"""The state store: what was last applied to each fleet, its serial, lineage and journal,
and the lock that makes one apply at a time. See ``store`` for the document's layout and
``backend`` for where it lives (a directory, or PostgreSQL shared by a team).

Apply uses it like this::

    store = open_state(state_location(spec, state_option), fleet.name)
    with store.lock("fleetspec apply"):       # LockHeld names the holder
        state = store.read()                   # StateError: corrupt, newer, other fleet
        for wave in waves:
            ...                                # drain, upgrade, verify, resume
            store.record_wave(fleet, wave.hosts, "wave 2/5 nvidia-hopper")
        store.record_applied(fleet, "12 nodes drain-reboot")
"""

from fleetspec.state.backend import (
    STATE_ENV,
    StateBackend,
    StateLocation,
    local_work_dir,
    locked,
    open_state,
    parse_location,
    state_location,
    wait_unlocked,
)
from fleetspec.state.lock import LockHeld, LockInfo, StateLock
from fleetspec.state.store import (
    FORMAT_VERSION,
    STATE_DIR_ENV,
    LimitedApply,
    NodeRecord,
    State,
    StateError,
    StateStore,
    state_dir,
)

__all__ = [
    "FORMAT_VERSION",
    "STATE_DIR_ENV",
    "STATE_ENV",
    "LimitedApply",
    "LockHeld",
    "LockInfo",
    "NodeRecord",
    "State",
    "StateBackend",
    "StateError",
    "StateLocation",
    "StateLock",
    "StateStore",
    "local_work_dir",
    "locked",
    "open_state",
    "parse_location",
    "state_dir",
    "state_location",
    "wait_unlocked",
]
