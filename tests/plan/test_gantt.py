"""The rollout as a picture (issue #44 item 3): the mermaid Gantt in ``plan --format
markdown``, checked as text (goldens, bounds) and as the real mermaid draws it: npm's
``@mermaid-js/mermaid-cli`` (mmdc, pinned in scripts/test, with mermaid 11.3.0: the
version GitHub renders with) driving Debian's chromium renders both pull-request
comments to SVG, and every bar is read back and checked against the plan's JSON: every
wave present (or inside a run the bar names), one section per lane, canaries red and
first, each bar where the waves' ``after`` and modelled minutes put it."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from fleetspec.compile.ir import Fleet
from fleetspec.plan import make_plan
from fleetspec.plan.model import Disruption, Plan, Wave
from fleetspec.plan.render_gantt import MAX_BARS, MAX_LANES, gantt, gantt_markdown
from fleetspec.plan.render_markdown import plan_markdown
from fleetspec.plan.schedule import schedule
from tests.conftest import unavailable
from tests.plan.conftest import ROOT, shared_lane_plan, variant

# Where scripts/test installs mermaid-cli: $FLEETSPEC_MMDC_DIR, else the machine's cache
# (as root, kept between clones like the lab's images), else the checkout's .cache.
MMDC = next((p for p in (Path(d) / "node_modules" / ".bin" / "mmdc" for d in (
    os.environ.get("FLEETSPEC_MMDC_DIR") or "", "/var/cache/fleetspec-mmdc", ROOT / ".cache" / "mmdc") if d)
    if p.exists()), ROOT / ".cache" / "mmdc" / "node_modules" / ".bin" / "mmdc")
SVG = "{http://www.w3.org/2000/svg}"
# The 20,000-node benchmark fleet with 40 nodes out at once per partition: 503 waves, so
# the comment must group them (the default 25% gives 12 waves, drawn one a bar).
BIG_MAX_UNAVAILABLE = 40


@pytest.fixture(scope="module")
def small(quickstart: Fleet) -> Plan:
    return make_plan(variant("driver-bump"), quickstart, base="spec quickstart.yaml")


@pytest.fixture(scope="module")
def big(fleets_20k: tuple[Fleet, Fleet]) -> Plan:
    old, new = fleets_20k
    return make_plan(new, old, max_unavailable=BIG_MAX_UNAVAILABLE, base="spec fleet-20000.yaml")


@pytest.fixture(scope="module")
def shared() -> Plan:
    """Two partitions in one lane (a debug partition spans a node of each)."""
    return shared_lane_plan()[1]


def chart(plan: Plan) -> str:
    return "\n".join(gantt_markdown(plan))


def test_golden_gantts(small: Plan, big: Plan, shared: Plan, golden) -> None:
    golden.check_text("plan-gantt/driver-bump.md", chart(small))
    golden.check_text("plan-gantt/shared-lane.md", chart(shared))
    golden.check_text("plan-gantt/bump-20000-max-unavailable-40.md", chart(big))


def test_the_comment_carries_the_gantt_after_the_waves(small: Plan) -> None:
    text = plan_markdown(small)
    assert text.index("#### Waves") < text.index("```mermaid\ngantt\n") < text.index("<details>")
    assert "title Modelled rollout 1 h 04 min (63.75 min), 5 wave(s) in 1 lane(s)" in text
    assert "Gantt bounded" not in text  # 5 waves: one bar each, nothing grouped


def synthetic(lanes: int, waves: int, name: str = "p{}") -> tuple[Wave, ...]:
    """``lanes`` partitions of ``waves`` waves each (a canary of 1 node, then 4 nodes a
    wave); hosts no partition of the fleet has, so each partition is its own lane."""
    out = []
    for p in range(lanes):
        for i in range(1, waves + 1):
            hosts = (f"n{p}-{i}-0",) if i == 1 else tuple(f"n{p}-{i}-{k}" for k in range(4))
            out.append(Wave(name.format(p), i, i == 1, hosts, ("r1",), Disruption.DRAIN_REBOOT))
    return tuple(out)


def test_huge_rollouts_are_bounded_and_say_what_they_grouped(quickstart: Fleet) -> None:
    waves = synthetic(20, 200)  # 4,000 waves in 20 lanes
    sched = schedule(waves, quickstart)
    drawn = gantt(sched)
    bars = [b for _, section in drawn.sections for b in section]
    assert len(drawn.sections) == MAX_LANES and len(bars) <= MAX_BARS + MAX_LANES
    assert drawn.lanes_left_out == 8 and drawn.waves_left_out == 8 * 200
    covered = [s.id for b in bars for s in b.steps]
    assert len(covered) == len(set(covered)) == MAX_LANES * 200  # every wave of a drawn lane, once
    for bar in bars:  # a run is a chain: it ends where its last wave ends
        assert all(s.after == (prev.id,) for prev, s in zip(bar.steps, bar.steps[1:], strict=False))
    plan = Plan(quickstart, (), waves, settings={"canary": 1, "max_unavailable": 4})
    text = "\n".join(gantt_markdown(plan))
    assert len(text) < 50_000 and text.count("\n    section ") == MAX_LANES
    assert (f"{MAX_LANES * 199} of the 4000 waves are drawn in runs" in text  # all but the canaries
            and "8 further lane(s) with 1600 wave(s) are not drawn" in text)
    # A lane's first wave waits for the canaries of lanes drawn below it: it starts at its
    # modelled minute (mermaid 11.3.0 misreads forward ``after`` ids).
    first = next(line for line in text.splitlines() if line.startswith("    waves 2-"))
    assert ", 2001-01-01 00:12:45, " in first, first


def test_names_mermaid_would_read_as_syntax_are_neutralised(quickstart: Fleet) -> None:
    waves = synthetic(2, 3, name="a:b#{};%%x")
    text = "\n".join(gantt_markdown(Plan(quickstart, (), waves, settings={})))
    body = text.split("```mermaid\n", 1)[1].split("```", 1)[0]
    assert "section a_b_0___x" in body and not re.search(r"[#;]|%%", body)
    tasks = [line for line in body.splitlines() if " :" in line]
    assert len(tasks) == 6 and all(re.fullmatch(
        r"    [^:#;%]+ :(crit, )?b\d+, (after b\d+( b\d+)*|2001-01-01 \d\d:\d\d:\d\d), \d+s", t) for t in tasks), tasks


# --- the real mermaid ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def rendered(small: Plan, big: Plan, shared: Plan, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    """The pull-request comments in one Markdown file, rendered by one mmdc run (one
    chromium start, ~4-6 s): the SVG of each comment's Gantt."""
    chromium = os.environ.get("PUPPETEER_EXECUTABLE_PATH", "/usr/bin/chromium")
    if not MMDC.exists() or shutil.which(chromium) is None:
        unavailable(f"mermaid-cli ({MMDC}) or Debian's chromium ({chromium}) is missing: scripts/test installs both")
    work = tmp_path_factory.mktemp("mermaid")
    (work / "comments.md").write_text("\n".join(plan_markdown(p) for p in (small, big, shared)))
    # Chromium's sandbox refuses to start as root; the page is our own text.
    config = {"executablePath": chromium, "args": ["--no-sandbox"] if os.geteuid() == 0 else []}
    (work / "puppeteer.json").write_text(json.dumps(config))
    env = {**os.environ, "PUPPETEER_SKIP_DOWNLOAD": "1", "PUPPETEER_EXECUTABLE_PATH": chromium,
           "HOME": str(work)}
    result = subprocess.run([str(MMDC), "-p", "puppeteer.json", "-i", "comments.md", "-o", "gantt.svg"],
                            cwd=work, env=env, capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout + result.stderr
    return tuple((work / f"gantt-{i}.svg").read_text() for i in (1, 2, 3))


def expected_times(data: dict[str, Any]) -> dict[str, tuple[float, float]]:
    """(start, end) minutes of each wave from the plan's JSON alone: a wave starts when
    the last wave it is ``after`` ends, and takes ceil(hosts / parallel) batches."""
    waves = {w["id"]: w for w in data["waves"]}
    minutes = data["schedule"]["batch_minutes"]
    times: dict[str, tuple[float, float]] = {}

    def times_of(wid: str) -> tuple[float, float]:
        if wid not in times:
            w = waves[wid]
            start = max((times_of(a)[1] for a in w["after"]), default=0.0)
            times[wid] = (start, start + math.ceil(len(w["hosts"]) / w["parallel"]) * minutes)
        return times[wid]

    for wid in waves:
        times_of(wid)
    return times


def tick_minutes(label: str) -> float:
    day, clock = re.fullmatch(r"(?:day (\d+) )?(\d\d:\d\d)", label).groups()
    hours, mins = clock.split(":")
    return (int(day or 1) - 1) * 1440 + int(hours) * 60 + int(mins)


def bars_of(svg: str) -> dict[str, Any]:
    """What mermaid drew: the title, the time scale (from the axis ticks), the section
    titles top down, and each bar's text, classes, section, x and width."""
    root = ET.fromstring(svg)
    grid = next(g for g in root.iter(f"{SVG}g") if g.get("class") == "grid")
    left = float(re.match(r"translate\(([\d.]+)", grid.get("transform")).group(1))
    ticks = [(left + float(re.match(r"translate\(([\d.]+)", g.get("transform")).group(1)),
              tick_minutes(g.find(f"{SVG}text").text)) for g in grid.iter(f"{SVG}g") if g.get("class") == "tick"]
    (x0, m0), (x1, m1) = ticks[0], ticks[-1]
    scale = (x1 - x0) / (m1 - m0)
    texts = {t.get("id"): "".join(t.itertext()).strip() for t in root.iter(f"{SVG}text") if t.get("id")}
    titles = sorted((float(t.get("y")), "".join(t.itertext()).strip()) for t in root.iter(f"{SVG}text")
                    if "sectionTitle" in (t.get("class") or ""))
    # Each row has a band ``section sectionN`` (N: the section's number mod 4): rows of
    # one section are contiguous and neighbouring sections differ in N.
    rows = sorted((float(r.get("y")), r.get("class")) for r in root.iter(f"{SVG}rect")
                  if (r.get("class") or "").startswith("section "))
    section_of_row, number = {}, -1
    for i, (y, cls) in enumerate(rows):
        if i == 0 or cls != rows[i - 1][1]:
            number += 1
        section_of_row[y] = number
    bars = []
    for r in root.iter(f"{SVG}rect"):
        if r.get("id") and "task" in (r.get("class") or "").split():
            y = float(r.get("y"))
            row = max(ry for ry in section_of_row if ry <= y)
            bars.append({"id": r.get("id"), "text": texts[r.get("id") + "-text"], "class": r.get("class"),
                         "y": y, "section": titles[section_of_row[row]][1],
                         "start": (float(r.get("x")) - x0) / scale + m0,
                         "end": (float(r.get("x")) + float(r.get("width")) - x0) / scale + m0})
    title = next(t.text for t in root.iter(f"{SVG}text") if t.get("class") == "titleText")
    return {"title": title, "sections": [t for _, t in titles], "bars": bars, "px": 1 / scale}


def check_against_json(svg: str, plan: Plan) -> dict[str, Any]:
    data = json.loads(json.dumps(plan.to_dict()))  # what `plan --format json` prints
    drawn = bars_of(svg)
    times = expected_times(data)
    waves = {w["id"]: w for w in data["waves"]}
    total = data["schedule"]["modelled_minutes"]
    assert f"({total:g} min), {len(waves)} wave(s) in {data['schedule']['lanes']} lane(s)" in drawn["title"]
    assert len(drawn["sections"]) == data["schedule"]["lanes"]
    tolerance = 1.5 * drawn["px"]  # mermaid draws on whole pixels
    seen: list[str] = []
    for bar in drawn["bars"]:
        m = re.fullmatch(r"(canary wave|waves?) (\d+)(?:-(\d+))?(?: of (\S+))?, (\d+) nodes?, ([\d.]+) min",
                         bar["text"])
        assert m, bar["text"]
        kind, first, last, partition, nodes, _ = m.groups()
        partition = partition or bar["section"]
        assert partition in bar["section"].split(" + "), (bar, drawn["sections"])
        ids = [f"{partition}#{i}" for i in range(int(first), int(last or first) + 1)]
        for prev, wid in zip(ids, ids[1:], strict=False):
            assert waves[wid]["after"] == [prev], (bar, wid)  # a run is a chain of its lane
        assert all(waves[w]["canary"] == (kind == "canary wave") for w in ids), bar
        assert ("crit" in bar["class"]) == (kind == "canary wave"), bar
        assert int(nodes) == sum(len(waves[w]["hosts"]) for w in ids), bar
        assert abs(bar["start"] - times[ids[0]][0]) <= tolerance, (bar, times[ids[0]])
        assert abs(bar["end"] - times[ids[-1]][1]) <= tolerance, (bar, times[ids[-1]])
        seen += ids
    assert sorted(seen) == sorted(waves)  # every wave, once
    for section in drawn["sections"]:  # a lane: its bars top down in time, never two at once
        lane = sorted((b for b in drawn["bars"] if b["section"] == section), key=lambda b: b["y"])
        assert lane and "crit" in lane[0]["class"]  # the canary first
        for a, b in zip(lane, lane[1:], strict=False):
            assert a["end"] <= b["start"] + tolerance, (a, b)
    for w in data["waves"]:  # waiting on a non-canary wave: the same lane
        section = next(b["section"] for b in drawn["bars"] if w["partition"] in b["section"].split(" + "))
        for a in w["after"]:
            if not waves[a]["canary"]:
                assert waves[a]["partition"] in section.split(" + "), (w["id"], a)
    return drawn


def test_mermaid_draws_the_small_rollout_as_the_plan_states_it(rendered, small: Plan) -> None:
    drawn = check_against_json(rendered[0], small)
    assert drawn["sections"] == ["nvidia-hopper"] and len(drawn["bars"]) == 5
    assert drawn["bars"][0]["text"] == "canary wave 1, 1 node, 12.75 min"


def test_mermaid_draws_the_20000_node_rollout_grouped_as_stated(rendered, big: Plan) -> None:
    drawn = check_against_json(rendered[1], big)
    assert drawn["sections"] == ["nvidia-ampere", "nvidia-hopper"]
    assert len(big.waves) == 503 and len(drawn["bars"]) <= MAX_BARS
    assert "501 of the 503 waves are drawn in runs" in plan_markdown(big)


def test_mermaid_draws_two_partitions_of_one_lane_one_after_another(rendered, shared: Plan) -> None:
    drawn = check_against_json(rendered[2], shared)
    assert drawn["sections"] == ["nvidia-ampere + nvidia-hopper"]
    assert [b["text"].split(",")[0] for b in drawn["bars"]] == [
        "canary wave 1 of nvidia-ampere", "canary wave 1 of nvidia-hopper", "wave 2 of nvidia-ampere",
        "wave 2 of nvidia-hopper"]
