"""Renderers: pure functions from the Fleet IR to {relative path: text}.

`render_all` runs every renderer and merges their trees; `writer.write_tree` is the
only code that writes them. No renderer touches the disk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import PurePosixPath

from fleetspec.compile.ir import Fleet

Renderer = Callable[[Fleet], dict[PurePosixPath, str]]


def render_fleet_json(fleet: Fleet) -> dict[PurePosixPath, str]:
    return {PurePosixPath("fleet.json"): fleet.to_json()}


def renderers(fleet_json: bool = True) -> tuple[Renderer, ...]:
    from fleetspec.render.ansible import render_ansible
    from fleetspec.render.baremetal import render_baremetal
    from fleetspec.render.converge import render_converge
    from fleetspec.render.health import render_health
    from fleetspec.render.kubernetes import render_kubernetes
    from fleetspec.render.slurm import render_slurm

    first = (render_fleet_json,) if fleet_json else ()
    return (*first, render_slurm, render_ansible, render_kubernetes, render_health, render_baremetal,
            render_converge)


def render_all(fleet: Fleet, fleet_json: bool = True) -> dict[PurePosixPath, str]:
    """Every renderer's files; a plan, which does not list fleet.json, passes
    ``fleet_json=False`` and that renderer does not run."""
    return merge_files(renderer(fleet) for renderer in renderers(fleet_json))


def merge_files(parts: Iterable[dict[PurePosixPath, str]]) -> dict[PurePosixPath, str]:
    """The renderers' trees as one, sorted by path; two renderers writing one path is a bug."""
    files: dict[PurePosixPath, str] = {}
    for part in parts:
        for path, text in part.items():
            if path in files:
                raise ValueError(f"two renderers produce {path}")
            files[path] = text
    return dict(sorted(files.items()))
