"""Every benchmark target as a ratio measured side by side in one run, so the verdicts
hold on a busy machine: `python3 benchmarks/run.py [--quick]`.

Each row measures whole processes (interpreter start included) by the CPU time they
use (user + system, from wait4: on a shared machine wall-clock time mostly measures the
neighbours), alternating the measured command and its reference, and keeps the lowest
of several runs of each. Every process runs with its bytecode compiled, as installed
software does (pip compiles it at install; the dependencies' bytecode is in
site-packages): a PYTHONDONTWRITEBYTECODE in the environment would otherwise make
fleetspec, and only fleetspec, compile its source at every start. Targets (issue 14):

- `fleetspec --help`, `version`, `validate examples/quickstart.yaml`: at most 1.25x a
  minimal Typer app loading the same dependencies and doing nothing (baseline_app.py);
- validate + compile + render of 20,000 nodes: under 0.75x the time libyaml
  (CSafeLoader) takes to read back the inventory that render wrote;
- 100,000 nodes: at most 5.5x the 20,000-node time, peak memory under 400 MB;
- `plan` with a fleet-wide driver bump on 20,000 nodes: at most 1.5x the render; with
  `--base OLD` at most 1.5x too (issue 45; issue 14 asked 2x).

Issue 45: `import slurm` of a 20,000-node cluster's files with its nodes' facts
(bench_import.py) in under 10 s of CPU, and linear: at most 5.5x the 4,000-node import.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from bench_import import SLURM_VERSION, write_cluster  # noqa: E402
from fleetgen import fleet_yaml  # noqa: E402

FLEETSPEC = [sys.executable, "-c", "from fleetspec.cli import main; main()"]
HOPPER = 'hopper-cu13: {driver: "580.95.05"'
HOPPER_BUMPED = 'hopper-cu13: {driver: "580.126.09"'


# Bytecode goes to a folder of this run (PYTHONPYCACHEPREFIX, set in main), never into
# the tree. The startup rows run each command once unmeasured first; the longer rows
# run after a render that compiled what they import.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV.update({"PYTHONPATH": str(ROOT), "COLUMNS": "200"})


def run(argv: list[str], cwd: Path = ROOT) -> tuple[float, float]:
    """(CPU seconds, peak RSS in MB) of one whole process; it must succeed."""
    proc = subprocess.Popen(argv, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = usage.ru_utime + usage.ru_stime
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{stderr[-2000:]}")
    return seconds, usage.ru_maxrss / 1024


def fastest(commands: dict[str, list[str]], repeats: int, warm: bool = False) -> dict[str, tuple[float, float]]:
    """Alternate the commands `repeats` times; per command the fastest run (and its peak).
    ``warm``: run each once unmeasured first (it compiles what the command imports)."""
    for argv in commands.values() if warm else ():
        run(argv)
    best: dict[str, tuple[float, float]] = {}
    for _ in range(repeats):
        for name, argv in commands.items():
            seconds, peak = run(argv)
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, max(peak, best.get(name, (0, 0))[1]))
    return best


def row(name: str, seconds: float, reference: str, ref_seconds: float, target: float, extra: str = "") -> bool:
    ratio = seconds / ref_seconds
    ok = ratio <= target
    print(f"{name:<44} {seconds:>8.3f}s  {ratio:>5.2f}x {reference:<34} target <= {target:<5} "
          f"{'ok' if ok else 'MISSED'}{'  ' + extra if extra else ''}", flush=True)
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description="fleetspec benchmarks: ratios with targets and verdicts")
    parser.add_argument("--quick", action="store_true", help="fewer repeats (a rough look, not a verdict)")
    parser.add_argument("--startup", action="store_true",
                        help="only the start-up rows (--help, version, validate against the minimal Typer app)")
    parser.add_argument("--rollout", type=int, nargs="?", const=1000, metavar="HOSTS",
                        help="also the rollout row: one wave's Ansible run over HOSTS (default 1,000) "
                             "local-connection hosts; about 0.7 s of CPU per host, so ~12 min on 2 cores")
    parser.add_argument("--state", action="store_true",
                        help="also the state rows: bytes and time per wave-write at 20,000 nodes, file and "
                             "PostgreSQL (a local server from Debian's postgresql package), against format 1's "
                             "whole-document write; about a minute")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="fleetspec-bench-pycache-") as pycache:
        ENV["PYTHONPYCACHEPREFIX"] = pycache
        return measure(quick=args.quick, rollout=args.rollout, state=args.state, startup_only=args.startup)


def state_rows() -> list[bool]:
    """Per wave-write at 20,000 nodes (10 waves of 500): bytes written and wall time, against
    the whole-document write of state format 1 (issue #30 item 4: a wave writes its nodes,
    not the state). Target: at most a tenth of the bytes; and for PostgreSQL a history that
    grows by at most a tenth of format 1's per wave."""
    out = subprocess.run([sys.executable, str(HERE / "bench_state.py")], env=ENV, cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.splitlines()
    got = {line.split()[0]: dict(kv.split("=") for kv in line.split()[1:]) for line in out}
    verdicts = []
    for new, old, what in (("file", "file-format1", "file store"), ("postgresql", "postgresql-format1", "PostgreSQL")):
        if "skipped" in got.get(new, {}):
            print(f"{f'state wave-write, {what}':<44} skipped: {got[new]['skipped']}", flush=True)
            continue
        n, o = got[new], got[old]
        ratio = float(n["bytes"]) / float(o["bytes"])
        extra = f"wall {float(n['wall']):.2f}s vs {float(o['wall']):.2f}s"
        if "history" in n:
            grows = (int(n["history"]) - int(n["history_applied"])) / 10
            grows_old = (int(o["history"]) - int(o["history_applied"])) / 10
            extra += (f", history +{grows / 1024:.0f} KB/wave vs +{grows_old / 1024:.0f} KB "
                      f"(rows {int(n['history_applied']) / 2**20:.1f} MB once)")
            ok = ratio <= 0.1 and grows <= grows_old / 10
        else:
            ok = ratio <= 0.1
        label = f"state wave-write, {what}, bytes"
        reference = f"whole document ({float(o['bytes']) / 1024:.0f}K)"
        print(f"{label:<44} {float(n['bytes']) / 1024:>7.0f}K  {ratio:>5.2f}x {reference:<34} "
              f"target <= 0.1  {'ok' if ok else 'MISSED'}  {extra}", flush=True)
        verdicts.append(ok)
    return verdicts


def rollout_rows(hosts: int) -> list[bool]:
    """Controller CPU per node of one wave (target: under 0.2 s, issue #30) and the modelled
    20,000-node driver bump (target: at most 8 hours at 12.75 min per batch)."""
    # 50 forks (ansible.cfg's): a worker per fork, and 1,000 of them at once would hold GBs here.
    seconds, peak = run([sys.executable, str(HERE / "bench_rollout.py"), "--wave", str(hosts), "--forks", "50"])
    per_node = seconds / hosts
    ok = per_node < 0.2
    print(f"{f'apply wave, {hosts:,} local hosts, per node':<44} {per_node:>8.3f}s  {'':>6} "
          f"{'(one Ansible run, 50 forks)':<34} target < 0.2s {'ok' if ok else 'MISSED'}  "
          f"total {seconds:.0f}s, peak {peak:.0f} MB", flush=True)
    native = subprocess.run([sys.executable, str(HERE / "bench_rollout.py"), "--native", str(hosts)], env=ENV,
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    native_per_node = float(native[3].split("=")[1])
    native_ok = native_per_node < 0.2
    print(f"{f'slurm-native wave, {hosts:,} nodes, per node':<44} {native_per_node:>8.4f}s  {'':>6} "
          f"{'(sinfo + result + verify)':<34} target < 0.2s {'ok' if native_ok else 'MISSED'}", flush=True)
    in_place = subprocess.run([sys.executable, str(HERE / "bench_rollout.py"), "--native-in-place", str(hosts)],
                              env=ENV, cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    in_place_per_node = float(in_place[3].split("=")[1])
    in_place_ok = in_place_per_node < 0.2
    print(f"{f'slurm-native in-place wave, {hosts:,} nodes, per node':<44} {in_place_per_node:>8.4f}s  {'':>6} "
          f"{'(drain + request + result + resume)':<34} target < 0.2s {'ok' if in_place_ok else 'MISSED'}",
          flush=True)
    out = subprocess.run([sys.executable, str(HERE / "bench_rollout.py"), "--model"], env=ENV, cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout.split()
    minutes = float(out[1].split("=")[1])
    fits = minutes <= 8 * 60
    print(f"{'modelled 20,000-node driver bump':<44} {minutes / 60:>7.2f}h  {'':>6} "
          f"{'12.75 min/batch, forks = wave':<34} target <= 8h  {'ok' if fits else 'MISSED'}", flush=True)
    return [ok, native_ok, in_place_ok, fits]


def import_rows(repeats: int) -> list[bool]:
    """`import slurm` of 20,000 nodes with facts: under 10 s of CPU, and at most 5.5x the
    4,000-node import (linear, with the render rows' slack)."""
    with tempfile.TemporaryDirectory() as tmp:
        commands = {}
        for nodes in (4000, 20000):
            cluster = Path(tmp) / str(nodes)
            write_cluster(nodes, cluster)
            commands[nodes] = [*FLEETSPEC, "import", "slurm", "--conf", str(cluster / "slurm.conf"),
                               "--gres", str(cluster / "gres.conf"), "--facts", str(cluster / "facts"),
                               "--slurm-version", SLURM_VERSION, "--out", str(cluster / "spec.yaml")]
        times = fastest(commands, repeats)
    seconds, peak = times[20000]
    under = seconds < 10
    ok = row("import slurm, 20,000 nodes with facts", seconds, f"import 4,000 ({times[4000][0]:.2f}s)",
             times[4000][0], 5.5, f"peak {peak:.0f} MB; under 10 s: {'ok' if under else 'MISSED'}")
    return [ok and under]


def measure(quick: bool, rollout: int | None = None, state: bool = False, startup_only: bool = False) -> int:
    # The startup rows take a third of a second a run, and their fastest run is what counts:
    # on a 2-core machine with neighbours, 7 runs left the minimum a few percent off
    # from run to run, so they get 25 (both commands alike, alternating); the fleet rows, a
    # second or more a run, 5 (3 left a neighbour's burst in the minimum of a whole row).
    startup, large = (5, 1) if quick else (25, 5)
    verdicts: list[bool] = []
    print(f"{'measured':<44} {'CPU':>9}  {'ratio':>6} {'reference':<34} target")

    quickstart = str(ROOT / "examples" / "quickstart.yaml")
    times = fastest({"baseline": [sys.executable, str(HERE / "baseline_app.py")],
                     "help": [*FLEETSPEC, "--help"], "version": [*FLEETSPEC, "version"],
                     "validate": [*FLEETSPEC, "validate", quickstart]}, startup, warm=True)
    base = times["baseline"][0]
    for name, label in (("help", "fleetspec --help"), ("version", "fleetspec version"),
                        ("validate", "fleetspec validate quickstart.yaml")):
        verdicts.append(row(label, times[name][0], f"minimal Typer app ({base:.3f}s)", base, 1.25))
    if startup_only:
        return summary(verdicts)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        text = fleet_yaml(20000)
        (work / "f20k.yaml").write_text(text)
        (work / "f20k-bumped.yaml").write_text(text.replace(HOPPER, HOPPER_BUMPED))
        (work / "f100k.yaml").write_text(fleet_yaml(100000))
        render20 = [*FLEETSPEC, "render", str(work / "f20k.yaml"), "--out", str(work / "out20k")]
        run(render20)
        inventory = work / "out20k" / "ansible" / "inventory.yml"
        load = [sys.executable, "-c", "import sys, yaml; yaml.load(open(sys.argv[1]), Loader=yaml.CSafeLoader)",
                str(inventory)]
        times = fastest({"render": render20, "load": load}, large)
        r20 = times["render"][0]
        verdicts.append(row("render 20,000 nodes", r20, f"CSafeLoader reads inventory ({times['load'][0]:.2f}s)",
                            times["load"][0], 0.75, f"peak {times['render'][1]:.0f} MB"))

        render100 = [*FLEETSPEC, "render", str(work / "f100k.yaml"), "--out", str(work / "out100k")]
        times = fastest({"render100": render100, "render20": render20}, large)
        peak = times["render100"][1]
        ok = row("render 100,000 nodes", times["render100"][0], f"render 20,000 ({times['render20'][0]:.2f}s)",
                 times["render20"][0], 5.5, f"peak {peak:.0f} MB (target < 400 MB: {'ok' if peak < 400 else 'MISSED'})")
        verdicts.append(ok and peak < 400)
        shutil.rmtree(work / "out100k", ignore_errors=True)

        state_dir = work / "state"  # not `state`: that is the --state flag (it ran the state rows every time)
        setup = [sys.executable, str(HERE / "bench_plan.py"), "--record", str(work / "f20k.yaml"), str(state_dir)]
        run(setup)
        plan = [*FLEETSPEC, "plan", str(work / "f20k-bumped.yaml"), "--state", str(state_dir)]
        base_plan = [*FLEETSPEC, "plan", str(work / "f20k-bumped.yaml"), "--base", str(work / "f20k.yaml")]
        times = fastest({"plan": plan, "base": base_plan, "render": render20}, large)
        r = times["render"][0]
        verdicts.append(row("plan, driver bump, 20,000 nodes (state)", times["plan"][0],
                            f"render 20,000 ({r:.2f}s)", r, 1.5))
        # Issue 45 item 2: at most 1.5x (issue 14's target was 2x).
        verdicts.append(row("plan --base OLD, same bump", times["base"][0], f"render 20,000 ({r:.2f}s)", r, 1.5))
    verdicts.extend(import_rows(large))
    if rollout:
        verdicts.extend(rollout_rows(rollout))
    if state:
        verdicts.extend(state_rows())
    return summary(verdicts)


def summary(verdicts: list[bool]) -> int:
    print(f"{sum(verdicts)} of {len(verdicts)} targets met")
    return 0 if all(verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
