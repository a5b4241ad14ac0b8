"""Node facts gathered from the fleet: ``fleetspec facts collect``."""
