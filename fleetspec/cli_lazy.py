"""Commands loaded when they are used: a command that lives in a feature package
(``plan``, ``apply``, ``lab``, ...) is imported, and its click command built by Typer,
only when it runs or when help lists it. ``fleetspec validate`` then pays for neither
the other commands' modules nor Typer's reading of their signatures (startup time,
benchmarks/README.md).

A `LazyCommands` mapping stands in for a Typer group's ``commands``: it has every name
from the start (for help, "Did you mean" and dispatch) and builds an entry when it is
first looked up. `lazy_group` makes the group class that installs it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any

import typer
from typer.core import TyperGroup
from typer.main import get_command_from_info, get_group_from_info
from typer.models import CommandInfo, TyperInfo

try:  # typer >= 0.20 carries its own copy of click
    from typer._click import Command
except ImportError:  # pragma: no cover - older typer on plain click
    from click import Command  # type: ignore[assignment]

Build = Callable[[TyperGroup], Command]


class LazyCommands(MutableMapping[str, Command]):
    """A group's commands by name: the lazy ones (in their order), built by their factory
    on first lookup and then kept, and any Typer built itself after them."""

    def __init__(self, group: TyperGroup, built: Mapping[str, Command], lazy: Mapping[str, Build]) -> None:
        self._group = group
        self._built = dict(built)
        self._lazy = {name: build for name, build in lazy.items() if name not in self._built}
        self._names = [*self._lazy, *self._built]

    def __getitem__(self, name: str) -> Command:
        command = self._built.get(name)
        if command is None:
            build = self._lazy.pop(name)  # KeyError: no such command
            command = self._built[name] = build(self._group)
        return command

    def __setitem__(self, name: str, command: Command) -> None:
        if name not in self._names:
            self._names.append(name)
        self._lazy.pop(name, None)
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        if name not in self._built and name not in self._lazy:
            raise KeyError(name)
        self._built.pop(name, None)
        self._lazy.pop(name, None)
        self._names.remove(name)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._built or name in self._lazy


def command(name: str, module: str, attribute: str, cls: type[Command] | None = None) -> Build:
    """A factory for the Typer command function ``module.attribute``, registered as ``name``
    (what ``app.command(name, cls=cls)(function)`` registers)."""

    def build(group: TyperGroup) -> Command:
        callback = getattr(importlib.import_module(module), attribute)
        info = CommandInfo(name=name, cls=cls, callback=callback)
        return get_command_from_info(info, pretty_exceptions_short=True, rich_markup_mode=group.rich_markup_mode)

    return build


def sub_app(name: str, module: str, attribute: str) -> Build:
    """A factory for the Typer app ``module.attribute``, added as ``name`` (what
    ``app.add_typer(sub_app, name=name)`` adds)."""

    def build(group: TyperGroup) -> Command:
        sub: typer.Typer = getattr(importlib.import_module(module), attribute)
        return get_group_from_info(TyperInfo(sub, name=name), pretty_exceptions_short=True,
                                   rich_markup_mode=group.rich_markup_mode, suggest_commands=group.suggest_commands)

    return build


def lazy_group(base: type[TyperGroup], lazy: Mapping[str, Build]) -> type[TyperGroup]:
    """A subclass of ``base`` whose commands are ``lazy`` (and any registered with Typer)."""

    class LazyGroup(base):  # type: ignore[valid-type, misc]
        def __init__(self, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.commands = LazyCommands(self, self.commands, lazy)

        def list_commands(self, ctx: Any) -> list[str]:
            return list(self.commands)

    LazyGroup.__name__ = LazyGroup.__qualname__ = f"Lazy{base.__name__}"
    return LazyGroup
