"""site.yml through the runner against real lab hosts (namespaced nodes with sshd).

The steps build on each other (first install, idempotence, tuple bump, drift repair,
missing version, unreachable host), so they share one lab and run in file order.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import yaml

from fleetspec.apply.ansible import HostEvent, PlaybookResult, run_playbook
from fleetspec.compile.ir import Fleet, StackTuple
from fleetspec.lab import Lab, StandInPackage, build_repo
from fleetspec.lab.fleet import LAB_MIRROR
from fleetspec.lab.fleet import repo_packages as lab_repo_packages
from fleetspec.lab.repo import evidence_standins, kernel_standins
from fleetspec.packages import packages_for
from fleetspec.render.ansible import render_ansible
from fleetspec.render.slurm import render_slurm
from tests.ansible.fleets import lab as lab_fleet
from tests.lab.conftest import lab_base, lab_mode  # noqa: F401 - fixture

pytestmark = pytest.mark.lab

NV = "gpu-h100-01"
AMD = "gpu-mi300-01"
NVIDIA = StackTuple("hopper-cu13", "nvidia", driver="580.95.05", cuda="13.0.2", cudnn="9.17.0", nccl="2.27.3",
                    dcgm="4.5.2")
ROCM = StackTuple("cdna3-rocm7", "amd", rocm="7.0.2", rccl="2.26.6")
BUMPED = replace(NVIDIA, nccl="2.28.3")
NEW_DRIVER = replace(BUMPED, driver="580.105.08")
MISSING = replace(BUMPED, nccl="2.99.1")  # never published in the lab repository
R590 = replace(BUMPED, driver="590.48.01")  # the branch renames every driver package
# The kernel DKMS builds for. Lab hosts are containers without a kernel of their own, so the
# NVIDIA host names one (fleetspec_kernel_release), as a node does for the kernel it boots next.
KERNEL, KERNEL_VERSION = "6.8.0-117-generic", "6.8.0-117.117"
DEBIAN_KERNEL = "6.1.0-26-amd64"  # a kernel without modules-extra (Debian's packaging)


def repo_packages(fleets: list[Fleet]) -> list[StandInPackage]:
    """The lab repository's families (pinned and newer builds, the vendors' dependency
    graph), plus a bare stand-in for every other pin the fleets use (Slurm, MariaDB)."""
    found = {(p.name, p.version): p for f in fleets for p in lab_repo_packages(f, evidence=False)}
    for url, packages in evidence_standins().items():  # what the vendors publish beside them
        for p in packages if url != "installed" else ():
            found.setdefault((p.name, p.version), p)
    standins = [found[k] for k in sorted(found)]
    have = set(found)
    extra: dict[tuple[str, str], StandInPackage] = {}
    for fleet in fleets:
        files = render_ansible(fleet)
        for rel, text in files.items():
            data = yaml.safe_load(text) if rel.suffix == ".yml" else None
            if not isinstance(data, dict) or rel.name == "inventory.yml":
                continue
            for key, value in data.items():
                if key.endswith("_packages") and isinstance(value, list):
                    for pin in value:
                        extra.setdefault((pin["name"], pin["version"]), StandInPackage(pin["name"], pin["version"]))
    extra[("mariadb-server", "1:10.11.6-0+deb12u1")] = StandInPackage("mariadb-server", "1:10.11.6-0+deb12u1")
    kernels = kernel_standins(KERNEL, KERNEL_VERSION) + kernel_standins(DEBIAN_KERNEL, "6.1.112-1", ubuntu=False)
    return standins + [p for k, p in sorted(extra.items()) if k not in have] + kernels


@dataclass
class Deployment:
    lab: Lab
    out: Path  # the render directory: ansible/ and slurm/ side by side
    secrets: Path

    def render(self, nvidia: StackTuple) -> Fleet:
        fleet = lab_fleet(nvidia, ROCM)
        files = {**render_ansible(fleet, mirror=LAB_MIRROR), **render_slurm(fleet)}
        for rel, text in files.items():
            (self.out / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.out / rel).write_text(text)
        return fleet

    def run(self, extra_hosts: dict[str, dict] | None = None, limit: list[str] | None = None,
            **extravars) -> tuple[PlaybookResult, list[HostEvent]]:
        """Run site.yml on the lab nodes (the lab's connection vars merged in as host vars)."""
        hosts = {**self.lab.ansible_vars(), **(extra_hosts or {})}
        hosts[NV] = {"fleetspec_kernel_release": KERNEL, **hosts[NV]}
        conn = self.out / "ansible" / "lab-hosts.yml"
        conn.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
        events: list[HostEvent] = []
        result = run_playbook(
            [self.out / "ansible" / "inventory.yml", conn],
            extravars={"fleetspec_munge_key_file": str(self.secrets / "munge.key"),
                       "fleetspec_slurmdbd_password": "lab-secret", **extravars},  # fmt: skip
            on_event=events.append,
            work_dir=self.out / "runs",
            limit=limit,
        )
        return result, events

    def ssh(self, node: str, *command: str) -> str:
        proc = subprocess.run(self.lab.ssh.argv(node, *command), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout


@pytest.fixture(scope="module")
def deployment(lab_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    fleets = [lab_fleet(s, ROCM) for s in (NVIDIA, BUMPED, NEW_DRIVER, R590)]
    repo = build_repo(repo_packages(fleets), tmp_path_factory.mktemp("repo"))
    secrets = tmp_path_factory.mktemp("secrets")
    (secrets / "munge.key").write_bytes(os.urandom(128))
    lab = Lab(tmp_path_factory.mktemp("lab"), lab_base, repo_dir=repo, mode=lab_mode())
    lab.up([NV, AMD])
    try:
        yield Deployment(lab, tmp_path_factory.mktemp("render"), secrets)
    finally:
        lab.down()


def infra(deployment: Deployment, node: str):
    import testinfra

    return testinfra.get_host(f"ssh://{node}", ssh_config=str(deployment.lab.ssh.config))


def pinned(fleet: Fleet, node: str) -> dict[str, str]:
    """The tuple pins node `node` must hold, from the same function the renderer used."""
    n = fleet.node(node)
    assert n is not None
    pins = packages_for(fleet.stack(n.stack), fleet.os, [n.gpu])
    nvswitch = n.gpu.count == 8 and n.gpu.vendor == "nvidia"
    return {p.name: p.version for p in pins if p.condition is None or (p.condition == "nvswitch" and nvswitch)}


def assert_held_at(deployment: Deployment, node: str, pins: dict[str, str]) -> None:
    host = infra(deployment, node)
    for name, version in pins.items():
        pkg = host.package(name)
        assert pkg.is_installed and pkg.version == version, f"{node}: {name} {pkg.version} != {version}"
        assert host.check_output("dpkg-query -W -f='${Status}' %s", name) == "hold ok installed", f"{node}: {name}"


def skipped(events: list[HostEvent], host: str) -> set[str]:
    return {e.task for e in events if e.host == host and e.status == "skipped"}


def test_first_run_installs_and_holds_every_pin(deployment: Deployment) -> None:
    fleet = deployment.render(NVIDIA)
    result, events = deployment.run()
    assert result.ok, result.hosts
    assert result.changed_hosts == sorted([NV, AMD])
    for node in (NV, AMD):
        assert_held_at(deployment, node, pinned(fleet, node))
        host = infra(deployment, node)
        assert host.file("/etc/slurm/slurm.conf").contains(f"NodeName={NV}") or host.file(
            "/etc/slurm/slurm.conf").contains("NodeName=")
        assert host.file("/etc/munge/munge.key").mode == 0o400
        collector = host.file("/usr/local/libexec/fleetspec/collector.py")
        assert collector.is_file and collector.mode == 0o755
        assert host.run("python3 -m py_compile /usr/local/libexec/fleetspec/collector.py").rc == 0
    assert_held_at(deployment, NV, {"slurm-smd-slurmctld": "25.11.8-1", "slurm-smd-slurmd": "25.11.8-1"})
    dbd = infra(deployment, NV).file("/etc/slurm/slurmdbd.conf")
    assert dbd.mode == 0o600 and dbd.contains("StoragePass=lab-secret")
    # No GPU, kernel module or NVSwitch in a stand-in: those tasks are skipped, not faked.
    assert {"Load the NVIDIA kernel module", "Start the persistence daemon",
            "Start the fabric manager on NVSwitch systems"} <= skipped(events, NV)  # fmt: skip
    assert "Load the amdgpu kernel module" in skipped(events, AMD)
    assert "rccl" in pinned(fleet, AMD)
    # DCGM (the stack's dcgm:) is pinned and held with the tuple (assert_held_at above) and
    # its host engine enabled; it starts only where the driver's module is loaded.
    assert pinned(fleet, NV)["datacenter-gpu-manager-4-cuda13"] == "1:4.5.2-1"
    assert deployment.ssh(NV, "systemctl", "is-enabled", "nvidia-dcgm").strip() == "enabled"
    assert "Start the DCGM host engine" in skipped(events, NV)
    # The InfiniBand fabric: both vendors' nodes get the RDMA user space from the archive.
    for node in (NV, AMD):
        for name in ("rdma-core", "libibverbs1", "ibverbs-providers"):
            assert infra(deployment, node).package(name).is_installed, (node, name)
    # Version locking: the rendered preferences are in place (the repository also holds
    # a newer build of every family, so without them the first install would have failed).
    pref = infra(deployment, NV).file("/etc/apt/preferences.d/fleetspec-stack.pref")
    assert pref.content_string == (deployment.out / "ansible/pins/hopper-cu13.pref").read_text()
    policy = deployment.ssh(NV, "apt-cache", "policy", "libnvidia-gl-580")
    assert "Candidate: 580.95.05-0ubuntu1" in policy and "580.96.05-0ubuntu1" in policy
    # Persistence mode: Ubuntu's unit says --no-persistence-mode; the drop-in replaces it.
    exec_start = deployment.ssh(NV, "systemctl", "show", "-p", "ExecStart", "--value", "nvidia-persistenced")
    assert "--persistence-mode" in exec_start and "--no-persistence-mode" not in exec_start
    assert "EXTRA_GROUPS=\"video render\"" in infra(deployment, AMD).file("/etc/adduser.conf").content_string
    # DKMS prerequisites for the named kernel: Ubuntu's headers (with their flavour-independent
    # half) and modules-extra (with linux-modules), at the kernel's version; the build link.
    kernel = {p: KERNEL_VERSION for p in (f"linux-headers-{KERNEL}", "linux-headers-6.8.0-117",
                                          f"linux-modules-extra-{KERNEL}", f"linux-modules-{KERNEL}")}
    for name, version in kernel.items():
        assert deployment.ssh(NV, "dpkg-query", "-W", "-f=${Version} ${db:Status-Abbrev}", name) == f"{version} ii "
    assert infra(deployment, NV).file(f"/lib/modules/{KERNEL}/build").linked_to == f"/usr/src/linux-headers-{KERNEL}"
    assert "Install the kernel's headers (and extra modules) for DKMS" in skipped(events, AMD)  # no driver pins


def test_second_run_changes_nothing(deployment: Deployment) -> None:
    result, _ = deployment.run()
    assert result.ok, result.hosts
    assert result.changed_hosts == [], {h: r.changed for h, r in result.hosts.items()}


def test_nccl_bump_upgrades_only_the_nvidia_group_and_reholds(deployment: Deployment) -> None:
    fleet = deployment.render(BUMPED)
    result, events = deployment.run()
    assert result.ok, result.hosts
    assert result.changed_hosts == [NV]
    assert_held_at(deployment, NV, pinned(fleet, NV))
    assert deployment.ssh(NV, "dpkg-query", "-W", "-f=${Version}", "libnccl2") == "2.28.3-1+cuda13.0"
    assert not any(e.task == "Record that the new driver needs a reboot" and e.status == "changed" for e in events)


def test_hand_made_drift_is_repaired(deployment: Deployment) -> None:
    deployment.ssh(NV, "apt-mark", "unhold", "libnccl2", "libnccl-dev")
    deployment.ssh(NV, "apt-get", "install", "-y", "-q", "--allow-downgrades",
                   "libnccl2=2.27.3-1+cuda13.0", "libnccl-dev=2.27.3-1+cuda13.0")  # fmt: skip
    assert deployment.ssh(NV, "dpkg-query", "-W", "-f=${Version} ${Status}", "libnccl2") == (
        "2.27.3-1+cuda13.0 install ok installed")
    result, _ = deployment.run()
    assert result.ok, result.hosts
    assert result.changed_hosts == [NV]
    assert_held_at(deployment, NV, {"libnccl2": "2.28.3-1+cuda13.0", "libnccl-dev": "2.28.3-1+cuda13.0"})


def test_driver_change_marks_a_reboot_and_the_reboot_waits_for_permission_and_a_kernel(deployment: Deployment) -> None:
    fleet = deployment.render(NEW_DRIVER)
    result, events = deployment.run(fleetspec_allow_reboot=True)
    assert result.ok, result.hosts
    assert_held_at(deployment, NV, pinned(fleet, NV))
    marker = deployment.ssh(NV, "cat", "/var/lib/fleetspec/reboot-required")
    assert "libnvidia-compute-580" in marker and "nvidia-driver-580-open" in marker
    # Allowed, but a container has no kernel module to replace: the handler is skipped.
    assert "Reboot for the new driver" in skipped(events, NV)
    assert infra(deployment, NV).check_output("cat /proc/1/comm") == "systemd"
    # A later apply that may reboot still sees the pending reboot (the marker stays).
    result, events = deployment.run(fleetspec_allow_reboot=True, limit=[NV])
    assert result.ok, result.hosts
    assert any(e.task == "Reboot for a driver change an earlier run installed" and e.status == "changed"
               for e in events)
    assert "Reboot for the new driver" in skipped(events, NV)


def test_a_rollback_downgrades_the_whole_driver_family(deployment: Deployment) -> None:
    fleet = deployment.render(BUMPED)  # back from 580.105.08 to 580.95.05
    result, _ = deployment.run()
    assert result.ok, result.hosts
    assert_held_at(deployment, NV, pinned(fleet, NV))
    # Packages nobody names on the command line came down with the metapackage.
    for companion in ("libnvidia-gl-580", "nvidia-kernel-common-580", "nvidia-kernel-source-580-open"):
        assert deployment.ssh(NV, "dpkg-query", "-W", "-f=${Version}", companion) == "580.95.05-0ubuntu1"
    assert "nvidia-driver-580-open" in deployment.ssh(NV, "cat", "/var/lib/fleetspec/reboot-required")


def test_missing_version_fails_that_host_naming_it_and_changes_nothing_there(deployment: Deployment) -> None:
    deployment.render(MISSING)
    result, _ = deployment.run()
    assert not result.ok
    assert result.failed_hosts == [NV]
    message = " ".join(result.hosts[NV].failures)
    assert "libnccl2" in message and "2.99.1-1+cuda13.0" in message
    assert result.hosts[AMD].failed is False
    assert deployment.ssh(NV, "dpkg-query", "-W", "-f=${Version}", "libnccl2") == "2.28.3-1+cuda13.0"


def test_unreachable_host_is_reported_and_the_others_continue(deployment: Deployment) -> None:
    deployment.render(NEW_DRIVER)
    # ProxyCommand=false: the connection fails inside ssh, no packet leaves the machine.
    ghost = {"gpu-ghost-01": {**deployment.lab.ansible_vars()[AMD], "ansible_host": "gpu-ghost-01",
                              "ansible_ssh_common_args": "-o ProxyCommand=false -o ConnectTimeout=5"}}  # fmt: skip
    result, _ = deployment.run(extra_hosts=ghost)
    assert not result.ok
    assert result.hosts["gpu-ghost-01"].unreachable
    assert result.failed_hosts == ["gpu-ghost-01"]
    assert not result.hosts[NV].failed and not result.hosts[AMD].failed


def test_limit_runs_one_wave_only(deployment: Deployment) -> None:
    result, events = deployment.run(limit=[AMD])
    assert result.ok, result.hosts
    assert set(result.hosts) == {AMD}
    assert {e.host for e in events} == {AMD}


def test_a_590_tuple_replaces_the_branched_packages_and_retires_their_holds(deployment: Deployment) -> None:
    fleet = deployment.render(R590)
    result, _ = deployment.run()
    assert result.ok, result.hosts
    assert_held_at(deployment, NV, pinned(fleet, NV))
    assert "nvidia-driver-open" in pinned(fleet, NV)
    left = infra(deployment, NV).run("dpkg-query -W -f='${Package} ${db:Status-Abbrev}\\n' '*580*'").stdout
    assert not [line for line in left.splitlines() if line.endswith("ii ")], left
    assert "libnvidia-compute-580" not in deployment.ssh(NV, "apt-mark", "showhold")
    # Last: going back from the 590 names to 580 is not rehearsed (how the real packages
    # would resolve that is not known here).


def test_kernel_headers_follow_the_named_kernel_and_modules_extra_only_where_packaged(deployment: Deployment) -> None:
    """A kernel without modules-extra (Debian's packaging): the headers are installed, the
    missing modules-extra is skipped, not an error. A kernel whose headers the sources do not
    carry stops that host before anything is installed, naming the package."""
    debian = {NV: {**deployment.lab.ansible_vars()[NV], "fleetspec_kernel_release": DEBIAN_KERNEL}}
    result, _ = deployment.run(extra_hosts=debian, limit=[NV])
    assert result.ok, result.hosts
    assert deployment.ssh(NV, "dpkg-query", "-W", "-f=${Version}", f"linux-headers-{DEBIAN_KERNEL}") == "6.1.112-1"
    assert infra(deployment, NV).run(f"dpkg-query -W linux-modules-extra-{DEBIAN_KERNEL}").rc != 0
    unknown = {NV: {**deployment.lab.ansible_vars()[NV], "fleetspec_kernel_release": "6.8.0-999-generic"}}
    result, _ = deployment.run(extra_hosts=unknown, limit=[NV])
    assert result.failed_hosts == [NV]
    assert "linux-headers-6.8.0-999-generic is not available" in " ".join(result.hosts[NV].failures)
