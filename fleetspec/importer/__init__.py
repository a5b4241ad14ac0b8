"""``fleetspec import``: write the spec of a cluster that already runs (docs/import.md)."""
