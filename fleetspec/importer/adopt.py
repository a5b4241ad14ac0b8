"""Adopting a running cluster: record the imported fleet as applied, so the first plan
against it shows only real differences (item 3 of issue #29).

The imported spec's stacks are the tuples the nodes' facts report (one stack per distinct
tuple, fleetspec.importer.build), so the applied fleet recorded here holds, for every node,
the tuple that node runs. Adoption is for a fleet without state: a state that exists is
never overwritten (an apply already recorded what runs).
"""

from __future__ import annotations

from fleetspec.compile.ir import Fleet
from fleetspec.state.backend import StateLocation, locked, open_state
from fleetspec.state.store import State, StateError


def adopt(fleet: Fleet, location: StateLocation, source: str) -> State:
    """Record ``fleet`` as applied in a new state at ``location``; raises StateError
    (or LockHeld) when the fleet already has state or another command holds its lock."""
    backend = open_state(location, fleet.name)
    with locked(backend, "import"):
        state = backend.read()
        if state.exists:
            raise StateError(f"fleet {fleet.name!r} already has state at {backend.location} (serial {state.serial}): "
                             "adopting records a running cluster once, before fleetspec manages it. Plan against "
                             "that state instead, or give another --state")
        return backend.record_applied(fleet, f"adopted {len(fleet.nodes)} running node(s) from {source} "
                                      "(fleetspec import)")
