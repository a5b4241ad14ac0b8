"""The plan as a person reads it: one row per kind of change (identical node changes
share a row with a hostlist), the most disruptive first; nodes per partition and class;
the waves apply would run.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from fleetspec.node_side.hostlist import compress
from fleetspec.plan.model import Change, Disruption, Plan

STYLES = {
    Disruption.REPLACE: "bold red", Disruption.DRAIN_REBOOT: "red", Disruption.DRAIN: "yellow", Disruption.ROLLING: "blue",
    Disruption.RESTART_DAEMON: "magenta", Disruption.RECONFIGURE: "cyan", Disruption.NONE: "dim",
}
MAX_WAVE_ROWS = 20


def print_plan(plan: Plan, console: Console, detail: int = 0) -> None:
    """``detail``: -1 only the headline (``-q``), 0 the plan, 1 every wave (``-v``)."""
    against = plan.base or "nothing"
    if plan.empty:
        console.print(f"No changes: fleet [bold]{escape(plan.fleet.name)}[/] matches {escape(against)}.")
        return
    summary = plan.summary()
    worst = Disruption(summary["max_disruption"])
    duration = f"; modelled rollout {duration_words(plan.schedule.minutes)}" if plan.waves else ""
    console.print(f"Plan for fleet [bold]{escape(plan.fleet.name)}[/] against {escape(against)}: "
                  f"{summary['changes']} change(s), {sum(summary['nodes'].values())} of them on nodes; most disruptive: "
                  f"[{STYLES[worst]}]{worst.value}[/]{duration}")
    if detail < 0:
        return
    line = membership_line(plan)
    if line is not None:
        console.print(escape(line) if plan.membership is not None else f"[yellow]{escape(line)}[/]")
    if plan.restriction is not None:
        skipped = (f"{len(plan.skipped)} node(s) with changes are skipped: {compress(plan.skipped)}. The state "
                   "records only what is applied, so the next plan still shows them" if plan.skipped
                   else "no node with changes is left out")
        console.print(f"[yellow]Restricted to {escape(plan.restriction)}[/]: {escape(skipped)}.")
    if plan.quarantined:
        console.print("[yellow]Quarantined by the health check[/] (never a canary; their waves come last): "
                      + escape("; ".join(f"{h} ({why})" for h, why in plan.quarantined)))
    if plan.held:
        console.print("[yellow]Drained by someone else[/] (left drained with their reason, not changed, not "
                      "resumed): " + escape("; ".join(f"{h} ({why})" for h, why in plan.held)))
    console.print(_changes_table(plan.changes))
    if summary["partitions"]:
        console.print(_partitions_table(summary["partitions"]))
    if plan.waves:
        console.print(_waves_table(plan, None if detail > 0 else MAX_WAVE_ROWS))
        console.print(escape(schedule_line(plan)))
        for line in engine_lines(plan):
            console.print(escape(line))
    else:
        console.print("No node has to leave service: no waves.")


def membership_line(plan: Plan) -> str | None:
    """Whether the nodes new to the state were asked about live (#28 item 4), in words;
    None when no node is new and nothing was asked."""
    if plan.membership is not None:
        unowned = (f"; {compress(plan.unowned)} answer SSH but no scheduler has them: their waves drain nothing"
                   if plan.unowned else "")
        return f"Live membership consulted: {plan.membership}{unowned}."
    if not plan.creates_nodes:
        return None
    return ("Live membership not consulted (an offline plan): nodes new to the state are planned as new, "
            "provisioned before they take work. apply asks Slurm, Kubernetes and the nodes (SSH) first and "
            "plans those it finds running as adoptions, drained in waves; 'plan --live' shows that here.")


def duration_words(minutes: float) -> str:
    """Modelled minutes as hours and minutes: ``1 h 16 min``."""
    whole = round(minutes)
    return f"{whole // 60} h {whole % 60:02d} min"


def schedule_line(plan: Plan) -> str:
    """The modelled duration of the rollout, with the figures it assumed."""
    sched = plan.schedule
    return (f"Modelled rollout: {duration_words(sched.minutes)} ({sched.critical_batches()} "
            f"batch(es) on the longest path of {len(sched.steps)} wave(s)), assuming {sched.assumptions()}. "
            "Waves of different lanes run side by side ('plan --format json': each wave's 'after').")


def engine_lines(plan: Plan) -> list[str]:
    """Which engine rolls the waves (``plan/engines.py``) and why each kind of wave does,
    one line per engine and reason, with the waves it covers."""
    from fleetspec.plan.engines import wave_engines

    routes = wave_engines(plan)
    by_why: dict[tuple[str, str | None, str], list[str]] = {}
    for w in plan.waves:
        route = routes[(w.partition, w.index)]
        by_why.setdefault((route.engine, route.method, route.why), []).append(f"{w.partition}#{w.index}")
    lines = [f"Engine (apply --engine {plan.settings.get('engine') or 'ssh'}):"]
    for (engine, method, why), ids in by_why.items():
        shown = ", ".join(ids[:8]) + (f" and {len(ids) - 8} more" if len(ids) > 8 else "")
        lines.append(f"  {engine}{f' ({method})' if method else ''}: {shown}: {why}")
    return lines


def grouped(changes: tuple[Change, ...]) -> list[tuple[Change, str, int]]:
    """(a representative change, its targets, how many) — node changes of one partition alike
    in action, disruption and reason (which names each field's old and new value) share a row."""
    rows: dict[tuple, list[Change]] = {}
    for c in changes:
        key = ("node", c.partition, c.action, c.disruption, c.reason) if c.host is not None else (c.target,)
        rows.setdefault(key, []).append(c)
    result = []
    for members in rows.values():
        first = members[0]
        target = f"node:{compress(c.host or '' for c in members)}" if first.host is not None else first.target
        result.append((first, target, len(members)))
    return sorted(result, key=lambda row: -row[0].disruption.rank)


def _changes_table(changes: tuple[Change, ...]) -> Table:
    table = Table(title="changes", title_justify="left")
    for column in ("disruption", "action", "target", "nodes", "what and why"):
        table.add_column(column, overflow="fold", justify="right" if column == "nodes" else "left")
    for change, target, count in grouped(changes):
        style = STYLES[change.disruption]
        table.add_row(f"[{style}]{change.disruption.value}[/]", change.action.value, escape(target),
                      str(count) if change.host is not None else "", escape(change.reason))
    return table


def _partitions_table(partitions: dict[str, dict[str, int]]) -> Table:
    table = Table(title="nodes per partition and disruption", title_justify="left")
    table.add_column("partition")
    classes = [d for d in Disruption if any(d.value in counts for counts in partitions.values())]
    for d in classes:
        table.add_column(f"[{STYLES[d]}]{d.value}[/]", justify="right")
    for name, counts in partitions.items():
        table.add_row(escape(name), *(str(counts.get(d.value, "")) for d in classes))
    return table


def _waves_table(plan: Plan, rows: int | None) -> Table:
    settings = plan.settings
    title = (f"waves apply would run (canary {settings.get('canary')}, max unavailable "
             f"{settings.get('max_unavailable')} per partition)")
    table = Table(title=title, title_justify="left")
    from fleetspec.plan.engines import wave_engines

    routes = wave_engines(plan)
    for column in ("partition", "wave", "nodes", "hosts", "racks", "disruption", "engine"):
        table.add_column(column, overflow="fold")
    for w in plan.waves[:rows]:
        label = f"{w.index} (canary)" if w.canary else str(w.index)
        route = routes[(w.partition, w.index)]
        table.add_row(escape(w.partition), label, str(len(w.hosts)), escape(compress(w.hosts)),
                      escape(",".join(w.racks)), f"[{STYLES[w.disruption]}]{w.disruption.value}[/]",
                      route.engine + (f" ({route.method})" if route.method else ""))
    if rows is not None and len(plan.waves) > rows:
        table.add_row("...", f"{len(plan.waves) - rows} more (-v: all)", "", "", "", "", "")
    return table
