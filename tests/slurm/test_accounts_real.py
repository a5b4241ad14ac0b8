"""slurm.tenants become Slurm accounts, on a real slurmdbd (MariaDB) and slurmctld (#25 item 7).

Before: with AccountingStorageEnforce=associations and nothing making associations, no
user could submit, and the spec's tenants had no Slurm counterpart. Now the rendered
``accounts.json`` is applied by the controller's reconciler (node_side/slurm_accounts.py):
an account per tenant with GrpTRES on every GPU type, its users, idempotent (a second run
runs no command), changes in the spec become ``modify``/``remove`` and nothing else. The
quota holds on the real slurmctld: a tenant's job beyond its GPUs pends with
AssocGrpGRES, a GPU type it has no quota on never starts, and it cannot borrow.

The reconciler and the quota run on 22.05 (the host's Slurm) and on 26.05 (Debian sid's
slurmdbd, slurmctld and sacctmgr in their root, over the host's MariaDB; the reconciler
runs there with the root's own python3, as on a controller): one slurmdbd and cluster per
release, shared by the module's tests (#47).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetspec.lab.slurm_releases import release_prefix, slurm_cluster
from fleetspec.render.slurm import render_slurm

from . import fleets
from .cluster import Cluster
from .slurmdbd import slurmdbd

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_installed")]

# The releases whose slurmdbd, sacctmgr and slurmctld the reconciler and the quota meet.
RELEASES = ["22.05", "26.05"]

RECONCILER = Path(__file__).resolve().parents[2] / "fleetspec" / "node_side" / "slurm_accounts.py"

TENANTS = """\
    tenants:
      - name: research
        users: [root, alice]
        quota: {debug: 8}
      - name: inference
        users: [bob]
        groups: [fleetspec-test-nogroup]
        quota: {h200: 16}
"""


def _files(tenants: str):
    files = render_slurm(fleets.lab_with_tenants(tenants))
    return {p: t for p, t in files.items()}


def _reconcile(c: Cluster, accounts: str, tmp: Path, *extra: str) -> dict:
    """The reconciler run as the slurm role runs it on the controller: the host's Python for
    22.05; in a newer release's root, a copy of the file (under /tmp, which the root sees)
    run by the root's python3, calling that release's sacctmgr."""
    path = tmp / "accounts.json"
    path.write_text(accounts)
    if c.prefix:
        script = Path(shutil.copy(RECONCILER, tmp / RECONCILER.name))
        done = c.run("python3", str(script), str(path), *extra, check=False, timeout=120)
    else:
        done = subprocess.run([sys.executable, str(RECONCILER), str(path), *extra], env=c.env,
                              capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _assocs(c: Cluster) -> dict[tuple[str, str], str]:
    out = c.run("sacctmgr", "-nP", "show", "assoc", "cluster=lab", "format=account,user,grptres").stdout
    return {(a, u): t for a, u, t in (line.split("|") for line in out.splitlines())}


@pytest.fixture(scope="module", params=RELEASES)
def cluster(request: pytest.FixtureRequest, tmp_path_factory, slurm_release):
    """A slurmdbd and a slurmctld of the release, sharing MariaDB on 127.0.0.1."""
    release = request.param
    slurm_release(release)
    root = tmp_path_factory.mktemp(f"slurm-accounts-{release}")
    prefix = release_prefix(release, root)
    files = _files(TENANTS.replace("groups: [fleetspec-test-nogroup]", "groups: []"))
    with slurmdbd(root / "dbd", "lab", prefix) as (port, _), \
            slurm_cluster(root / "cluster", files, release=release, accounting_port=port) as c:
        yield c


def test_the_accounting_daemons_are_the_release(cluster, request):
    release = request.node.callspec.params["cluster"]
    assert cluster.run("sacctmgr", "--version").stdout.split()[-1].startswith(release + ".")
    assert cluster.run("scontrol", "--version").stdout.split()[-1].startswith(release + ".")


def test_rendered_accounts_cap_every_gpu_type():
    accounts = json.loads(_files(TENANTS)[next(p for p in _files(TENANTS) if p.name == "accounts.json")])
    research = next(a for a in accounts["accounts"] if a["name"] == "research")
    assert research["grp_tres"] == "gres/gpu:h100=8,gres/gpu:h200=0,gres/gpu:mi300x=0"
    conf = _files(TENANTS)[next(p for p in _files(TENANTS) if p.name == "slurm.conf")]
    assert "AccountingStorageTRES=gres/gpu,gres/gpu:h100,gres/gpu:h200,gres/gpu:mi300x" in conf


def test_accounts_applied_once_then_nothing(cluster, tmp_path):
    accounts = _files(TENANTS.replace("groups: [fleetspec-test-nogroup]", "groups: []"))
    text = next(t for p, t in accounts.items() if p.name == "accounts.json")
    first = _reconcile(cluster, text, tmp_path)
    assert first["changed"], first
    assocs = _assocs(cluster)
    assert assocs[("research", "")] == "gres/gpu:h100=8,gres/gpu:h200=0,gres/gpu:mi300x=0"
    assert assocs[("inference", "")] == "gres/gpu:h100=0,gres/gpu:h200=16,gres/gpu:mi300x=0"
    assert {("research", "root"), ("research", "alice"), ("inference", "bob")} <= set(assocs)
    again = _reconcile(cluster, text, tmp_path)
    assert again == {"changed": False, "commands": [], "stale": []}

    # The spec changes: research gets H200s, alice leaves, inference is dropped.
    changed = TENANTS.replace("users: [root, alice]", "users: [root]").replace("{debug: 8}", "{debug: 8, h200: 4}")
    changed = changed[:changed.index("      - name: inference")]
    text = next(t for p, t in _files(changed).items() if p.name == "accounts.json")
    planned = _reconcile(cluster, text, tmp_path, "--check")
    assert planned["commands"] == [
        "modify account where name=research cluster=lab set "
        "grptres=gres/gpu:h100=8,gres/gpu:h200=4,gres/gpu:mi300x=0",
        "remove user where name=alice account=research cluster=lab",
    ], planned
    assert planned["stale"] == ["inference"]  # reported, never removed
    assert _reconcile(cluster, text, tmp_path)["changed"]
    assocs = _assocs(cluster)
    assert assocs[("research", "")] == "gres/gpu:h100=8,gres/gpu:h200=4,gres/gpu:mi300x=0"
    assert ("research", "alice") not in assocs and ("inference", "") in assocs
    assert _reconcile(cluster, text, tmp_path)["commands"] == []


def _pending_reason(cluster, job: str, timeout: float = 30) -> dict[str, str]:
    """The job once it pends with a reason: a job is PENDING with Reason=None until the
    scheduler has looked at it (a second or two; longer on a busy machine)."""
    end = time.monotonic() + timeout
    info = cluster.wait_job(job, {"PENDING"})
    while info.get("JobState") == "PENDING" and info.get("Reason") in (None, "None") and time.monotonic() < end:
        time.sleep(0.2)
        info = cluster.job(job)
    return info


def test_quota_holds_on_the_real_slurmctld(cluster, tmp_path):
    """research may hold 8 H100s: one 8-GPU job runs, a second pends on the account's
    limit though an H100 node is idle, and an MI300X job (quota 0) never starts."""
    text = next(t for p, t in _files(TENANTS.replace("groups: [fleetspec-test-nogroup]", "groups: []")).items()
                if p.name == "accounts.json")
    _reconcile(cluster, text, tmp_path)
    jobs = []
    try:
        for partition, gres in (("nvidia-hopper", "gpu:h100:8"), ("nvidia-hopper", "gpu:h100:8"),
                                ("amd-cdna3", "gpu:mi300x:1")):
            done = cluster.sbatch("-A", "research", "-p", partition, "-N", "1", f"--gres={gres}",
                                  script="sleep 60\n")
            assert done.returncode == 0, done.stderr
            jobs.append(done.stdout.strip().split(";")[0])
        assert cluster.wait_job(jobs[0], {"RUNNING"}).get("JobState") == "RUNNING"
        for job in jobs[1:]:
            info = _pending_reason(cluster, job)
            assert info.get("JobState") == "PENDING" and info.get("Reason") == "AssocGrpGRES", info
        assert cluster.node_states()["h100-02"] == "idle"  # a node was free: the quota held the job back
    finally:
        for job in jobs:
            cluster.run("scancel", job, check=False)


@pytest.mark.parametrize("cluster", ["22.05"], indirect=True)  # the reconciler's own check: release-free
def test_a_missing_group_is_one_clear_error(cluster, tmp_path):
    text = next(t for p, t in _files(TENANTS).items() if p.name == "accounts.json")
    path = tmp_path / "accounts.json"
    path.write_text(text)
    done = subprocess.run([sys.executable, str(RECONCILER), str(path)], env={**os.environ, **cluster.env},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "names group 'fleetspec-test-nogroup', which this host does not know" in done.stderr
    assert "Traceback" not in done.stderr
