"""fleetspec: one YAML file describes a GPU fleet; fleetspec compiles, plans, applies and verifies it."""

__version__ = "0.1.0"
