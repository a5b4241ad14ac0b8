"""The rollout as a picture: a mermaid Gantt of the plan's schedule, for the pull-request
comment (``plan --format markdown``). Pure: a Plan in, lines of Markdown out.

What it draws is what the plan's JSON states (``plan/schedule.py``): one section per lane
(partitions that share a node roll one after another in one lane; lanes run side by
side), each lane's canaries first (tagged ``crit``, drawn red), every other wave ``after``
the waves it waits for, as long as its modelled minutes; the title gives the total.

Bounded for huge fleets: at most ``MAX_LANES`` sections and ``MAX_BARS`` bars. A lane
with more waves than its share draws runs of consecutive waves as one bar ("waves 2-41");
that is exact, since within a lane each of those waves waits only for the one before it
(the bar starts when the first starts and ends when the last ends). Lanes past
``MAX_LANES`` are not drawn; a line under the diagram says how many waves and lanes were
grouped or left out. The diagram text stays a few KB: mermaid refuses text over its
``maxTextSize`` (50,000 characters by default, mermaid's ``config.schema.yaml``), and
GitHub renders ``mermaid`` fences with mermaid 11 (11.3.0 reported in
https://github.com/docsible/docsible/issues/30, Oct 2024), so only gantt syntax that
11.3.0 reads is used (``after`` with several ids, ``todayMarker off``, durations in
seconds).

Times: a fixed origin (2001-01-01 00:00, local time, as mermaid's dayjs parses it and d3
draws it), so the axis reads hours into the rollout (``%H:%M``) in every time zone; a
rollout over a day reads "day N HH:MM".
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from fleetspec.plan.model import Plan
from fleetspec.plan.render_text import duration_words
from fleetspec.plan.schedule import Schedule, Step

MAX_BARS = 60
MAX_LANES = 12
ORIGIN = datetime(2001, 1, 1)  # any fixed day: only the time of day (or day number) is shown
# Mermaid's gantt grammar (gantt.jison) ends a task's text at ':' '#' ';' and a line at
# '\n'; '%%' starts a comment. Partition names are Slurm names (letters, digits, '-', '_',
# '.'), but the spec is input: anything outside this list becomes '_'.
_UNSAFE = re.compile(r"[^A-Za-z0-9._+/() -]")


@dataclass(frozen=True)
class Bar:
    """One bar of the Gantt: one wave, or a run of consecutive waves of one lane."""

    id: str  # mermaid task id: b1, b2, ...
    lane: int
    steps: tuple[Step, ...]
    after: tuple[str, ...]  # bar ids it waits for

    @property
    def start_min(self) -> float:
        return self.steps[0].start_min

    @property
    def end_min(self) -> float:
        return self.steps[-1].end_min

    @property
    def canary(self) -> bool:
        return self.steps[0].wave.canary

    @property
    def nodes(self) -> int:
        return sum(len(s.wave.hosts) for s in self.steps)


@dataclass(frozen=True)
class Gantt:
    sections: tuple[tuple[str, tuple[Bar, ...]], ...]  # (title, bars), lane order
    waves: int  # waves in the plan
    grouped: int  # waves drawn inside a bar with others
    lanes_left_out: int
    waves_left_out: int
    minutes: float


def safe(text: str) -> str:
    return _UNSAFE.sub("_", text)


def gantt(schedule: Schedule) -> Gantt:
    """The bars of ``schedule``, bounded by ``MAX_LANES`` and ``MAX_BARS``."""
    lanes: dict[int, list[Step]] = {}
    order = {s.id: i for i, s in enumerate(schedule.steps)}
    for step in sorted(schedule.steps, key=lambda s: (s.start_min, order[s.id])):
        lanes.setdefault(step.lane, []).append(step)
    drawn = list(lanes)[:MAX_LANES]
    canaries = sum(s.wave.canary for lane in drawn for s in lanes[lane])
    share = max(1, (MAX_BARS - canaries) // max(1, len(drawn)))
    bar_of: dict[str, str] = {}  # step id -> id of the bar it ends
    sections = []
    grouped = 0
    for lane in drawn:
        runs = _runs(lanes[lane], share)
        bars = []
        for run in runs:
            bar_id = f"b{len(bar_of) + 1}"
            # Waits drawn as ``after`` only when every wave it waits for ends a bar drawn above
            # it; else (a canary of a later or left-out lane) the bar starts at its modelled
            # minute. Mermaid 11.3.0 resolves a forward ``after a b`` wrongly when ``a`` is
            # drawn and ``b`` not yet (ganttDb getStartDate keeps the first end it finds).
            waits = run[0].after
            after = tuple(dict.fromkeys(bar_of[a] for a in waits)) if all(a in bar_of for a in waits) else ()
            bars.append(Bar(bar_id, lane, tuple(run), after))
            bar_of[run[-1].id] = bar_id
            grouped += len(run) if len(run) > 1 else 0
        partitions = dict.fromkeys(s.wave.partition for s in lanes[lane])
        sections.append((" + ".join(safe(p) for p in partitions), tuple(bars)))
    left = [s for lane in list(lanes)[MAX_LANES:] for s in lanes[lane]]
    return Gantt(tuple(sections), len(schedule.steps), grouped, len(lanes) - len(drawn), len(left),
                 schedule.minutes)


def _runs(steps: list[Step], share: int) -> list[list[Step]]:
    """The lane's steps as bars: canaries alone; the other waves one a bar when they fit
    ``share``, else in runs of consecutive waves of one partition, each run a chain (every
    wave of it but the first waits only for the one before)."""
    canaries = [[s] for s in steps if s.wave.canary]
    rest = [s for s in steps if not s.wave.canary]
    size = max(1, math.ceil(len(rest) / share))
    runs: list[list[Step]] = []
    for step in rest:
        current = runs[-1] if runs else None
        chained = (current is not None and step.after == (current[-1].id,) and len(current) < size
                   and step.wave.partition == current[-1].wave.partition)
        if chained and current is not None:
            current.append(step)
        else:
            runs.append([step])
    return [*canaries, *runs]


def label(bar: Bar, multi: bool) -> str:
    """The bar's text: which waves, how many nodes, how long (mermaid-safe)."""
    first, last = bar.steps[0].wave, bar.steps[-1].wave
    which = f"canary wave {first.index}" if bar.canary else (
        f"wave {first.index}" if len(bar.steps) == 1 else f"waves {first.index}-{last.index}")
    of = f" of {safe(first.partition)}" if multi else ""
    minutes = bar.end_min - bar.start_min
    return f"{which}{of}, {bar.nodes} node{'s' if bar.nodes != 1 else ''}, {minutes_text(minutes)} min"


def minutes_text(minutes: float) -> str:
    """``12.75``, ``153``: two decimals at most, never an exponent."""
    return f"{minutes:.2f}".rstrip("0").rstrip(".")


def clock(minutes: float) -> str:
    """``minutes`` after the origin as mermaid's dateFormat reads it."""
    return (ORIGIN + timedelta(seconds=round(minutes * 60))).strftime("%Y-%m-%d %H:%M:%S")


def gantt_markdown(plan: Plan) -> list[str]:
    """The ```mermaid fence (and a line on what is grouped); [] without waves."""
    if not plan.waves:
        return []
    chart = gantt(plan.schedule)
    lines = ["```mermaid", "gantt",
             f"    title Modelled rollout {duration_words(chart.minutes)} ({minutes_text(chart.minutes)} min), "
             f"{chart.waves} wave(s) in {plan.schedule.lanes} lane(s)",
             "    dateFormat YYYY-MM-DD HH:mm:ss",
             f"    axisFormat {'%H:%M' if chart.minutes <= 24 * 60 else 'day %-j %H:%M'}",
             "    todayMarker off"]
    for title, bars in chart.sections:
        multi = len({s.wave.partition for bar in bars for s in bar.steps}) > 1  # name the partition
        lines.append(f"    section {title}")
        for bar in bars:
            tags = "crit, " if bar.canary else ""
            start = f"after {' '.join(bar.after)}" if bar.after else clock(bar.start_min)
            seconds = round((bar.end_min - bar.start_min) * 60)
            lines.append(f"    {label(bar, multi)} :{tags}{bar.id}, {start}, {seconds}s")
    lines += ["```", ""]
    notes = []
    if chart.grouped:
        notes.append(f"{chart.grouped} of the {chart.waves} waves are drawn in runs of consecutive waves of one "
                     "partition, a bar a run")
    if chart.lanes_left_out:
        notes.append(f"{chart.lanes_left_out} further lane(s) with {chart.waves_left_out} wave(s) are not drawn")
    if notes:
        lines += ["*Gantt bounded to fit a comment: " + "; ".join(notes) + ". `fleetspec plan --format json` "
                  "lists every wave with its `after`.*", ""]
    return lines
