"""Benchmark input: a large Slurm cluster's files and its nodes' facts, for `fleetspec import
slurm` at scale (issue #45 item 3; benchmarks/run.py times it).

    python3 benchmarks/bench_import.py NODES DIR   # writes DIR/slurm.conf, DIR/gres.conf, DIR/facts/

The files are modelled on a real cluster's: the real cluster llm-jp/nii-sakura-cluster-configs (shared brownfield case llmjp-sakura-2024)
(LLM-jp's H100 cluster, 8 GPUs and 2x56 cores a node): its slurm.conf settings, its node
lines (``NodeName=<hostlist> CPUs=112 Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 Gres=gpu:8
RealMemory=2000000 State=UNKNOWN``), its partition lines and its gres.conf lines
(``NodeName=<hostlist> Name=gpu File=/dev/nvidia[0-7]``), scaled to racks of 16 nodes written
as hostlists and named as sakura names its nodes (a series letter, then the node's number:
``a0[01-70]``), the H100 series ``a`` and the H200 series ``b``, half the nodes each, racks
alternating. Each node's facts are the real H200 node's collector
output (tests/data/fixtures/h200-node/collector.json) with its hostname and eight GPUs named
for its rack, as tests/importer/facts.py builds them.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COLLECTOR = ROOT / "tests" / "data" / "fixtures" / "h200-node" / "collector.json"
PER_RACK = 16
GPUS = (("a", "NVIDIA H100 80GB HBM3", 81559), ("b", "NVIDIA H200", 143771))
# Slurm's release the import is told (the fixture's node has no slurmd: `slurmd_version: absent`).
SLURM_VERSION = "24.05.4"

# llmjp-sakura-2024's slurm.conf settings, byte for byte, before its node lines.
HEADER = """\
ClusterName=sakura
SlurmctldHost=login001
ProctrackType=proctrack/cgroup
ReturnToService=1
SlurmctldPidFile=/var/run/slurmctld.pid
SlurmctldPort=6817
SlurmdPidFile=/var/run/slurmd.pid
SlurmdPort=6818
SlurmdSpoolDir=/var/spool/slurmd
SlurmUser=slurm
StateSaveLocation=/var/spool/slurmctld
TaskPlugin=task/affinity,task/cgroup
InactiveLimit=0
KillWait=30
MinJobAge=300
SlurmctldTimeout=120
SlurmdTimeout=300
Waittime=0
SchedulerType=sched/backfill
SelectType=select/cons_tres
JobCompType=jobcomp/none
JobAcctGatherFrequency=30
SlurmctldDebug=info
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdDebug=info
SlurmdLogFile=/var/log/slurm/slurmd.log
GresTypes=gpu
"""


def racks(nodes: int) -> list[tuple[str, str, str, int]]:
    """(hostlist, series letter, board name, memory MiB) per rack of 16."""
    out = []
    for r in range(nodes // PER_RACK):
        key, name, memory = GPUS[r % len(GPUS)]
        first = (r // len(GPUS)) * PER_RACK + 1
        out.append((f"{key}[{first:05d}-{first + PER_RACK - 1:05d}]", key, name, memory))
    return out


def write_cluster(nodes: int, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    rows = racks(nodes)
    lines = [HEADER]
    lines += [f"NodeName={hosts} CPUs=112 Sockets=2 CoresPerSocket=56 ThreadsPerCore=2 Gres=gpu:8 "
              f"RealMemory=2000000 State=UNKNOWN\n" for hosts, _, _, _ in rows]
    for key, _, _ in GPUS:
        members = f"{key}[00001-{sum(k == key for _, k, _, _ in rows) * PER_RACK:05d}]"
        lines.append(f"PartitionName=gpu-{key} Nodes={members} Default={'YES' if key == 'a' else 'NO'} "
                     f"MaxTime=INFINITE State=UP OverSubscribe=Yes\n")
    lines.append("SelectTypeParameters=CR_Core_Memory\n")
    (directory / "slurm.conf").write_text("".join(lines))
    (directory / "gres.conf").write_text("".join(f"NodeName={hosts} Name=gpu File=/dev/nvidia[0-7]\n"
                                                  for hosts, _, _, _ in rows))
    facts = directory / "facts"
    facts.mkdir(exist_ok=True)
    template = json.loads(COLLECTOR.read_text())
    for hosts, key, name, memory in rows:
        document = copy.deepcopy(template)
        gpu = document["nvidia"]["gpus"][0]
        document["nvidia"]["gpus"] = [{**gpu, "name": name, "memory_mib": memory, "index": i} for i in range(8)]
        first = int(hosts[2:7])
        for n in range(first, first + PER_RACK):
            host = f"{key}{n:05d}"
            document["hostname"] = host
            (facts / f"{host}.json").write_text(json.dumps(document))


if __name__ == "__main__":
    write_cluster(int(sys.argv[1]), Path(sys.argv[2]))
