"""Hot spares: when the health loop's verdict for a node is ``replace``, a spare from its
partition's pool (``spec.baremetal.spares``: same GPU model and count, same stack, checked at
compile time) joins the partition and a break-fix ticket is opened.

Slurm: the spare is added to the partition's ``Nodes`` with ``scontrol update`` (the
partition's live node list, read back with ``scontrol show partition``: what an earlier
replacement or an operator changed is kept); the sick node stays in it, drained by the node
check with its reason. A spare already in the partition, or not idle (drained, down, running
work), is not picked. Kubernetes-owned partitions are not handled here yet
(docs/bare-metal.md). Each step goes through the scheduler's client as argv lists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetspec.apply.control import ControlError, Runner, SlurmControl, checked
from fleetspec.baremetal.tickets import TicketError, post_ticket, ticket_body
from fleetspec.compile.ir import Fleet
from fleetspec.node_side.hostlist import compress, expand


@dataclass
class Replacement:
    node: str
    partition: str
    spare: str | None = None
    ticket: int | None = None  # the webhook's HTTP status
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def partition_nodes(run: Runner, partition: str) -> list[str]:
    text = checked(run, ["scontrol", "-o", "show", "partition", partition])
    for word in text.split():
        if word.startswith("Nodes="):
            value = word.removeprefix("Nodes=")
            return [] if value in ("", "(null)") else expand(value)
    return []


def pick_spare(fleet: Fleet, partition: str, members: list[str], states: Mapping[str, tuple[str, str]]) -> str | None:
    assert fleet.baremetal is not None
    pool = dict(fleet.baremetal.spares).get(partition, ())
    for host in pool:
        state = states.get(host, ("UNKNOWN", ""))[0].upper()
        if host not in members and state.startswith("IDLE") and not any(
                flag in state for flag in ("DRAIN", "DOWN", "FAIL", "MAINT")):
            return host
    return None


def join_slurm(run: Runner, partition: str, spare: str, members: list[str]) -> None:
    nodes = compress(sorted({*members, spare}))
    checked(run, ["scontrol", "update", f"PartitionName={partition}", f"Nodes={nodes}"])


def replace_nodes(fleet: Fleet, verdicts: Mapping[str, dict[str, Any]], run: Runner, base_dir: Path,
                  on_line: Callable[[str], None] = lambda line: None) -> list[Replacement]:
    """For every node whose verdict is ``replace``: a spare joins its partition, a ticket is posted."""
    assert fleet.baremetal is not None
    control = SlurmControl(run)
    out = []
    for host, verdict in sorted(verdicts.items()):
        node = fleet.node(host)
        if node is None or verdict.get("action") != "replace":
            continue
        done = Replacement(host, node.partition)
        out.append(done)
        if node.scheduler != "slurm":
            done.problems.append("a Kubernetes-owned node: spares join Slurm partitions only (docs/bare-metal.md)")
        elif not dict(fleet.baremetal.spares).get(node.partition):
            done.problems.append(f"partition {node.partition} has no spare pool (spec.baremetal.spares)")
        else:
            try:
                members = partition_nodes(run, node.partition)
                pool = dict(fleet.baremetal.spares)[node.partition]
                spare = pick_spare(fleet, node.partition, members, control.states(list(pool)))
                if spare is None:
                    done.problems.append(f"no idle spare left in the pool of {node.partition} ({compress(pool)})")
                else:
                    join_slurm(run, node.partition, spare, members)
                    done.spare = spare
                    on_line(f"{host}: spare {spare} joined partition {node.partition}")
            except ControlError as exc:
                done.problems.append(str(exc))
        if fleet.baremetal.tickets is not None:
            try:
                body = ticket_body(fleet.name, host, node.partition, verdict, done.spare)
                done.ticket = post_ticket(fleet.baremetal.tickets, body, base_dir)
                on_line(f"{host}: ticket posted ({done.ticket})")
            except TicketError as exc:
                done.problems.append(str(exc))
        for problem in done.problems:
            on_line(f"{host}: {problem}")
    return out
