"""Lab nodes are real hosts: reachable over real SSH, on a private fabric, installing real
packages from the stand-in repo, and gone without a trace after down()."""

from __future__ import annotations

import json
import os
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from fleetspec.lab import Lab, LabNode, validate_name
from fleetspec.lab.repo import nccl_code

from .conftest import lab_mode

pytestmark = pytest.mark.lab

NCCL_OLD, NCCL_NEW = "2.27.3-1+cuda13.0", "2.28.3-1+cuda13.0"
NCCL_PROBE = (
    "import ctypes; v = ctypes.c_int(); "
    "rc = ctypes.CDLL('libnccl.so.2').ncclGetVersion(ctypes.byref(v)); print(rc, v.value)"
)


def ssh(lab: Lab, node: str, *command: str, check: bool = True) -> str:
    proc = subprocess.run(lab.ssh.argv(node, *command), capture_output=True, text=True, timeout=120)
    if check:
        assert proc.returncode == 0, f"{command} on {node}: rc={proc.returncode} {proc.stderr}"
    return proc.stdout


def test_node_names_are_dns_labels() -> None:
    assert validate_name("gpu-h200-01") == "gpu-h200-01"
    for bad in ("", "-a", "a-", "A", "a_b", "a" * 64, "a;rm -rf /", "a b"):
        with pytest.raises(ValueError):
            validate_name(bad)


def test_ssh_reaches_each_node_as_itself(lab: Lab, lab_nodes: list[LabNode]) -> None:
    assert lab.status() == {n.name: "running" for n in lab_nodes}
    for node in lab_nodes:
        assert ssh(lab, node.name, "hostname").strip() == node.name


def test_nodes_reach_each_other_over_the_fabric(lab: Lab, lab_nodes: list[LabNode]) -> None:
    a, b = lab_nodes
    ssh(lab, a.name, "ping", "-c", "1", "-W", "3", b.name)
    ssh(lab, b.name, "nc", "-z", "-w", "3", a.address, "22")
    assert f"{b.address}\t{b.name}" in ssh(lab, a.name, "cat", "/etc/hosts")


def test_lab_addresses_never_appear_on_the_host() -> None:
    host_addrs = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    assert "10.251." not in host_addrs


def test_apt_installs_pinned_standin_and_library_reports_it(lab: Lab, lab_nodes: list[LabNode]) -> None:
    node = lab_nodes[0].name
    ssh(lab, node, "apt-get", "update", "-q")
    policy = ssh(lab, node, "apt-cache", "policy", "libnccl2")
    assert NCCL_OLD in policy and NCCL_NEW in policy
    for version in (NCCL_NEW, NCCL_OLD):  # install, then downgrade
        ssh(lab, node, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q",
            "--allow-downgrades", f"libnccl2={version}")
        assert ssh(lab, node, "dpkg-query", "-W", "-f=${Version}", "libnccl2") == version
        rc, code = ssh(lab, node, "python3", "-c", NCCL_PROBE).split()
        assert (int(rc), int(code)) == (0, nccl_code(version.split("-")[0]))


def test_nvidia_smi_standin_reports_driver_and_no_gpus(lab: Lab, lab_nodes: list[LabNode]) -> None:
    node = lab_nodes[1].name
    ssh(lab, node, "apt-get", "update", "-q")
    ssh(lab, node, "env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q",
        "nvidia-driver-580=580.95.05-0ubuntu1")
    assert ssh(lab, node, "dpkg-query", "-W", "-f=${Version}", "libnvidia-compute-580") == "580.95.05-0ubuntu1"
    assert ssh(lab, node, "nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader").strip() == "580.95.05"
    log = ET.fromstring(ssh(lab, node, "nvidia-smi", "-q", "-x"))
    assert log.findtext("driver_version") == "580.95.05" and log.findtext("attached_gpus") == "0"
    assert log.find("gpu") is None
    desc = ssh(lab, node, "dpkg-query", "-W", "-f=${Description}", "nvidia-driver-580")
    assert "fleetspec test stand-in: not the vendor package" in desc


def test_testinfra_over_the_lab_ssh_config(lab: Lab, lab_nodes: list[LabNode]) -> None:
    import testinfra  # the test extra installs it
    a, b = (testinfra.get_host(f"ssh://{n.name}", ssh_config=str(lab.ssh.config)) for n in lab_nodes)
    assert a.file("/etc/hostname").content_string == f"{lab_nodes[0].name}\n"
    assert a.file("/etc/apt/sources.list.d/fleetspec-lab.list").content_string.startswith("deb [trusted=yes] file:")
    assert a.process.get(pid=1).comm == ("systemd" if lab_mode() == "nspawn" else "sshd")
    if lab_mode() == "nspawn":
        assert a.service("ssh").is_running
    # Each node has its own root filesystem: b never sees what is installed on a.
    a.run_test("env DEBIAN_FRONTEND=noninteractive apt-get install -y -q rocm-core=7.0.2.70002-56~24.04")
    assert a.package("rocm-core").is_installed
    assert a.file("/opt/rocm/.info/version").content_string == "7.0.2-56\n"
    assert not b.package("rocm-core").is_installed


def test_ansible_reaches_nodes_with_the_lab_vars(lab: Lab, tmp_path: Path) -> None:
    import ansible  # noqa: F401 - the test extra installs it
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": lab.ansible_vars()}}))
    env = {**os.environ, "ANSIBLE_HOME": str(tmp_path / ".ansible"), "ANSIBLE_HOST_KEY_CHECKING": "False",
           "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run(["ansible", "all", "-i", str(inventory), "-m", "ansible.builtin.command",
                           "-a", "hostname"], capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in lab.ansible_vars():
        assert f"{name} | CHANGED | rc=0 >>\n{name}" in proc.stdout


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            mounts = (proc / "mountinfo").read_text()
        except OSError:
            continue
        if state != "Z" and (text in cmdline or text in mounts):
            found.append(f"{proc.name}: {cmdline[:120]}")
    return found


def test_down_leaves_no_process_mount_netns_or_cgroup(lab_base: Path, lab_repo: Path, tmp_path: Path) -> None:
    lab = Lab(tmp_path / "lab", lab_base, repo_dir=lab_repo, mode=lab_mode())
    nodes = lab.up(["solo-1", "solo-2"])
    try:
        ssh(lab, "solo-1", "true")  # leaves an ssh ControlMaster behind, which down() must stop
        namespaces = {lab.fabric_ns, *(n.ns for n in nodes)}
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert all(ns in listed for ns in namespaces)
        assert _processes_mentioning(str(lab.work_dir))
    finally:
        lab.down()
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not [ns for ns in namespaces if ns in listed]
    assert not [n.pid for n in nodes if Path(f"/proc/{n.pid}").exists()]
    assert not _processes_mentioning(str(lab.work_dir))
    assert not _processes_mentioning(str(lab.ssh.control_dir))
    assert not [cg for n in nodes for cg in n.cgroups if Path(cg).exists()]
    assert not [n.machine for n in nodes if Path("/run/systemd/nspawn/propagate", n.machine).exists()]
    assert lab.status() == {} and not (lab.work_dir / "lab.json").exists()
