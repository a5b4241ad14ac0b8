"""The rendered EL pins, proven with dnf and rpm themselves (#42): ``dnf install $(cat S.dnf)``
under ``S.module`` and ``S.versionlock`` in an installroot, against the stand-in repositories
generated from the catalog's EL rows (fleetspec.lab.rpmrepo: each build beside a newer one,
the driver family in modulemd streams as NVIDIA's rhel9 tree carries it, a 590 build in
``590-open``; what they model and from where is in that module's docstring).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import NamedTuple

import pytest
import yaml

from fleetspec.catalog.el import Nevra, el_repo, parse_nevra
from fleetspec.findings import Severity
from fleetspec.lab.rpmrepo import R590, StandInRpm, build_rpms, el_trees, index, modulemd
from fleetspec.pipeline import compile_text
from fleetspec.render.ansible import render_ansible
from tests.ansible.dnfsim import DnfRoot
from tests.conftest import EXAMPLES, ROOT, unavailable

MISSING = "kmod-nvidia-open-dkms-3:580.95.05-1.el9"  # what the pruned repository lacks
# The distribution's packages the role installs unpinned: the kernel's development files
# (the release an EL9.4 kernel carries: 5.14.0-427.28.1.el9_4.x86_64, as the AMD GPU
# Operator's DeviceConfig CRD names it, tests/data/crds/amd-gpu-operator), kernel-devel-matched
# needing kernel-core and kernel-devel at its own EVR (its purpose: the devel files matching the
# kernel; the exact Requires are modelled), kernel-headers, and the RDMA user space (rdma-core,
# libibverbs: EL names). Their versions are modelled on that kernel's; none is pinned.
KERNEL = "5.14.0-427.28.1.el9_4.x86_64"
_K = "5.14.0-427.28.1.el9_4"


def _baseos(k: str, rdma: str) -> list[StandInRpm]:
    return [StandInRpm(parse_nevra(f"kernel-core-{k}")), StandInRpm(parse_nevra(f"kernel-devel-{k}")),
            StandInRpm(parse_nevra(f"kernel-devel-matched-{k}"), requires=(f"kernel-core = {k}", f"kernel-devel = {k}")),
            StandInRpm(parse_nevra(f"kernel-headers-{k}")), StandInRpm(parse_nevra(f"rdma-core-{rdma}")),
            StandInRpm(parse_nevra(f"libibverbs-{rdma}"), requires=("rdma-core",))]


BASEOS = _baseos(_K, "48.0-1.el9")
# EL10: the RHEL 10.1 kernel 6.12.0-124.20.1.el10_1 (the kernel of RHEL's precompiled
# kmod-nvidia-open-580.105.08-6.12.0-124.20.1-580.105.08-3.el10_1 in NVIDIA/yum-packaging-precompiled-kmod
# DISTROS.md); the RDMA user space's build is modelled (unpinned, as on EL9).
KERNEL10 = "6.12.0-124.20.1.el10_1.x86_64"
BASEOS10 = _baseos("6.12.0-124.20.1.el10_1", "57.0-1.el10")
MISSING10 = "kmod-nvidia-open-dkms-3:580.167.08-1.el10"

# A held-out EL10 fleet (no example renders it): an HGX H200 partition and an MI325X partition on
# Rocky Linux 10, each stack at the catalog's EL10 rows; the driver at either EL10 build.
EL10_FLEET = """apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata:
  name: vega10
spec:
  os: rocky-10
  stacks:
    hgx-cu13:
      driver: "{driver}"
      cuda: "13.0.2"
      nccl: "2.28.3"
    instinct-rocm711:
      rocm: "7.1.1"
      amdgpu: "30.20.1"
  fabric:
    type: infiniband
    spines: [sp-1]
  racks:
    - name: a
      leaf: lf-1
      nodes:
        - hosts: hgx-[01-02]
          gpu: {{model: h200-sxm, count: 8}}
          stack: hgx-cu13
          scheduler: slurm
          cpus: 192
          memory_gb: 2048
    - name: b
      leaf: lf-2
      nodes:
        - hosts: mi325-[01-02]
          gpu: {{model: mi325x, count: 8}}
          stack: instinct-rocm711
          scheduler: slurm
          cpus: 192
          memory_gb: 2048
  slurm:
    version: "25.11.8"
    mode: native
    controllers: ctl-1
"""


@pytest.fixture(autouse=True, scope="module")
def _dnf_tools() -> None:
    for tool in ("dnf", "rpm", "rpmbuild", "createrepo_c", "modifyrepo_c"):
        if shutil.which(tool) is None:
            unavailable(f"needs {tool} (Debian: dnf python3-dnf dnf-plugins-core rpm createrepo-c)")


def _vendor_repos(tmp: Path, el: int, missing: str) -> dict[str, Path]:
    """NVIDIA's rhel<el> stand-in (its streams as modulemd where the catalog has them: EL9), the
    same tree with ``missing`` gone, and AMD's trees of that EL together."""
    trees = {t.baseurl: t for t in el_trees(el)}
    nvidia = trees.pop(el_repo(el, "nvidia").baseurl)
    modules = modulemd("nvidia-driver", nvidia.streams) if nvidia.streams else None
    full = index(build_rpms(nvidia.rpms, tmp / f"nvidia/rhel{el}/x86_64"), modules)
    # The same tree with one build gone (a vendor pruned it, or a mirror lags): hard links, re-indexed.
    pruned = tmp / f"pruned/rhel{el}/x86_64"
    for rpm in full.rglob("*.rpm"):
        if not rpm.name.startswith(missing.replace("3:", "", 1)):
            (pruned / rpm.parent.relative_to(full)).mkdir(parents=True, exist_ok=True)
            os.link(rpm, pruned / rpm.relative_to(full))
    assert len(list(pruned.rglob("*.rpm"))) == len(list(full.rglob("*.rpm"))) - 1
    # AMD's trees (each ROCm/amdgpu release's own baseurl) together, as one node enables them.
    amd = [r for t in trees.values() for r in t.rpms]
    return {"nvidia": full, "pruned": index(pruned, modules), "amd": index(build_rpms(amd, tmp / f"amd/el{el}/main"))}


@pytest.fixture(scope="module")
def repos(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("el-repos")
    return {**_vendor_repos(tmp, 9, MISSING), "baseos": index(build_rpms(BASEOS, tmp / "baseos/x86_64/os")),
            **_epel(tmp)}


# EPEL and CRB as a Rocky 9 node meets them: CRB defined in the distribution's repo file but
# disabled (Rocky's rocky.repo [crb] enabled=0, turned on by `dnf config-manager
# --set-enabled crb`), EPEL reached only once its release package is installed: epel-release
# lays down /etc/yum.repos.d/epel.repo ([epel], name "Extra Packages for Enterprise Linux
# $releasever - $basearch"; a metalink and a gpgkey in the real file, the stand-in tree's
# baseurl here). dkms in EPEL's tree (EPEL 9 carries dkms 3.x; the build is modelled).
def _epel(tmp: Path) -> dict[str, Path]:
    epel = index(build_rpms([StandInRpm(parse_nevra("dkms-3.1.0-1.el9"), "noarch")], tmp / "epel/9/Everything/x86_64"))
    (tmp / "crb/x86_64/os").mkdir(parents=True)
    repo = (f"[epel]\nname=Extra Packages for Enterprise Linux $releasever - $basearch\nbaseurl=file://{epel}\n"
            "enabled=1\ngpgcheck=0\n")
    release = build_rpms([StandInRpm(parse_nevra("epel-release-9-8.el9"), "noarch",
                                     files=(("/etc/yum.repos.d/epel.repo", repo),))], tmp / "epel-release")
    return {"epel": epel, "crb": index(tmp / "crb/x86_64/os"), "epel_release": next(release.rglob("*.rpm"))}


def _render(text: str) -> dict[PurePosixPath, str]:
    compiled = compile_text(text)
    assert not [f for f in compiled.located() if f.severity >= Severity.ERROR], [f.message for f in compiled.located()]
    return render_ansible(compiled.fleet)


def _tree(driver: str) -> dict[PurePosixPath, str]:
    return _render((EXAMPLES / "rocky9.yaml").read_text().replace('driver: "580.82.07"', f'driver: "{driver}"'))


@pytest.fixture(scope="module")
def trees() -> dict[str, dict[PurePosixPath, str]]:
    return {"580.82.07": _tree("580.82.07"), "580.95.05": _tree("580.95.05")}


def _pins(trees: dict[str, dict[PurePosixPath, str]]) -> dict[str, dict[str, str]]:
    return {build: {p.name: t for p, t in tree.items() if p.parent == PurePosixPath("ansible/pins")}
            for build, tree in trees.items()}


@pytest.fixture(scope="module")
def pins(trees) -> dict[str, dict[str, str]]:
    return _pins(trees)


class El(NamedTuple):
    """One EL major's stand-in world: its vendor repositories, a fleet rendered at two driver
    builds (``old``, ``new``), its stacks, a build beyond ``old`` the tree carries (``newest``),
    the NEVRA the pruned tree lacks, and the dist tag of the AMD tree's builds."""

    el: int
    repos: dict[str, Path]
    trees: dict[str, dict[PurePosixPath, str]]
    nvidia: str
    amd: str
    old: str
    new: str
    newest: str
    missing: str
    amd_dist: str

    @property
    def pins(self) -> dict[str, dict[str, str]]:
        return _pins(self.trees)


@pytest.fixture(scope="module")
def el10(tmp_path_factory: pytest.TempPathFactory) -> El:
    tmp = tmp_path_factory.mktemp("el10-repos")
    repos = {**_vendor_repos(tmp, 10, MISSING10), "baseos": index(build_rpms(BASEOS10, tmp / "baseos/x86_64/os"))}
    trees = {b: _render(EL10_FLEET.format(driver=b)) for b in ("580.105.08", "580.167.08")}
    return El(10, repos, trees, "hgx-cu13", "instinct-rocm711", "580.105.08", "580.167.08", "580.167.08",
              MISSING10, ".el10")


@pytest.fixture(scope="module", params=[9, 10], ids=["el9", "el10"])
def world(request: pytest.FixtureRequest) -> El:
    """EL9 (the rocky9 example, NVIDIA's streams, ROCm 7.1.0's .el8 builds in the el9 tree) and
    EL10 (the held-out fleet above: no streams, locks by versionlock only, .el10 ROCm builds)."""
    if request.param == 9:
        return El(9, request.getfixturevalue("repos"), request.getfixturevalue("trees"), "hopper-cu12",
                  "cdna3-rocm71", "580.82.07", "580.95.05", "580.178.04", MISSING, ".el8")
    return request.getfixturevalue("el10")


def wanted(dnf_list: str) -> dict[str, str]:
    """{name: epoch:version-release} the .dnf file asks for (rpm -q prints epoch 0 too)."""
    out = {}
    for line in dnf_list.split():
        n = parse_nevra(line)
        out[n.name] = f"{n.epoch}:{n.version}-{n.release}"
    return out


def node(tmp: Path, repos: dict[str, Path], files: dict[str, str], stack: str = "hopper-cu12",
         repo: str = "nvidia", el: int = 9) -> DnfRoot:
    root = DnfRoot(tmp, {repo: repos[repo]}, el)
    if f"{stack}.module" in files:
        root.write("etc/dnf/modules.d/nvidia-driver.module", files[f"{stack}.module"])
    return root


def install(root: DnfRoot, files: dict[str, str], stack: str = "hopper-cu12", *extra: str) -> None:
    done = root.dnf(*extra, "install", *files[f"{stack}.dnf"].split())
    assert done.returncode == 0, done.stdout + done.stderr


def test_an_older_build_installs_exactly_while_newer_ones_exist_and_upgrade_changes_nothing_under_the_lock(
        world, tmp_path) -> None:
    files, s = world.pins[world.old], world.nvidia
    root = node(tmp_path, world.repos, files, s, el=world.el)
    install(root, files, s)
    want = wanted(files[f"{s}.dnf"])
    assert {n: root.installed()[n] for n in want} == want
    assert root.installed()["nvidia-driver-cuda"] == f"3:{world.old}-1.el{world.el}"
    # Without the lock, newer builds are there to take (EL9: 580.178.04 in the stream, never 590).
    free = root.dnf("check-update")
    assert free.returncode == 100 and world.newest in free.stdout and R590 not in free.stdout, free.stdout
    root.locklist.write_text(files[f"{s}.versionlock"])
    assert root.dnf("check-update").returncode == 0
    before = root.installed()
    done = root.dnf("upgrade")
    assert done.returncode == 0 and "Nothing to do." in done.stdout, done.stdout + done.stderr
    assert root.installed() == before


def test_a_590_build_is_filtered_out_under_the_580_open_stream(repos, pins, tmp_path) -> None:
    files = pins["580.82.07"]
    root = node(tmp_path, repos, files)
    r590 = f"nvidia-driver-cuda-3:{R590}-1.el9"
    done = root.dnf("install", r590)
    assert done.returncode == 1, done.stdout
    assert f"All matches were filtered out by modular filtering for argument: {r590}" in done.stdout + done.stderr
    assert root.installed() == {}
    # The same request under the 590-open stream resolves (test transaction only): the stream decided.
    root.write("etc/dnf/modules.d/nvidia-driver.module", files["hopper-cu12.module"].replace("580-open", "590-open"))
    ok = root.dnf("--setopt=tsflags=test", "install", r590)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_a_tuple_change_and_its_rollback_in_one_transaction_each(world, tmp_path) -> None:
    old, new, s = world.pins[world.old], world.pins[world.new], world.nvidia
    root = node(tmp_path, world.repos, old, s, el=world.el)
    install(root, old, s)
    root.locklist.write_text(old[f"{s}.versionlock"])
    # The old lock hides the new build: the lock entries are replaced with the install, never left behind.
    held = root.dnf("install", *new[f"{s}.dnf"].split())
    assert held.returncode == 1 and f"nvidia-driver-cuda-3:{world.new}-1.el{world.el}" in held.stdout + held.stderr
    for files, build in ((new, world.new), (old, world.old)):
        install(root, files, s, "--disableplugin=versionlock")
        root.locklist.write_text(files[f"{s}.versionlock"])
        want = wanted(files[f"{s}.dnf"])
        assert {n: root.installed()[n] for n in want} == want
        assert root.installed()["kmod-nvidia-open-dkms"] == f"3:{build}-1.el{world.el}"
        assert root.dnf("upgrade").stdout.count("Nothing to do.") == 1


def test_the_amd_stack_installs_its_trees_builds_el8_in_el9_el10_in_el10(world, tmp_path) -> None:
    """ROCm 7.1.x's el9 tree ships .el8 builds (rocm-install-on-linux#628, #644); its rhel10 tree
    EL10-built ones (legacy-rocm-build#5617), amdgpu-dkms at epoch 1 beside them."""
    files, s = world.pins[world.old], world.amd
    root = node(tmp_path, world.repos, files, s, "amd", world.el)
    install(root, files, s)
    want = wanted(files[f"{s}.dnf"])
    assert {n: root.installed()[n] for n in want} == want
    assert all(v.endswith(world.amd_dist) for v in want.values()), want
    assert root.dnf("check-update").returncode == 100  # newer builds are there to take, until the lock
    root.locklist.write_text(files[f"{s}.versionlock"])
    assert root.dnf("check-update").returncode == 0
    before = root.installed()
    assert "Nothing to do." in root.dnf("upgrade").stdout and root.installed() == before


def test_a_missing_nevra_stops_the_test_transaction_before_anything_changes_naming_it(world, tmp_path) -> None:
    old, new, s = world.pins[world.old], world.pins[world.new], world.nvidia
    root = node(tmp_path, world.repos, old, s, "pruned", world.el)
    install(root, old, s)
    before = root.installed()
    done = root.dnf("--setopt=tsflags=test", "--disableplugin=versionlock", "install", *new[f"{s}.dnf"].split())
    assert done.returncode == 1
    assert f"No match for argument: {world.missing}" in done.stdout + done.stderr, done.stdout + done.stderr
    assert root.installed() == before


# The node role's EL path (playbooks/roles/stack_packages/tasks/dnf.yml), run by real
# ansible-playbook on this machine (connection local) into a DnfRoot: the rendered tree as
# `fleetspec render` writes it, its .repo pointed at the stand-in tree (as a site mirror is),
# dnf's installroot and private paths given through the role's fleetspec_el_root/_dnf_options.
PLAY = """- hosts: h100-001
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.include_role: {name: stack_packages}
"""


def role_run(tmp: Path, root: DnfRoot, files: dict[PurePosixPath, str], repo: Path, kernel: str = KERNEL,
             play: str = PLAY, stack: str = "hopper-cu12", **extra: object) -> subprocess.CompletedProcess[str]:
    tree = tmp / f"tree-{len(list(tmp.glob('tree-*')))}"
    for rel, text in files.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_text(text)
    repo_file = tree / f"ansible/pins/{stack}.repo"
    repo_file.write_text(re.sub(r"(?m)^baseurl=.*$", f"baseurl=file://{repo}", repo_file.read_text())
                         .replace("gpgcheck=1", "gpgcheck=0"))
    (tree / "play.yml").write_text(play)
    (tree / "vars.json").write_text(json.dumps({
        "ansible_python_interpreter": sys.executable, "fleetspec_el_root": str(root.root),
        "fleetspec_dnf_options": [f"--releasever={root.el}", f"--setopt=module_platform_id=platform:el{root.el}",
                                  f"--setopt=pluginconfpath={root.plugins}", f"--setopt=cachedir={root.root.parent}/cache",
                                  "--setopt=install_weak_deps=0"],
        "fleetspec_dnf_environment": root.env(), "fleetspec_kernel_release": kernel, **extra}))
    exe = shutil.which("ansible-playbook")
    assert exe, "ansible-playbook is required (pip install ansible-core)"
    env = {"ANSIBLE_CONFIG": str(ROOT / "playbooks/ansible.cfg"), "ANSIBLE_HOME": str(tmp / ".ansible"),
           "ANSIBLE_ROLES_PATH": str(ROOT / "playbooks/roles"), "PATH": "/usr/bin:/bin:" + str(Path(exe).parent)}
    return subprocess.run([exe, "-i", str(tree / "ansible/inventory.yml"), "-e", f"@{tree / 'vars.json'}",
                           str(tree / "play.yml")], capture_output=True, text=True, env=env, timeout=300)


def test_the_node_role_changes_a_node_in_one_transaction_and_stops_on_a_missing_nevra(repos, pins, trees, tmp_path):
    """A node as NVIDIA's guide leaves it (580.82.07 installed, each package locked by `dnf
    versionlock add`), a site's own lock line, and another branch's stream enabled by hand."""
    old = pins["580.82.07"]
    root = DnfRoot(tmp_path / "node", None)
    (root.root / "etc/yum.repos.d/standin.repo").write_text(f"[standin]\nname=standin\nbaseurl=file://{repos['nvidia']}"
                                                            "\ngpgcheck=0\n")
    root.write("etc/dnf/modules.d/nvidia-driver.module", old["hopper-cu12.module"])
    install(root, old)
    (root.root / "etc/yum.repos.d/standin.repo").unlink()
    (root.root / "etc/yum.repos.d/baseos.repo").write_text(f"[baseos]\nname=baseos\nbaseurl=file://{repos['baseos']}"
                                                           "\ngpgcheck=0\n")
    root.locklist.write_text("bash-0:5.2.15-1.*\n" + old["hopper-cu12.versionlock"].split("\n", 1)[1])
    root.write("etc/dnf/modules.d/nvidia-driver.module", old["hopper-cu12.module"].replace("580-open", "590-open"))
    before = root.installed()
    # The pruned tree: the pre-check stops, naming the NEVRA and the repository; no package moved.
    # A kernel whose kernel-devel the distribution's tree lacks (an older minor's, as Rocky's
    # mirrors drop them; modelled) is named in the same stop.
    stopped = role_run(tmp_path, root, trees["580.95.05"], repos["pruned"], kernel="5.14.0-427.13.1.el9_4.x86_64")
    assert stopped.returncode != 0
    out = " ".join(stopped.stdout.split())
    assert f"{MISSING} is not in the configured repositories: file://{repos['pruned']} should carry it" in out, out
    assert ("kernel-devel-5.14.0-427.13.1.el9_4.x86_64 is not in the configured repositories: the distribution's "
            "(BaseOS/AppStream) should carry it, and DKMS cannot build the driver for kernel") in out, out
    reset = stopped.stdout.split("Reset another enabled nvidia-driver stream]", 1)[1].split("TASK [", 1)[0]
    assert "changed: [h100-001]" in reset, stopped.stdout
    assert "stream=580-open" in (root.root / "etc/dnf/modules.d/nvidia-driver.module").read_text()
    assert root.installed() == before and "580.82.07-1.el9.*" in root.locklist.read_text()
    # The complete tree: the change in one transaction, every lock line of a pinned name replaced.
    changed = role_run(tmp_path, root, trees["580.95.05"], repos["nvidia"])
    assert changed.returncode == 0, changed.stdout + changed.stderr
    want = wanted(trees["580.95.05"][PurePosixPath("ansible/pins/hopper-cu12.dnf")])
    assert {n: root.installed()[n] for n in want} == want  # the HGX node's fabric manager too (nvswitch)
    assert {n: root.installed().get(n) for n in ("kernel-devel", "rdma-core", "libibverbs")} == {
        "kernel-devel": "0:5.14.0-427.28.1.el9_4", "rdma-core": "0:48.0-1.el9", "libibverbs": "0:48.0-1.el9"}
    locks = root.locklist.read_text()
    assert "580.82.07" not in locks and "bash-0:5.2.15-1.*\n" in locks, locks
    assert [ln for ln in locks.splitlines() if not ln.startswith(("#", "bash-"))] == [
        ln for ln in trees["580.95.05"][PurePosixPath("ansible/pins/hopper-cu12.versionlock")].splitlines()
        if not ln.startswith("#")]
    assert "Nothing to do." in root.dnf("upgrade").stdout


def test_the_node_role_on_el10_installs_and_locks_the_pins_with_no_module_stream(el10, tmp_path) -> None:
    """EL10 (NVIDIA's rhel10 tree has no module streams): the role writes no module file and runs
    no `dnf module`; the HGX node's pins install in one transaction and the versionlock holds them."""
    root = DnfRoot(tmp_path / "node", None, 10)
    (root.root / "etc/yum.repos.d/baseos.repo").write_text(f"[baseos]\nname=baseos\nbaseurl=file://{el10.repos['baseos']}"
                                                           "\ngpgcheck=0\n")
    root.locklist.write_text("bash-0:5.2.26-6.el10.*\n")  # a site's own lock line, kept
    tree = el10.trees[el10.old]
    done = role_run(tmp_path, root, tree, el10.repos["nvidia"], kernel=KERNEL10, play=PLAY.replace("h100-001", "hgx-01"),
                    stack=el10.nvidia)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    for task in ("Read the enabled nvidia-driver stream", "Reset another enabled nvidia-driver stream",
                 "Enable the stack's nvidia-driver stream"):
        ran = done.stdout.split(f"TASK [stack_packages : {task}]", 1)[1].split("TASK [", 1)[0]
        assert "skipping: [hgx-01]" in ran, done.stdout
    assert list((root.root / "etc/dnf/modules.d").iterdir()) == []
    want = wanted(tree[PurePosixPath(f"ansible/pins/{el10.nvidia}.dnf")])
    assert {n: root.installed()[n] for n in want} == want and want["kmod-nvidia-open-dkms"] == "3:580.105.08-1.el10"
    assert root.installed()["kernel-devel"] == "0:6.12.0-124.20.1.el10_1"
    locks = [ln for ln in root.locklist.read_text().splitlines() if not ln.startswith("#")]
    assert locks == ["bash-0:5.2.26-6.el10.*"] + [ln for ln in tree[PurePosixPath(
        f"ansible/pins/{el10.nvidia}.versionlock")].splitlines() if not ln.startswith("#")], locks
    assert "Nothing to do." in root.dnf("upgrade").stdout


def _rocky_node(tmp: Path, repos: dict[str, Path]) -> DnfRoot:
    """A Rocky 9 node with nothing of the stack: BaseOS enabled, CRB disabled, no EPEL."""
    root = DnfRoot(tmp / "node", None)
    (root.root / "etc/yum.repos.d/rocky.repo").write_text(
        f"[baseos]\nname=Rocky Linux $releasever - BaseOS\nbaseurl=file://{repos['baseos']}\ngpgcheck=0\nenabled=1\n\n"
        f"[crb]\nname=Rocky Linux $releasever - CRB\nbaseurl=file://{repos['crb']}\ngpgcheck=0\nenabled=0\n")
    return root


def _dkms_node(repos: dict[str, Path], **gpu: object) -> dict[str, object]:
    """A GPU node whose driver DKMS builds (gpu_facts' answers), EPEL's release package the stand-in."""
    return {"fleetspec_gpu": {"kernel_modules": True, "nvidia_pci": True, "nouveau_module": True, "secure_boot": False,
                              **gpu},
            "fleetspec_el": {"major": 9, "crb_repo": "crb", "epel_release": str(repos["epel_release"]),
                             "versionlock_package": "python3-dnf-plugin-versionlock"}}


def test_a_dkms_driver_node_gets_crb_epel_dkms_and_the_kernels_devel_files_then_a_reboot_marker(
        repos, trees, tmp_path) -> None:
    root = _rocky_node(tmp_path, repos)
    done = role_run(tmp_path, root, trees["580.82.07"], repos["nvidia"], **_dkms_node(repos))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    enabled = root.dnf("-q", "repolist", "--enabled").stdout
    assert {line.split()[0] for line in enabled.splitlines() if line.strip()} >= {"baseos", "crb", "epel"}, enabled
    have = root.installed()
    assert {n: have.get(n) for n in ("epel-release", "dkms", "kernel-devel", "kernel-devel-matched", "kernel-headers",
                                     "kernel-core")} == {
        "epel-release": "0:9-8.el9", "dkms": "0:3.1.0-1.el9", "kernel-devel": f"0:{_K}",
        "kernel-devel-matched": f"0:{_K}", "kernel-headers": f"0:{_K}", "kernel-core": f"0:{_K}"}
    assert have["kmod-nvidia-open-dkms"] == "3:580.82.07-1.el9"
    # A first install over nouveau: the new module runs only after a reboot (apply --allow-reboot).
    marker = (root.root / "var/lib/fleetspec/reboot-required").read_text()
    assert "kmod-nvidia-open-dkms" in marker and "nvidia-driver-cuda" in marker, marker
    assert "datacenter-gpu-manager" not in marker
    # Applied again: nothing to enable or install, and no driver change recorded.
    (root.root / "var/lib/fleetspec/reboot-required").unlink()
    again = role_run(tmp_path, root, trees["580.82.07"], repos["nvidia"], **_dkms_node(repos, nouveau_module=False))
    assert again.returncode == 0, again.stdout[-6000:]
    assert "changed=" in again.stdout and not (root.root / "var/lib/fleetspec/reboot-required").exists()
    for task in ("Enable CRB", "Install EPEL's release package"):
        assert f"TASK [stack_packages : {task}" in again.stdout
        assert "skipping: [h100-001]" in again.stdout.split(f"TASK [stack_packages : {task}", 1)[1].split("TASK [", 1)[0]


def test_secure_boot_without_an_enrolled_key_stops_an_el_node_before_epel_or_any_package(repos, trees, tmp_path):
    """No mokutil answer is no enrollment (tests/ansible/test_secure_boot_role.py); on EL DKMS's own
    key is /var/lib/dkms/mok.pub (dkms's default mok_certificate outside Ubuntu)."""
    root = _rocky_node(tmp_path, repos)
    done = role_run(tmp_path, root, trees["580.82.07"], repos["nvidia"], **_dkms_node(repos, secure_boot=True))
    out = " ".join(done.stdout.split())
    assert done.returncode != 0 and "Secure Boot is enabled" in out and "Nothing was installed" in out, out[-3000:]
    assert "mokutil --import /var/lib/dkms/mok.pub" in out
    assert root.installed() == {} and not (root.root / "etc/yum.repos.d/epel.repo").exists()


# The Slurm and Enroot/Pyxis roles' install step on EL, the task itself read from the role (so the
# run takes whatever path the role takes), run into a DnfRoot whose site repository holds
# SchedMD-shaped RPMs (slurm.spec: slurm-slurmd and slurm-slurmctld `Requires: slurm = %{version}-%{release}`),
# NVIDIA/enroot's .el8 release assets and a pyxis.spec build (nvslurm-plugin-pyxis `Requires: enroot`),
# each beside a newer build, as a site repository keeps older builds.
SITE_BUILT = ("slurm-25.11.8-1.el9", "slurm-slurmd-25.11.8-1.el9", "slurm-slurmctld-25.11.8-1.el9",
              "enroot-3.5.0-1.el8", "enroot+caps-3.5.0-1.el8", "nvslurm-plugin-pyxis-0.20.0-1.el9")


def _site_rpm(n: Nevra) -> StandInRpm:
    evr = f"{n.version}-{n.release}"
    requires = {"slurm-slurmd": (f"slurm = {evr}",), "slurm-slurmctld": (f"slurm = {evr}",),
                "nvslurm-plugin-pyxis": ("enroot >= 3.1.0",)}.get(n.name, ())
    return StandInRpm(n, "x86_64", requires)


@pytest.fixture(scope="module")
def site_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    rpms = []
    for text in SITE_BUILT:
        n = parse_nevra(text)
        rpms += [_site_rpm(n), _site_rpm(n._replace(version=n.version.replace("25.11.8", "25.11.9")
                                                    .replace("3.5.0", "3.6.0").replace("0.20.0", "0.21.0")))]
    return index(build_rpms(rpms, tmp_path_factory.mktemp("site") / "el9/x86_64"))


def _role_task(role: str, name: str) -> dict:
    tasks = yaml.safe_load((ROOT / f"playbooks/roles/{role}/tasks/main.yml").read_text())
    return next(t for t in tasks if t.get("name") == name)


def test_slurm_and_enroot_pyxis_install_exactly_from_the_site_repository_and_are_locked(site_repo, trees, tmp_path):
    el = trees["580.82.07"]
    el = {**el, PurePosixPath("ansible/group_vars/slurm_node.yml"): el[PurePosixPath(
        "ansible/group_vars/slurm_node.yml")] + "fleetspec_container_packages:\n" + "".join(
        f"- {{name: {n.name}, version: {n.version}-{n.release}, role: enroot_pyxis, condition: null}}\n"
        for n in map(parse_nevra, SITE_BUILT[3:]))}
    tasks = [_role_task("slurm", "Install and hold the pinned Slurm packages"),
             _role_task("enroot_pyxis", "Install and hold Enroot and Pyxis")]
    root = DnfRoot(tmp_path / "node", None)
    (root.root / "etc/yum.repos.d/site.repo").write_text(f"[site]\nname=site\nbaseurl=file://{site_repo}\ngpgcheck=0\n")
    root.locklist.write_text("# fleetspec: stack hopper-cu12 (ansible/pins/hopper-cu12.versionlock)\n"
                             "libnccl-0:2.26.2-1+cuda12.8.*\nslurm-0:25.11.9-1.el9.*\n")
    done = role_run(tmp_path, root, el, site_repo, play=yaml.safe_dump(
        [{"hosts": "h100-001", "connection": "local", "gather_facts": False, "tasks": tasks}], sort_keys=False))
    assert done.returncode == 0, done.stdout[-6000:]
    have = root.installed()
    assert {n: have.get(n) for n in ("slurm", "slurm-slurmd", "enroot", "enroot+caps", "nvslurm-plugin-pyxis")} == {
        "slurm": "0:25.11.8-1.el9", "slurm-slurmd": "0:25.11.8-1.el9", "enroot": "0:3.5.0-1.el8",
        "enroot+caps": "0:3.5.0-1.el8", "nvslurm-plugin-pyxis": "0:0.20.0-1.el9"}
    assert "slurm-slurmctld" not in have  # a compute node gets slurmd only
    locks = root.locklist.read_text()
    assert "slurm-0:25.11.9" not in locks and "libnccl-0:2.26.2-1+cuda12.8.*" in locks, locks
    for line in ("# fleetspec: stack hopper-cu12 (ansible/pins/hopper-cu12.versionlock)", "# fleetspec: slurm (site-built)", "slurm-0:25.11.8-1.el9.*",
                 "slurm-slurmd-0:25.11.8-1.el9.*", "# fleetspec: enroot_pyxis (site-built)",
                 "enroot+caps-0:3.5.0-1.el8.*", "nvslurm-plugin-pyxis-0:0.20.0-1.el9.*"):
        assert line in locks.splitlines(), locks
    assert "Nothing to do." in root.dnf("upgrade").stdout and root.installed() == have
    # A Slurm release the site repository lacks: the test transaction stops, naming it and how to build it.
    missing = {**el, PurePosixPath("ansible/group_vars/all.yml"): el[PurePosixPath("ansible/group_vars/all.yml")]
               .replace("25.11.8-1.el9", "25.11.7-1.el9")}
    stopped = role_run(tmp_path, root, missing, site_repo, play=yaml.safe_dump(
        [{"hosts": "h100-001", "connection": "local", "gather_facts": False, "tasks": tasks[:1]}], sort_keys=False))
    out = " ".join(stopped.stdout.split())
    assert stopped.returncode != 0
    assert ("slurm-25.11.7-1.el9 is not in the enabled repositories: the site's repository should carry it "
            "(SchedMD's slurm.spec: rpmbuild -ta slurm-<version>.tar.bz2)") in out, out[-3000:]
    assert root.installed() == have


# Rocky Linux 9's /etc/os-release (rocky-release 9.6: NAME="Rocky Linux", ID="rocky",
# ID_LIKE="rhel centos fedora", VERSION_ID="9.6"; fleetspec/importer/facts.py maps it to rocky-9).
ROCKY_OS_RELEASE = ('NAME="Rocky Linux"\nVERSION="9.6 (Blue Onyx)"\nID="rocky"\nID_LIKE="rhel centos fedora"\n'
                    'VERSION_ID="9.6"\nPLATFORM_ID="platform:el9"\nPRETTY_NAME="Rocky Linux 9.6 (Blue Onyx)"\n')


def collected(root: DnfRoot) -> dict:
    """The node-side collector (Python stdlib only) on the root, rpm reading its rpmdb (rpm --root)."""
    done = subprocess.run([sys.executable, str(ROOT / "fleetspec/node_side/collector.py"), "--root", str(root.root),
                           "--no-load"], capture_output=True, text=True, timeout=120, env=root.env())
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def el_checks(trees: dict, facts: dict) -> dict[str, tuple[str, str | None, str]]:
    from fleetspec.verify.compare import compare

    compiled = compile_text((EXAMPLES / "rocky9.yaml").read_text())
    node = next(n for n in compare(compiled.fleet, {"h100-001": facts}, hosts=["h100-001"]).nodes)
    return {c.component: (c.status.value, c.found, c.message) for c in node.checks
            if c.component in ("el-packages", "package-holds", "driver-stream")}


def test_verify_reads_rpm_the_versionlock_and_the_stream_and_reports_each_as_drift(repos, pins, trees, tmp_path):
    files = pins["580.82.07"]
    root = node(tmp_path, repos, files)
    install(root, files)
    root.locklist.write_text(files["hopper-cu12.versionlock"])
    (root.root / "etc/os-release").write_text(ROCKY_OS_RELEASE)
    facts = collected(root)
    packages = facts["packages"]
    assert packages["manager"] == "rpm" and packages["module_streams"] == {"nvidia-driver": "580-open"}
    by_name = {p["name"]: p for p in packages["installed"]}
    assert by_name["kmod-nvidia-open-dkms"]["version"] == "3:580.82.07-1.el9"  # the epoch, from rpm -q
    assert by_name["libnccl"]["version"] == "2.26.2-1+cuda12.8" and by_name["libnccl"]["held"]
    assert {k: v[0] for k, v in el_checks(trees, facts).items()} == {
        "el-packages": "ok", "package-holds": "ok", "driver-stream": "ok"}
    from fleetspec.verify.testinfra_checks import COMPONENTS  # the testinfra module's tests, one per id

    assert {"el-packages", "package-holds", "driver-stream"} <= set(COMPONENTS)
    # A lock dropped, another changed, a package moved off its build, another stream enabled.
    lock = files["hopper-cu12.versionlock"].replace("libnccl-devel-0:2.26.2-1+cuda12.8.*\n", "").replace(
        "libnccl-0:2.26.2-1+cuda12.8.*", "libnccl-0:2.26.2-2+cuda12.8.*")
    root.locklist.write_text(lock)
    moved = root.dnf("--disableplugin=versionlock", "upgrade", "libnccl")
    assert moved.returncode == 0, moved.stdout + moved.stderr
    root.write("etc/dnf/modules.d/nvidia-driver.module", files["hopper-cu12.module"].replace("580-open", "590-open"))
    checks = el_checks(trees, collected(root))
    assert checks["el-packages"][:2] == ("drift", "libnccl 2.26.2-2+cuda12.8 (pin 2.26.2-1+cuda12.8)")
    assert checks["package-holds"][0] == "drift"
    assert "missing libnccl-devel-0:2.26.2-1+cuda12.8.*" in checks["package-holds"][1]
    assert "locked at libnccl-0:2.26.2-2+cuda12.8.*" in checks["package-holds"][1]
    assert checks["driver-stream"][:2] == ("drift", "590-open")


def node_checks(facts: dict) -> dict[str, tuple[str, str | None, str]]:
    from fleetspec.verify.compare import compare

    compiled = compile_text((EXAMPLES / "rocky9.yaml").read_text())
    node = next(n for n in compare(compiled.fleet, {"h100-001": facts}, hosts=["h100-001"]).nodes)
    return {c.component: (c.status.value, c.found, c.message) for c in node.checks}


def test_verify_reads_dcgm_the_cuda_components_rdma_and_library_owners_from_rpm(repos, pins, tmp_path) -> None:
    """Every package-version check of an EL node reads rpm (names from the catalog's EL rows,
    EVRs with their epoch), never dpkg: each is ok at the pins and drift once rpm shows a move."""
    files = pins["580.82.07"]
    root = node(tmp_path, repos, files)
    root.repos({"nvidia": repos["nvidia"], "baseos": repos["baseos"]})
    install(root, files, "hopper-cu12", "--setopt=install_weak_deps=False")
    assert root.dnf("install", "rdma-core", "libibverbs").returncode == 0
    root.locklist.write_text(files["hopper-cu12.versionlock"])
    (root.root / "etc/os-release").write_text(ROCKY_OS_RELEASE)
    facts = collected(root)
    checks = node_checks(facts)
    assert {k: checks[k][:2] for k in ("dcgm", "cuda-components", "rdma-userspace")} == {
        "dcgm": ("ok", "1:4.5.2-1"), "cuda-components": ("ok", "6 at the pin"),
        "rdma-userspace": ("ok", "installed")}
    assert checks["rdma-userspace"][2] == "the RDMA user space is installed"
    # The system libnccl's owner, from rpm -qf in the node's rpmdb (the library is not loaded: --no-load).
    assert checks["nccl"][:2] == ("ok", "2.26.2-1+cuda12.8") and "package libnccl" in checks["nccl"][2], checks["nccl"]
    # A node of an EL fleet whose facts come from dpkg is not read as if they were rpm's.
    as_dpkg = {**facts, "packages": {**facts["packages"], "manager": "dpkg"}}
    assert {k: node_checks(as_dpkg)[k][0] for k in ("dcgm", "cuda-components", "rdma-userspace")} == {
        "dcgm": "not-applicable", "cuda-components": "not-applicable", "rdma-userspace": "not-applicable"}
    # DCGM and a CUDA component moved to their newer builds, libibverbs removed: three drifts from rpm.
    moved = root.dnf("--disableplugin=versionlock", "upgrade", "datacenter-gpu-manager-4-core", "cuda-nvcc-12-8")
    assert moved.returncode == 0, moved.stdout + moved.stderr
    gone = subprocess.run(["rpm", "--root", str(root.root), "-e", "--nodeps", "libibverbs"], capture_output=True,
                          text=True, env=root.env())
    assert gone.returncode == 0, gone.stderr
    checks = node_checks(collected(root))
    assert checks["dcgm"][:2] == ("drift", "datacenter-gpu-manager-4-core 1:4.5.2-2")
    assert checks["cuda-components"][:2] == ("drift", "cuda-nvcc-12-8 12.8.93-2 (pin 12.8.93-1)")
    assert checks["rdma-userspace"][:2] == ("drift", "absent: libibverbs")


def test_verify_passes_the_amd_stand_in_checking_its_packages_and_not_gpus_it_cannot_have(repos, pins, tmp_path):
    """The lab's AMD host as verify sees it: the stand-in RPMs (marker files, ROCm's
    .info/version, librccl), no amdgpu module and no amd-smi/rocm-smi, so no GPU to list. As
    for the NVIDIA stand-in, GPU model and count are not-applicable there, and the node conforms
    with every package check read from rpm; a real node (no stand-in marker) without GPUs drifts."""
    from fleetspec.verify.compare import compare

    files = pins["580.82.07"]
    root = node(tmp_path, repos, files, "cdna3-rocm71", "amd")
    root.repos({"amd": repos["amd"], "baseos": repos["baseos"]})
    install(root, files, "cdna3-rocm71")
    assert root.dnf("install", "rdma-core", "libibverbs").returncode == 0
    root.locklist.write_text(files["cdna3-rocm71.versionlock"])
    (root.root / "etc/os-release").write_text(ROCKY_OS_RELEASE)
    facts = collected(root)
    assert facts["amd"]["driver_version"] == "absent" and facts["amd"]["gpus"] == [] and facts["standin"]
    fleet = compile_text((EXAMPLES / "rocky9.yaml").read_text()).fleet
    report = compare(fleet, {"mi300x-001": facts}, hosts=["mi300x-001"]).nodes[0]
    checks = {c.component: (c.status.value, c.found) for c in report.checks}
    assert report.conforms, [c for c in report.checks if c.status.value == "drift"]
    assert checks["gpus"] == ("not-applicable", "stand-in host") and "gpu-count" not in checks
    assert {k: checks[k][0] for k in ("rocm", "el-packages", "package-holds", "rdma-userspace")} == {
        "rocm": "ok", "el-packages": "ok", "package-holds": "ok", "rdma-userspace": "ok"}
    real = compare(fleet, {"mi300x-001": {**facts, "standin": []}}, hosts=["mi300x-001"]).nodes[0]
    assert {c.component: (c.status.value, c.found) for c in real.checks}["gpu-count"] == ("drift", "0")
