"""Renderers: pure functions from the Fleet IR to {relative path: text}.

`render_all` runs every renderer and merges their trees; `writer.write_tree` is the
only code that writes them. No renderer touches the disk.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePosixPath

from fleetspec.compile.ir import Fleet

Renderer = Callable[[Fleet], dict[PurePosixPath, str]]


def render_fleet_json(fleet: Fleet) -> dict[PurePosixPath, str]:
    return {PurePosixPath("fleet.json"): fleet.to_json()}


def renderers() -> tuple[Renderer, ...]:
    from fleetspec.render.ansible import render_ansible
    from fleetspec.render.baremetal import render_baremetal
    from fleetspec.render.converge import render_converge
    from fleetspec.render.health import render_health
    from fleetspec.render.kubernetes import render_kubernetes
    from fleetspec.render.slurm import render_slurm

    return (render_fleet_json, render_slurm, render_ansible, render_kubernetes, render_health, render_baremetal,
            render_converge)


def render_all(fleet: Fleet, fleet_json: bool = True) -> dict[PurePosixPath, str]:
    """Every renderer's files; a plan, which does not list fleet.json, passes
    ``fleet_json=False`` and that renderer does not run."""
    files: dict[PurePosixPath, str] = {}
    for renderer in renderers():
        if renderer is render_fleet_json and not fleet_json:
            continue
        for path, text in renderer(fleet).items():
            if path in files:
                raise ValueError(f"two renderers produce {path}")
            files[path] = text
    return dict(sorted(files.items()))
