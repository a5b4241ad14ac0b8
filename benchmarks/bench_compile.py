"""validate + compile + render on generated fleets; prints one table row per size.

Each size runs in its own process so peak memory (max RSS) is that size's alone.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGETS = {2048: 0.5, 20000: 3.0}  # seconds, DESIGN.md
MEMORY_TARGET_MB = 300


def measure(nodes: int) -> dict[str, float]:
    sys.path.insert(0, str(HERE))
    from fleetgen import fleet_yaml

    from fleetspec.compile import compile_file
    from fleetspec.render import render_all

    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "fleet.yaml"
        spec.write_text(fleet_yaml(nodes))
        base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        t0 = time.perf_counter()
        result = compile_file(spec)
        t1 = time.perf_counter()
        assert result.valid, [(f.rule, f.message) for f in result.located()][:3]
        files = render_all(result.fleet)
        t2 = time.perf_counter()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"nodes": nodes, "gpus": nodes * 8, "validate_compile_s": t1 - t0, "render_s": t2 - t1,
            "total_s": t2 - t0, "files": len(files), "peak_rss_mb": peak, "baseline_rss_mb": base_rss}


def main() -> list[dict[str, float]]:
    rows = []
    for nodes in TARGETS:
        out = subprocess.run([sys.executable, __file__, "--one", str(nodes)], capture_output=True, text=True,
                             check=True)
        rows.append(json.loads(out.stdout))
    return rows


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(measure(int(sys.argv[2]))))
    else:
        for row in main():
            print(row)
