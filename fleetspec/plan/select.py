"""``--limit PATTERN``: the hosts of the fleet a plan or an apply is limited to, chosen as
Ansible chooses them (https://docs.ansible.com/ansible/latest/inventory_guide/intro_patterns.html:
"Patterns: targeting hosts and groups").

A pattern is terms separated by ``,`` or ``:`` (outside a hostlist's brackets); a term is
a host name or a hostlist (``h100-[001-004]``), a group (``all``, a partition or rack by
its name, ``nvidia-hopper``, ``r01``, or any group of the rendered inventory,
``partition_nvidia_hopper``, ``rack_r01``, ``slurm_controller``, ``slurm_node``), a
wildcard over host and group names (``h100-00*``, ``rack_r0?``) or, after ``~``, a regular
expression matched from the start of host and group names. ``&term`` keeps only the hosts
also in that term, ``!term`` removes its hosts; like Ansible, plain terms are taken
first, then the ``&`` ones, then the ``!`` ones. A term that matches nothing is reported;
a pattern that leaves no host is an error (Ansible: "Specified inventory, host pattern
and/or --limit leaves us with no hosts to target").
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterator
from dataclasses import dataclass

from fleetspec.compile.ir import Fleet
from fleetspec.node_side.hostlist import HostlistError, expand

_WILD = re.compile(r"[*?]")


class SelectError(ValueError):
    """The pattern is malformed, or leaves no host of the fleet; the message says which."""


@dataclass(frozen=True)
class Selection:
    hosts: frozenset[str]
    unmatched: tuple[str, ...]  # terms that matched no host (reported, as Ansible warns)


def terms(pattern: str) -> list[str]:
    """The pattern's terms: split at ``,`` and ``:`` outside brackets; empty ones dropped."""
    out, depth, word = [], 0, []
    for ch in pattern:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth = max(0, depth - 1)
        if ch in ",:" and depth == 0:
            out.append("".join(word).strip())
            word = []
        else:
            word.append(ch)
    out.append("".join(word).strip())
    return [t for t in out if t]


def check_pattern(pattern: str) -> None:
    """Raise SelectError for what no fleet can make valid: an empty pattern, a malformed
    regular expression or hostlist (the command line's own mistakes)."""
    found = terms(pattern)
    if not found:
        raise SelectError(f"--limit {pattern!r} names no host, group or pattern")
    for term in found:
        body = term.lstrip("!&")
        if not body:
            raise SelectError(f"--limit: {term!r} has an operator and nothing after it")
        if body.startswith("~"):
            try:
                re.compile(body[1:])
            except re.error as exc:
                raise SelectError(f"--limit: {body!r} is not a regular expression: {exc}") from None
        elif "[" in body and not _WILD.search(body):
            try:
                expand(body)
            except HostlistError as exc:
                raise SelectError(f"--limit: {exc}") from None


def select(fleet: Fleet, pattern: str) -> Selection:
    """The fleet's hosts (nodes, controllers, the accounting host) that ``pattern`` chooses."""
    from fleetspec.render.ansible import inventory_groups

    check_pattern(pattern)
    groups = {name: set(hosts) for name, hosts in inventory_groups(fleet).items()}
    hosts = set().union(*groups.values()) | {n.hostname for n in fleet.nodes}
    groups["all"] = set(hosts)
    for p in fleet.partitions:
        groups.setdefault(p.name, set()).update(p.nodes)
    for r in fleet.racks:
        groups.setdefault(r.name, set()).update(n.hostname for n in fleet.nodes if n.rack == r.name)
    chosen: set[str] = set()
    unmatched: list[str] = []
    found = terms(pattern)
    ordered = ([t for t in found if t[0] not in "&!"] + [t for t in found if t[0] == "&"]
               + [t for t in found if t[0] == "!"])
    if all(t[0] in "&!" for t in found):
        chosen = set(hosts)  # no plain term: "!x" alone means all hosts but x
    for term in ordered:
        op, body = (term[0], term[1:]) if term[0] in "&!" else ("", term)
        matched = set(_match(body, hosts, groups))
        if not matched:
            unmatched.append(term)
        if op == "&":
            chosen &= matched
        elif op == "!":
            chosen -= matched
        else:
            chosen |= matched
    if not chosen:
        why = f" ({', '.join(unmatched)} matched nothing)" if unmatched else ""
        raise SelectError(f"--limit {pattern} leaves no host of fleet {fleet.name} to target{why}. Name hosts "
                          "(a hostlist such as h100-[001-004]), a partition, a rack or an inventory group "
                          "(all, slurm_controller, partition_NAME, rack_NAME), or a pattern (h100-00*, ~regex)")
    return Selection(frozenset(chosen), tuple(unmatched))


def _match(body: str, hosts: set[str], groups: dict[str, set[str]]) -> Iterator[str]:
    if body.startswith("~"):
        regex = re.compile(body[1:])
        yield from (h for h in hosts if regex.match(h))
        for name, members in groups.items():
            if regex.match(name):
                yield from members
    elif _WILD.search(body):
        yield from fnmatch.filter(hosts, body)
        for name in fnmatch.filter(groups, body):
            yield from groups[name]
    elif body in groups:
        yield from groups[body]
    else:
        yield from (h for h in expand(body) if h in hosts)
