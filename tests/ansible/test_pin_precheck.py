"""Item 6 of #24: the role's pinned-version pre-check (stack_packages/tasks/precheck.yml) run by
ansible-playbook on this machine against the evidence repositories (real apt in a private
root through APT_CONFIG): a pin the sources do not carry stops the host before anything is
installed, naming the missing name=version and the repository that should carry it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fleetspec.lab.repo import build_repo, evidence_standins
from tests.ansible.aptsim import AptRoot
from tests.conftest import ROOT, unavailable

CUDA_REPO = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
UBUNTU = "http://archive.ubuntu.com/ubuntu/"


@pytest.fixture(autouse=True)
def _tools() -> None:
    for tool in ("apt-get", "apt-ftparchive", "ansible-playbook"):
        if shutil.which(tool) is None:
            unavailable(f"needs {tool}")


def node(tmp: Path) -> AptRoot:
    standins = evidence_standins()
    repos = [build_repo(standins[u], tmp / f"repo{i}") for i, u in enumerate((CUDA_REPO, UBUNTU))]
    return AptRoot(tmp / "root", repos)


def precheck(apt: AptRoot, tmp: Path, pins: list[dict]) -> subprocess.CompletedProcess[str]:
    opts = apt.options()
    conf = "".join(f'{opts[i + 1].split("=", 1)[0]} "{opts[i + 1].split("=", 1)[1]}";\n'
                   for i in range(0, len(opts), 2))
    (tmp / "apt.conf").write_text(conf)
    specs = [f"{p['name']}={p['version']}" for p in pins]
    role_vars = yaml.safe_load((ROOT / "playbooks/roles/stack_packages/vars/main.yml").read_text())
    variables = {"_fleetspec_specs": specs, "_fleetspec_exact_specs": specs, "fleetspec_install_pins": pins,
                 "fleetspec_package_mirror": None, "_fleetspec_pin_source": role_vars["_fleetspec_pin_source"],
                 "fleetspec_sources": [{"name": "cuda", "uri": CUDA_REPO}]}
    (tmp / "vars.json").write_text(json.dumps(variables))
    (tmp / "play.yml").write_text(yaml.safe_dump([{
        "hosts": "localhost", "connection": "local", "gather_facts": False,
        "environment": {"APT_CONFIG": str(tmp / "apt.conf")},
        "tasks": [{"ansible.builtin.include_tasks": str(ROOT / "playbooks/roles/stack_packages/tasks/precheck.yml")}],
    }]))
    env = {"ANSIBLE_HOME": str(tmp / ".ansible"), "ANSIBLE_LOCALHOST_WARNING": "false", "LC_ALL": "C.UTF-8",
           "PATH": f"{Path(shutil.which('ansible-playbook') or '').parent}:/usr/bin:/bin"}
    return subprocess.run(["ansible-playbook", "-i", "localhost,", "-e", f"@{tmp / 'vars.json'}", str(tmp / "play.yml")],
                          capture_output=True, text=True, env=env, timeout=180)


def pin(name: str, version: str, role: str = "nvidia_driver") -> dict:
    return {"name": name, "version": version, "role": role, "condition": None}


def test_a_pin_at_a_version_the_repository_lacks_stops_the_host_naming_it_and_its_repository(tmp_path):
    apt = node(tmp_path)
    # Canonical's 580.126.09 build is there, NVIDIA's is not: apt-cache show still exits 0.
    shown = apt.apt("-q", "check")  # the root is sane
    assert shown.returncode == 0, shown.stderr
    cache = subprocess.run(["apt-cache", *apt.options(), "show", "--no-all-versions",
                            "libnvidia-compute-580=580.126.09-1ubuntu1"], capture_output=True, text=True)
    assert cache.returncode == 0  # why the old check (apt-cache show) could not fail
    done = precheck(apt, tmp_path, [pin("libnvidia-compute-580", "580.126.09-1ubuntu1"),
                                    pin("nvidia-fabricmanager-580", "580.95.05-1")])
    assert done.returncode != 0, done.stdout
    assert (f"libnvidia-compute-580=580.126.09-1ubuntu1 is not in the configured package sources: {CUDA_REPO} (cuda)"
            " should carry it") in done.stdout
    assert "nvidia-fabricmanager-580=580.95.05-1 is not in the configured package sources" in done.stdout


def test_pins_that_resolve_pass(tmp_path):
    apt = node(tmp_path)
    done = precheck(apt, tmp_path, [pin("nvidia-fabricmanager", "580.95.05-1"),
                                    pin("libnvidia-compute-580", "580.126.20-1ubuntu1")])
    assert done.returncode == 0, done.stdout + done.stderr
