"""Run every benchmark and print one table: `python3 benchmarks/run.py`."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_compile


def main() -> None:
    print(f"{'benchmark':<34} {'nodes':>7} {'GPUs':>7} {'seconds':>9} {'target':>8} {'peak MB':>8}  verdict")
    for row in bench_compile.main():
        target = bench_compile.TARGETS[int(row["nodes"])]
        ok = row["total_s"] < target and row["peak_rss_mb"] < bench_compile.MEMORY_TARGET_MB
        print(f"{'validate+compile+render':<34} {row['nodes']:>7} {row['gpus']:>7} {row['total_s']:>9.3f} "
              f"{target:>7.1f}s {row['peak_rss_mb']:>8.0f}  {'ok' if ok else 'MISSED'}")
        print(f"{'  of which validate+compile':<34} {'':>7} {'':>7} {row['validate_compile_s']:>9.3f}")
        print(f"{'  of which render (' + str(row['files']) + ' files)':<34} {'':>7} {'':>7} {row['render_s']:>9.3f}")
    plan = Path(__file__).resolve().parent / "bench_plan.py"
    if plan.exists():
        import bench_plan

        for row in bench_plan.main():
            ok = row["seconds"] < row["target_s"]
            print(f"{row['name']:<34} {row['nodes']:>7} {row['nodes'] * 8:>7} {row['seconds']:>9.3f} "
                  f"{row['target_s']:>7.1f}s {'':>8}  {'ok' if ok else 'MISSED'}")


if __name__ == "__main__":
    main()
