"""MpiDefault=pmix, run for real: a slurmctld and slurmds started from the rendered
configuration (MpiDefault kept, not localized away) launch a job step whose tasks are real
PMIx clients. Each task initialises PMIx from the server the mpi/pmix plugin started in
slurmstepd, publishes a value, fences with data collection (the modex an MPI library does
at MPI_Init) and reads its neighbour's value: what Open MPI 5 or MPICH need from srun.

Debian's slurm-wlm-basic-plugins ships mpi_pmix_v4.so, which dlopens libpmix.so from
/usr/lib/x86_64-linux-gnu/pmix2/lib: libpmix-dev provides it (scripts/test installs it; the
slurm role installs it on slurm_node hosts). https://slurm.schedmd.com/mpi_guide.html#pmix
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from fleetspec.render.slurm import MPI_DEFAULT, render_slurm
from tests.conftest import unavailable

from . import fleets
from .cluster import running

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm_installed")]

PLUGIN_DIR = Path("/usr/lib/x86_64-linux-gnu/slurm-wlm")
PMIX = Path("/usr/lib/x86_64-linux-gnu/pmix2")

# A PMIx client as an MPI library's wire-up uses it (PMIx 4 client API, pmix.h).
CLIENT = r"""
#include <pmix.h>
#include <stdio.h>
#include <stdlib.h>
#define CHECK(what, rc) if ((rc) != PMIX_SUCCESS) { fprintf(stderr, "%s: %s\n", what, PMIx_Error_string(rc)); return 1; }
int main(void) {
    pmix_proc_t me, all, peer;
    pmix_value_t value, *got = NULL;
    pmix_info_t collect;
    bool yes = true;
    CHECK("PMIx_Init", PMIx_Init(&me, NULL, 0));
    PMIX_LOAD_PROCID(&all, me.nspace, PMIX_RANK_WILDCARD);
    CHECK("PMIx_Get job size", PMIx_Get(&all, PMIX_JOB_SIZE, NULL, 0, &got));
    uint32_t size = got->data.uint32;
    PMIX_VALUE_RELEASE(got);
    PMIX_VALUE_LOAD(&value, &me.rank, PMIX_UINT32);
    value.data.uint32 = 1000 + me.rank;
    CHECK("PMIx_Put", PMIx_Put(PMIX_GLOBAL, "fleetspec.card", &value));
    CHECK("PMIx_Commit", PMIx_Commit());
    PMIX_INFO_LOAD(&collect, PMIX_COLLECT_DATA, &yes, PMIX_BOOL);
    CHECK("PMIx_Fence", PMIx_Fence(&all, 1, &collect, 1));
    PMIX_LOAD_PROCID(&peer, me.nspace, (me.rank + 1) % size);
    CHECK("PMIx_Get peer", PMIx_Get(&peer, "fleetspec.card", NULL, 0, &got));
    printf("rank %u/%u peer %u card %u\n", me.rank, size, peer.rank, got->data.uint32);
    PMIX_VALUE_RELEASE(got);
    CHECK("PMIx_Finalize", PMIx_Finalize(NULL, 0));
    return 0;
}
"""


@pytest.fixture(scope="module")
def pmix_client(tmp_path_factory) -> Path:
    if not (PLUGIN_DIR / "mpi_pmix.so").exists():
        pytest.fail("Debian's slurm-wlm-basic-plugins has no mpi_pmix.so here")
    if not (PMIX / "lib/libpmix.so").exists() or shutil.which("gcc") is None:
        unavailable("libpmix-dev and gcc are needed (scripts/test installs them)")
    out = tmp_path_factory.mktemp("pmix") / "pmix-client"
    src = out.with_suffix(".c")
    src.write_text(CLIENT)
    subprocess.run(["gcc", "-O1", "-o", str(out), str(src), f"-I{PMIX}/include", f"-L{PMIX}/lib",
                    f"-Wl,-rpath,{PMIX}/lib", "-lpmix"], check=True, capture_output=True, text=True)
    return out


def test_rendered_mpi_default_wires_up_pmix_clients_in_a_real_job_step(tmp_path, pmix_client) -> None:
    files = render_slurm(fleets.lab())
    conf = next(t for p, t in files.items() if p.name == "slurm.conf")
    assert f"MpiDefault={MPI_DEFAULT}" in conf.splitlines() and MPI_DEFAULT == "pmix"
    with running(tmp_path, files, keep=("MpiDefault",)) as cluster:
        assert "MpiDefault=pmix" in cluster.conf.read_text().splitlines()
        listed = cluster.run("srun", "--mpi=list")
        assert "pmix" in listed.stdout + listed.stderr
        # No --mpi: the step takes MpiDefault from the rendered slurm.conf.
        done = cluster.run("srun", "-N1", "-n4", "--time=1", str(pmix_client), check=False, timeout=60)
        assert done.returncode == 0, done.stderr + done.stdout + cluster.log(f"slurmd-{cluster.nodes[0]}.log")[-3000:]
        lines = sorted(done.stdout.splitlines())
        assert lines == [f"rank {r}/4 peer {(r + 1) % 4} card {1000 + (r + 1) % 4}" for r in range(4)]
        # The PMIx server comes from MpiDefault: a step that opts out (--mpi=none) has none.
        served = cluster.run("srun", "-N1", "-n1", "--time=1", "printenv", "PMIX_NAMESPACE", timeout=60)
        assert served.stdout.startswith("slurm.pmix."), served.stdout
        bare = cluster.run("srun", "-N1", "-n1", "--mpi=none", "--time=1", "printenv", "PMIX_NAMESPACE",
                           check=False, timeout=60)
        assert bare.returncode != 0 and not bare.stdout.strip()
