"""The plan as a pull-request comment (``plan --format markdown``): GitHub-flavoured
Markdown, pure (a Plan in, text out).

Reviewers read, top down: the headline (fleet, baseline, most disruptive class), counts
per disruption class, nodes per partition and class, the nodes that reboot, the waves
apply would run, then every change grouped by class in a folded ``<details>`` block.
GitHub caps a comment at 65,536 characters
(https://github.com/orgs/community/discussions/27190), so the folded changes are cut at
``MAX_CHARS`` with a line saying so; the JSON plan (``--format json``) has them all.
The first line is an HTML comment a pipeline can search for to update its comment in place.
"""

from __future__ import annotations

from typing import Any

from fleetspec.markdown import cell, code
from fleetspec.node_side.hostlist import compress
from fleetspec.plan.model import Change, Disruption, Plan
from fleetspec.plan.render_gantt import gantt_markdown
from fleetspec.plan.render_text import grouped, membership_line, schedule_line

MARKER = "<!-- fleetspec-plan -->"
MAX_CHARS = 60_000
MAX_WAVE_ROWS = 50
REBOOTING = (Disruption.REPLACE, Disruption.DRAIN_REBOOT)
WHAT_APPLY_DOES = {
    Disruption.REPLACE: "drain, remove from the old owner, provision anew",
    Disruption.DRAIN_REBOOT: "drain, upgrade the driver, reboot",
    Disruption.DRAIN: "drain, upgrade the user-space tuple",
    Disruption.ROLLING: "no drain: canary checked under the new health policy first, then waves",
    Disruption.RESTART_DAEMON: "restart slurmctld/slurmd, jobs survive",
    Disruption.RECONFIGURE: "scontrol reconfigure / helm upgrade",
    Disruption.NONE: "nothing running notices",
}


def plan_markdown(plan: Plan, notes: dict[str, Any] | None = None) -> str:
    against = plan.base or "nothing"
    lines = [MARKER, f"### fleetspec plan: fleet {code(plan.fleet.name)} against {cell(against)}", ""]
    if plan.empty:
        lines.append(f"**No changes.** The fleet matches {cell(against)}.")
        return "\n".join(lines) + "\n"
    summary = plan.summary()
    node_total = sum(summary["nodes"].values())
    lines += [f"**{summary['changes']} change(s)**, {node_total} on nodes; most disruptive: "
              f"**{summary['max_disruption']}**; {summary['waves']} wave(s).", ""]
    line = membership_line(plan)
    if line is not None:
        lines += [cell(line), ""]
    lines += _by_class(summary)
    if summary["partitions"]:
        lines += _partitions(summary["partitions"])
    lines += _reboots(plan)
    lines += _waves(plan)
    lines += _kubernetes(notes)
    lines += _staleness(plan)
    head = "\n".join(lines) + "\n"
    return head + _changes(plan.changes, MAX_CHARS - len(head))


def _by_class(summary: dict[str, Any]) -> list[str]:
    lines = ["| disruption | changes | nodes | what apply does |", "|---|---:|---:|---|"]
    for d in Disruption:
        changes = summary["by_disruption"].get(d.value, 0)
        if changes:
            lines.append(f"| {code(d.value)} | {changes} | {summary['nodes'].get(d.value, 0)} | "
                         f"{WHAT_APPLY_DOES[d]} |")
    return [*lines, ""]


def _partitions(partitions: dict[str, dict[str, int]]) -> list[str]:
    classes = [d for d in Disruption if any(d.value in counts for counts in partitions.values())]
    lines = ["#### Nodes per partition", "",
             "| partition | " + " | ".join(d.value for d in classes) + " |",
             "|---|" + "---:|" * len(classes)]
    for name, counts in partitions.items():
        lines.append(f"| {cell(name)} | " + " | ".join(str(counts.get(d.value, "")) for d in classes) + " |")
    return [*lines, ""]


def _reboots(plan: Plan) -> list[str]:
    hosts = sorted({c.host for c in plan.changes if c.host is not None and c.disruption in REBOOTING})
    if not hosts:
        return ["No node reboots.", ""]
    return [f"#### Reboots: {len(hosts)} node(s)", "",
            f"{code(compress(hosts))}: driver or hardware changes; apply reboots them only with "
            f"`--allow-reboot`, after draining.", ""]


def _waves(plan: Plan) -> list[str]:
    if not plan.waves:
        return ["No node has to leave service: no waves.", ""]
    settings = plan.settings
    lines = [f"#### Waves (canary {settings.get('canary')}, max unavailable {settings.get('max_unavailable')} "
             f"per partition)", "",
             "| partition | wave | nodes | hosts | racks | disruption |", "|---|---|---:|---|---|---|"]
    for w in plan.waves[:MAX_WAVE_ROWS]:
        label = f"{w.index} (canary)" if w.canary else str(w.index)
        lines.append(f"| {cell(w.partition)} | {label} | {len(w.hosts)} | {code(compress(w.hosts))} | "
                     f"{cell(','.join(w.racks))} | {code(w.disruption.value)} |")
    if len(plan.waves) > MAX_WAVE_ROWS:
        lines.append(f"| ... | {len(plan.waves) - MAX_WAVE_ROWS} more waves | | | | |")
    return [*lines, "", cell(schedule_line(plan)), "", *gantt_markdown(plan)]


def _kubernetes(notes: dict[str, Any] | None) -> list[str]:
    lines = []
    for prerequisite in (notes or {}).get("prerequisites", []):
        lines.append(f"- prerequisite: {cell(prerequisite['message'])}")
    if notes and "preview" in notes:
        lines.append(f"- Kubernetes layer (Pulumi preview): {cell(notes['preview']['summary'])}")
    return [*lines, ""] if lines else []


def _staleness(plan: Plan) -> list[str]:
    if plan.state_serial is None:
        return ["This plan compares two revisions of the spec; apply plans again against the state.", ""]
    return [f"Made against state serial {plan.state_serial}: a plan saved from it applies only while the "
            f"state is still at serial {plan.state_serial}.", ""]


def _changes(changes: tuple[Change, ...], budget: int) -> str:
    by_class: dict[Disruption, list[tuple[Change, str]]] = {}
    for change, target, _count in grouped(changes):
        by_class.setdefault(change.disruption, []).append((change, target))
    out: list[str] = []
    used = 0
    cut = (f"\n*The changes are cut here to fit a comment; `fleetspec plan --format json` lists all "
           f"{len(changes)}.*\n")
    budget -= len(cut) + 40  # room for the note and the closing tags
    for d in Disruption:
        rows = by_class.get(d)
        if not rows:
            continue
        count = sum(c.disruption is d for c in changes)
        lines = [f"<details><summary><b>{d.value}</b>: {count} change(s) in {len(rows)} row(s)</summary>", "",
                 "| action | target | what and why |", "|---|---|---|"]
        for c, t in rows:
            line = f"| {c.action.value} | {code(t)} | {cell(c.reason)} |"
            if used + sum(len(x) + 1 for x in lines) + len(line) > budget:
                out.append("\n".join([*lines, "", "</details>"]) + "\n" + cut)
                return "".join(out)
            lines.append(line)
        text = "\n".join([*lines, "", "</details>", ""]) + "\n"
        out.append(text)
        used += len(text)
    return "".join(out)
