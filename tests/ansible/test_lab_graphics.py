"""#24 item 4 rehearsed on a real lab host: ROCm 7.0.2 installs only through AMD's graphics
repository.

AMD publishes ROCm 7.x in two apt repositories: ``rocm/apt/<release>`` and
``graphics/<release>/ubuntu``; ``rocdecode`` (pulled by the ``rocm`` meta package) depends on
``mesa-amdgpu-va-drivers``, which only the graphics repository carries (the evidence rows of
fleetspec/lab/vendor_packages.yaml: rocDecode#656, AMD's 7.0.2 install steps). The lab serves
each evidence repository as its own apt repository (``dists/noble/Release``, ``Packages``,
``pool/``: the vendors' layout), and a lab host gets the stack's rendered sources as
rendered, only each URI pointed at the lab's copy of that repository (the lab's flat mirror is
taken off the host). The real gpu_facts and stack_packages roles then run the pre-check,
install and hold the tuple. First without the graphics line: apt must refuse, naming
mesa-amdgpu-va-drivers (so the test can fail), and nothing is installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from fleetspec.apply.ansible import PLAYBOOKS, PlaybookResult, run_playbook
from fleetspec.lab import Lab
from fleetspec.lab.base import REPO_MOUNT
from fleetspec.lab.hosts import APT_SOURCE
from fleetspec.lab.repo import evidence_repositories
from fleetspec.render.ansible import render_ansible
from tests.ansible.fleets import lab as lab_fleet
from tests.ansible.test_lab_site import AMD, NVIDIA, ROCM
from tests.lab.conftest import lab_base, lab_mode  # noqa: F401 - fixture

pytestmark = pytest.mark.lab

GRAPHICS = "https://repo.radeon.com/graphics/7.0.2/ubuntu"
STACK_VARS = Path("ansible/group_vars/stack_cdna3_rocm7.yml")
PLAY = "- hosts: all\n  gather_facts: true\n  gather_subset: [min, virtual]\n  roles: [gpu_facts, stack_packages]\n"


@dataclass
class Rehearsal:
    lab: Lab
    out: Path
    sources: list[dict]  # the rendered fleetspec_apt_sources, pointed at the lab's repositories

    def run(self, sources: list[dict]) -> PlaybookResult:
        """gpu_facts + stack_packages on the AMD host with ``sources`` as its stack's apt sources."""
        stack_vars = yaml.safe_load((self.out / STACK_VARS).read_text())
        (self.out / STACK_VARS).write_text(yaml.safe_dump({**stack_vars, "fleetspec_apt_sources": sources}))
        # The distribution's archive (rdma-core for the InfiniBand fabric) is not in this rehearsal.
        hosts = {AMD: {**self.lab.ansible_vars()[AMD], "fleetspec_rdma_userspace": []}}
        conn = self.out / "ansible" / "lab-hosts.yml"
        conn.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
        return run_playbook([self.out / "ansible" / "inventory.yml", conn], playbook="stack.yml",
                            project_dir=self.out / "play", limit=[AMD], work_dir=self.out / "runs",
                            envvars={"ANSIBLE_ROLES_PATH": str(PLAYBOOKS / "roles")})

    def ssh(self, *command: str) -> str:
        import subprocess

        proc = subprocess.run(self.lab.ssh.argv(AMD, *command), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout


@pytest.fixture(scope="module")
def rehearsal(lab_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rehearsal]:
    fleet = lab_fleet(NVIDIA, ROCM)
    out = tmp_path_factory.mktemp("graphics-render")
    for rel, text in render_ansible(fleet).items():  # no mirror: the vendors' sources, as a site gets them
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_text(text)
    (out / "play").mkdir()
    (out / "play" / "stack.yml").write_text(PLAY)
    rendered = yaml.safe_load((out / STACK_VARS).read_text())["fleetspec_apt_sources"]
    assert GRAPHICS in [s["uri"] for s in rendered]
    served = tmp_path_factory.mktemp("vendor-repos")
    repos = evidence_repositories([s["uri"] for s in rendered], served, suite="noble")
    sources = [{**s, "uri": f"file:{REPO_MOUNT}/{repos[s['uri']].name}", "key_url": None, "trusted": True}
               for s in rendered]
    lab = Lab(tmp_path_factory.mktemp("graphics-lab"), lab_base, repo_dir=served, mode=lab_mode())
    lab.up([AMD])
    try:
        r = Rehearsal(lab, out, sources)
        r.ssh("rm", "-f", APT_SOURCE)  # only the rendered sources: the lab's flat mirror is off
        yield r
    finally:
        lab.down()


def test_without_the_graphics_repository_rocm_is_not_installable(rehearsal: Rehearsal) -> None:
    result = rehearsal.run([s for s in rehearsal.sources if s["name"] != "amdgpu-graphics"])
    assert result.failed_hosts == [AMD]
    message = " ".join(result.hosts[AMD].failures)
    assert "rocdecode : Depends: mesa-amdgpu-va-drivers but it is not installable" in message, message
    state = rehearsal.ssh("sh", "-c", "dpkg-query -W -f='${Package} ${Status}\\n' rocm rocm-core rocdecode 2>&1; true")
    assert " installed" not in state, state  # the pre-check stopped it before anything was installed


def test_with_the_rendered_sources_the_tuple_installs_and_is_held(rehearsal: Rehearsal) -> None:
    result = rehearsal.run(rehearsal.sources)
    assert result.ok, result.hosts
    lists = rehearsal.ssh("sh", "-c", "cat /etc/apt/sources.list.d/*.list")
    assert f"file:{REPO_MOUNT}/repo.radeon.com-graphics-7.0.2-ubuntu noble main" in lists
    held = rehearsal.ssh("dpkg-query", "-W", "-f=${Package} ${Version} ${Status}\\n", "rocm", "rocm-core", "rccl")
    assert sorted(held.splitlines()) == ["rccl 2.26.6.70002-56~24.04 hold ok installed",
                                 "rocm 7.0.2.70002-56~24.04 hold ok installed",
                                 "rocm-core 7.0.2.70002-56~24.04 hold ok installed"]
    apt_sources = rehearsal.ssh("apt-cache", "policy", "mesa-amdgpu-va-drivers")
    assert "*** 1:25.0.0.70002-2226275.24.04" in apt_sources
    assert "repo.radeon.com-graphics-7.0.2-ubuntu noble/main" in apt_sources
