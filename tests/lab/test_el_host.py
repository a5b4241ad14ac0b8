"""The lab on an EL fleet (#42 item 5): `lab up` of examples/rocky9.yaml starts EL-shaped hosts
(fleetspec.lab.el: dnf 4.14/libdnf 0.69 and rpm from Debian, Rocky Linux 9.7's release files
from a stand-in rocky-release RPM) and serves the stand-in EL repositories generated from the
catalog (fleetspec.lab.rpmrepo). One lab for the module (one host per partition, the Slurm
controller and its slurmd's): Ansible's own fact gathering sees Rocky 9 with dnf, and the real
gpu_facts + stack_packages roles install and hold each stack's rendered pins with dnf there,
through the rendered .repo files (vendor URLs) that the lab's overlay points at its copies.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest
import yaml
from typer.testing import CliRunner

from fleetspec.apply.ansible import PLAYBOOKS, run_playbook
from fleetspec.catalog.el import parse_nevra
from fleetspec.cli import app
from fleetspec.lab.fleet import LabHandle, LabSetupError, lab_down, lab_up
from fleetspec.pipeline import compile_file
from fleetspec.render.ansible import render_ansible
from tests.conftest import EXAMPLES
from tests.lab.conftest import lab_base  # noqa: F401 - fixture

pytestmark = [pytest.mark.lab, pytest.mark.slurm]

NVIDIA, AMD = "h100-001", "mi300x-001"
PLAY = "- hosts: all\n  gather_facts: true\n  gather_subset: [min, virtual]\n  roles: [gpu_facts, stack_packages]\n"


@pytest.fixture(scope="module")
def el_lab(lab_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    work = tmp_path_factory.mktemp("el-lab")
    spec = work / "fleet.yaml"
    spec.write_text((EXAMPLES / "rocky9.yaml").read_text())
    handle, started = lab_up(spec, per_partition=1, lab_dir=work / "lab")
    try:
        assert started
        yield handle
    finally:
        lab_down(work / "lab")


def ssh(handle: LabHandle, host: str, *command: str) -> str:
    done = subprocess.run(handle.ssh_argv(host, *command), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_ansible_sees_rocky_9_with_dnf_on_an_el_lab_host(el_lab: LabHandle) -> None:
    exe = shutil.which("ansible")
    assert exe, "ansible is required (ansible-core)"
    done = subprocess.run([exe, "-i", str(el_lab.inventory_overlay), NVIDIA, "-m", "ansible.builtin.setup", "-a",
                           "gather_subset=min,pkg_mgr"], capture_output=True, text=True, timeout=180,
                          env={"PATH": "/usr/bin:/bin:" + str(Path(exe).parent), "ANSIBLE_HOST_KEY_CHECKING": "False",
                               "ANSIBLE_HOME": str(el_lab.dir / ".ansible")})
    assert done.returncode == 0, done.stdout + done.stderr
    facts = json.loads(done.stdout.split(" => ", 1)[1])["ansible_facts"]
    assert {k: facts[f"ansible_{k}"] for k in ("os_family", "pkg_mgr", "distribution",
                                                 "distribution_major_version", "distribution_version")} == {
        "os_family": "RedHat", "pkg_mgr": "dnf", "distribution": "Rocky", "distribution_major_version": "9",
        "distribution_version": "9.7"}
    # dnf finds $releasever and the modular platform from the rpmdb, as on a Rocky node.
    assert ssh(el_lab, NVIDIA, "rpm", "-q", "--whatprovides", "system-release(releasever)") == \
        "rocky-release-9.7-1.3.el9.noarch\n"
    # The distribution's and the site's repositories as the node has them in yum.repos.d: the
    # RDMA user space in BaseOS, SchedMD's Slurm RPMs (the site builds them) at the spec's version.
    listed = ssh(el_lab, NVIDIA, "dnf", "-q", "repoquery", "--qf", "%{name}-%{version}-%{release} %{repoid}",
                 "slurm-slurmd", "rdma-core")
    assert sorted(listed.split("\n")[:-1]) == ["rdma-core-48.0-1.el9 baseos",
                                               "slurm-slurmd-25.11.8-1.el9 fleetspec-lab-site"], listed


@pytest.fixture(scope="module")
def installed(el_lab: LabHandle, tmp_path_factory: pytest.TempPathFactory) -> dict[PurePosixPath, str]:
    """The real gpu_facts + stack_packages roles on both hosts, from the rendered tree (the
    lab's mirror given to render as apply --lab does); returns that tree."""
    out = tmp_path_factory.mktemp("el-render")
    tree = render_ansible(compile_file(el_lab.spec).fleet, el_lab.package_mirror)
    for rel, text in tree.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    (out / "play").mkdir()
    (out / "play" / "stack.yml").write_text(PLAY)
    result = run_playbook([out / "ansible" / "inventory.yml", el_lab.inventory_overlay], playbook="stack.yml",
                          project_dir=out / "play", limit=[NVIDIA, AMD], work_dir=out / "runs",
                          envvars={"ANSIBLE_ROLES_PATH": str(PLAYBOOKS / "roles")})
    assert result.ok, result.hosts
    return tree


def test_each_stack_installs_its_rendered_pins_with_dnf_and_holds_them(el_lab: LabHandle, installed) -> None:
    overlay = yaml.safe_load(el_lab.inventory_overlay.read_text())
    for host, stack in ((NVIDIA, "hopper-cu12"), (AMD, "cdna3-rocm71")):
        pins = [parse_nevra(line) for line in installed[PurePosixPath(f"ansible/pins/{stack}.dnf")].split()]
        have = dict(line.split(" ", 1) for line in ssh(el_lab, host, "rpm", "-qa", "--qf",
                                                       "%{NAME} %{EPOCHNUM}:%{VERSION}-%{RELEASE}\\n").splitlines())
        wanted = {n.name: f"{n.epoch}:{n.version}-{n.release}" for n in pins if n.name in have or not n.condition}
        assert {n: have.get(n) for n in wanted} == wanted
        # Newer builds sit in the stand-in trees; under the versionlock, `dnf upgrade` takes none.
        upgrade = ssh(el_lab, host, "dnf", "-y", *overlay["all"]["hosts"][host]["fleetspec_dnf_options"], "upgrade")
        assert "Nothing to do." in upgrade, upgrade
    assert "stream=580-open" in ssh(el_lab, NVIDIA, "cat", "/etc/dnf/modules.d/nvidia-driver.module")
    # The .repo as rendered (the vendor's URL, signed): only the lab's overlay redirects it.
    repo = ssh(el_lab, NVIDIA, "cat", "/etc/yum.repos.d/fleetspec-hopper-cu12.repo")
    assert "baseurl=https://developer.download.nvidia.com/compute/cuda/repos/rhel9/x86_64" in repo and "gpgcheck=1" in repo
    locks = ssh(el_lab, NVIDIA, "cat", "/etc/dnf/plugins/versionlock.list")
    assert "kmod-nvidia-open-dkms-3:580.82.07-1.el9.*" in locks, locks


def test_verify_reads_the_tuple_from_rpm_and_the_stand_ins_files(el_lab: LabHandle, installed) -> None:
    """`fleetspec verify --lab` (the collector over Ansible): rpm -q with epochs, the versionlock,
    the enabled stream, and what the stand-ins report (nvidia-smi, version.json, the libraries).
    Both hosts conform: a stand-in host's GPUs (none: no driver module, no amd-smi or nvidia-smi
    GPU list) are not-applicable for either vendor."""
    done = CliRunner().invoke(app, ["verify", str(el_lab.spec), "--lab", str(el_lab.dir), "--format", "json"])
    report = json.loads(done.stdout)
    checks = {n["hostname"]: {c["component"]: (c["status"], c["found"]) for c in n["checks"]} for n in report["nodes"]}
    assert {k: checks[NVIDIA][k] for k in ("driver", "cuda", "cudnn", "nccl", "el-packages", "package-holds",
                                           "driver-stream")} == {
        "driver": ("ok", "580.82.07"), "cuda": ("ok", "12.8.1"), "cudnn": ("ok", "9.10.2"), "nccl": ("ok", "2.26.2"),
        "el-packages": ("ok", "21 at their EVR"), "package-holds": ("ok", "21 locked"),
        "driver-stream": ("ok", "580-open")}
    assert {n["hostname"]: n["conforms"] for n in report["nodes"]}[NVIDIA] is True, checks[NVIDIA]
    assert {k: checks[AMD][k] for k in ("rocm", "rccl", "el-packages", "package-holds", "gpus")} == {
        "rocm": ("ok", "7.1.0"), "rccl": ("ok", "2.27.7"), "el-packages": ("ok", "3 at their EVR"),
        "package-holds": ("ok", "3 locked"), "gpus": ("not-applicable", "stand-in host")}
    assert {n["hostname"]: n["conforms"] for n in report["nodes"]}[AMD] is True, checks[AMD]


def test_lab_up_of_an_apt_spec_on_the_el_lab_is_refused(el_lab: LabHandle) -> None:
    """Same hosts, another OS family: the hosts cannot change their base, so lab up stops."""
    ubuntu = el_lab.spec.with_name("ubuntu.yaml")
    ubuntu.write_text(el_lab.spec.read_text().replace("os: rocky-9", "os: ubuntu-24.04"))
    with pytest.raises(LabSetupError, match=r"runs EL-shaped hosts and .*ubuntu.yaml has spec.os ubuntu-24.04: "
                                            "run `fleetspec lab down` first"):
        lab_up(ubuntu, per_partition=1, lab_dir=el_lab.dir)
    assert LabHandle.load(el_lab.dir).spec == el_lab.spec  # nothing recorded


def fleetspec(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user types it (this environment's console script, this checkout's code)."""
    exe = Path(sys.executable).parent / "fleetspec"
    return subprocess.run([str(exe), *args], cwd=cwd, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "COLUMNS": "200"})


def test_the_readme_loop_on_rocky_9(el_lab: LabHandle, installed) -> None:
    """The README's loop on the module's lab, last (it changes the spec): plan, apply --lab,
    verify; a driver build change published by lab up, planned as drain-reboot, applied
    (drain, one dnf transaction, the versionlock replaced, verify, resume) and verified, over
    both hosts: the AMD wave passes verify too, and the driver change touches the NVIDIA host only."""
    cwd, lab = el_lab.spec.parent, str(el_lab.dir)
    state = str(el_lab.dir / "state")
    assert fleetspec(cwd, "secrets", "init", el_lab.spec.name).returncode == 0
    plan = fleetspec(cwd, "plan", el_lab.spec.name, "--state", state, "--format", "json", "--detailed-exitcode")
    assert plan.returncode == 2, plan.stderr
    first = fleetspec(cwd, "apply", el_lab.spec.name, "--lab", lab, "--yes")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr
    for host in (NVIDIA, AMD):
        assert re.search(rf"^\S.*: {host}: done \(ok \d+, changed [1-9]\d*", first.stdout, re.M), first.stdout[-3000:]

    el_lab.spec.write_text(el_lab.spec.read_text().replace('driver: "580.82.07"', 'driver: "580.95.05"'))
    assert fleetspec(cwd, "lab", "up", el_lab.spec.name, "--nodes", "1", "--dir", lab).returncode == 0
    planned = json.loads(fleetspec(cwd, "plan", el_lab.spec.name, "--state", state, "--format", "json").stdout)
    assert [c["target"] for c in planned["changes"] if c["disruption"] == "drain-reboot"] == [f"node:{NVIDIA}"]
    second = fleetspec(cwd, "apply", el_lab.spec.name, "--lab", lab, "--yes", "--format", "json")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr
    events = [json.loads(line) for line in second.stdout.splitlines() if line.startswith("{")]
    assert any(e["event"] == "drain" and "driver 580.82.07 -> 580.95.05" in e["message"] for e in events), events
    verify = fleetspec(cwd, "verify", el_lab.spec.name, "--lab", lab, "--format", "json")
    nodes = {n["hostname"]: n for n in json.loads(verify.stdout)["nodes"]}
    assert verify.returncode == 0 and all(n["conforms"] for n in nodes.values()), verify.stdout[-3000:]
    node = nodes[NVIDIA]
    checks = {c["component"]: (c["status"], c["found"]) for c in node["checks"]}
    assert checks["driver"] == ("ok", "580.95.05") and checks["el-packages"][0] == "ok", checks
    locks = ssh(el_lab, NVIDIA, "cat", "/etc/dnf/plugins/versionlock.list")
    assert "kmod-nvidia-open-dkms-3:580.95.05-1.el9.*" in locks and "580.82.07" not in locks, locks

