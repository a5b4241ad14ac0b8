"""Render two fleets that differ in a few places (a plan's new and old side) without
rendering the old one whole.

Every renderer is a pure function of the fleet's compared fields (the location fields,
``compare=False``, are never rendered): given equal values it reads the same fields in the
same order and writes the same files. So the new fleet is rendered through a copy that
records which top-level fields each renderer read (:func:`render_traced`), and the old
fleet's files come from the new side's wherever the old fleet holds equal values in every
field that renderer read; only the other renderers run on the old fleet
(:func:`render_beside`). A driver bump changes ``stacks`` alone: the Slurm, health,
bare-metal and converge files are then not rendered a second time.

The record is what the run read, not a declaration to keep up to date: a renderer that
starts reading another field records it the next time it runs.
"""

from __future__ import annotations

import dataclasses
from pathlib import PurePosixPath
from typing import Any, NamedTuple

from fleetspec.compile.ir import Fleet
from fleetspec.render import Renderer, merge_files, renderers

_FIELDS = frozenset(f.name for f in dataclasses.fields(Fleet))
_READS = "_fleetspec_reads"


class _Reading(Fleet):
    """A fleet that notes each of its fields read. Methods and cached properties run on it
    (``self`` is the copy), so what they read is noted too; each copy starts with an empty
    ``__dict__``, so nothing cached from another run hides a read."""

    def __getattribute__(self, name: str) -> Any:
        if name in _FIELDS:
            object.__getattribute__(self, "__dict__")[_READS].add(name)
        return object.__getattribute__(self, name)


def _reading(fleet: Fleet) -> _Reading:
    copy = _Reading(**{f.name: getattr(fleet, f.name) for f in dataclasses.fields(Fleet)})
    object.__getattribute__(copy, "__dict__")[_READS] = set()
    return copy


class Traced(NamedTuple):
    """One renderer's files for the new fleet and the fields it read to make them."""

    renderer: Renderer
    files: dict[PurePosixPath, str]
    reads: frozenset[str]


def render_traced(fleet: Fleet, fleet_json: bool = True) -> list[Traced]:
    """Every renderer's files for ``fleet`` (as ``render_all``), each with the fields it read."""
    traced = []
    for renderer in renderers(fleet_json):
        copy = _reading(fleet)
        files = renderer(copy)
        traced.append(Traced(renderer, files, frozenset(object.__getattribute__(copy, "__dict__")[_READS])))
    return traced


def render_beside(old: Fleet, new: Fleet, traced: list[Traced]) -> dict[PurePosixPath, str]:
    """``render_all(old)``, taking each renderer's files from ``traced`` (``render_traced(new)``)
    where ``old`` equals ``new`` in every field that renderer read."""
    parts = []
    for t in traced:
        same = all(getattr(old, name) == getattr(new, name) for name in sorted(t.reads))
        parts.append(t.files if same else t.renderer(old))
    return merge_files(parts)


def files_of(traced: list[Traced]) -> dict[PurePosixPath, str]:
    """The whole tree of a :func:`render_traced` run."""
    return merge_files(t.files for t in traced)
