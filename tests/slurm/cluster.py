"""The real-Slurm harness now lives in the package (`fleetspec.lab.slurm`), shared with
`fleetspec lab`; re-exported here for the Slurm tests."""

from fleetspec.lab.slurm import (
    Cluster,
    SlurmError,
    SlurmUnavailable,
    ensure_slurm,
    localize_gres_conf,
    localize_slurm_conf,
    make_devices,
    running,
)

__all__ = [
    "Cluster",
    "SlurmError",
    "SlurmUnavailable",
    "ensure_slurm",
    "localize_gres_conf",
    "localize_slurm_conf",
    "make_devices",
    "running",
]
