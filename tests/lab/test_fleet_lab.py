"""`fleetspec lab`: the quickstart fleet on this machine (real hosts, real Slurm, real apt).

Pure parts first (which hosts, which pins, the restricted Slurm files, the overlay), then
one lab brought up through the CLI and checked the way apply and verify will use it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from fleetspec.lab.base import REPO_MOUNT
from fleetspec.lab.cli import lab_app
from fleetspec.lab.fleet import (
    LAB_MIRROR,
    LabHandle,
    LabSetupError,
    env_snippet,
    fleet_pins,
    lab_slurm_files,
    overlay_inventory,
    repo_packages,
    select_hosts,
)
from fleetspec.lab.repo import pin_standins
from fleetspec.lab.slurm import SlurmUnavailable, ensure_slurm, process_start_time, restrict_conf
from fleetspec.pipeline import compile_file
from fleetspec.render.ansible import mirror_var, render_ansible
from tests.lab.conftest import lab_unavailable

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"
NCCL = "2.28.3-1+cuda13.0"
BUMPED_NCCL = "2.28.9-1+cuda13.0"


@pytest.fixture(scope="module")
def fleet():
    compiled = compile_file(QUICKSTART)
    assert compiled.fleet is not None and compiled.valid
    return compiled.fleet


# ---------------------------------------------------------------- pure


def test_selection_is_the_first_nodes_of_each_partition_plus_the_controller(fleet) -> None:
    two = select_hosts(fleet, 2)
    assert two.hosts == ("h100-001", "h100-002", "ctl-01")
    assert two.slurm_nodes == ("h100-001", "h100-002")
    three = select_hosts(fleet, 3)  # debug has only two nodes; nvidia-hopper gives a third
    assert three.nodes == ("h100-001", "h100-002", "h100-003")
    with pytest.raises(LabSetupError):
        select_hosts(fleet, 0)


def test_restricted_slurm_conf_names_only_the_lab_nodes(fleet) -> None:
    files = {p.name: t for p, t in lab_slurm_files(fleet, ("h100-001", "h100-005")).items()}
    conf = files["slurm.conf"]
    assert re.findall(r"^NodeName=(\S+)", conf, re.M) == ["h100-001", "h100-005"]
    partitions = dict(re.findall(r"^PartitionName=(\S+) (.*)$", conf, re.M))
    assert partitions["nvidia-hopper"].startswith("Nodes=h100-[001,005] Default=YES ")
    assert "MaxTime=2-00:00:00" in partitions["nvidia-hopper"]
    assert partitions["debug"].startswith("Nodes=h100-001 ") and "MaxTime=00:30:00" in partitions["debug"]
    assert "NodeName=h100-[001,005] Name=gpu Type=h100 File=/dev/nvidia[0-3] Cores=0-55" in files["gres.conf"]
    assert "NodeName=h100-[001,005] Name=gpu Type=h100 File=/dev/nvidia[4-7] Cores=56-111" in files["gres.conf"]
    assert "ClusterName=quickstart" in conf and "SelectType=select/cons_tres" in conf  # the rest is kept


def test_restriction_drops_empty_partitions_and_switches_up_the_tree() -> None:
    text = (
        "SwitchName=leaf-01 Nodes=n[01-02]\nSwitchName=leaf-02 Nodes=n[03-04]\n"
        "SwitchName=spine-01 Switches=leaf-[01-02]\nSwitchName=spine-02 Switches=leaf-02\n"
        "SwitchName=core Switches=spine-[01-02]\n"
        "PartitionName=a Nodes=n[01-04] Default=YES\nPartitionName=b Nodes=n[03-04]\n"
        "PartitionName=all Nodes=ALL\nNodeName=DEFAULT CPUs=2\nNodeName=n[01-04] CPUs=4\n# NodeName=n03 comment\n"
    )
    assert restrict_conf(text, ["n02"]) == (
        "SwitchName=leaf-01 Nodes=n02\nSwitchName=spine-01 Switches=leaf-01\nSwitchName=core Switches=spine-01\n"
        "PartitionName=a Nodes=n02 Default=YES\nPartitionName=all Nodes=ALL\nNodeName=DEFAULT CPUs=2\n"
        "NodeName=n02 CPUs=4\n# NodeName=n03 comment\n"
    )


def test_lab_repository_carries_every_rendered_pin_and_the_vendors_dependency_graph(fleet) -> None:
    rendered: set[tuple[str, str]] = set()
    for path, text in render_ansible(fleet).items():
        data = yaml.safe_load(text) if path.suffix == ".yml" else None
        if path.name != "inventory.yml" and isinstance(data, dict):
            rendered |= {(p["name"], p["version"]) for k, v in data.items() if k.endswith("_packages") for p in v}
    assert set(fleet_pins(fleet)) == rendered
    standins = {(p.name, p.version): p for p in repo_packages(fleet)}
    assert rendered <= set(standins)
    utils = standins[("nvidia-utils-580", "580.95.05-0ubuntu1")]
    assert "/usr/bin/nvidia-smi" in utils.files
    meta = standins[("nvidia-driver-580-open", "580.95.05-0ubuntu1")]
    # The real metapackage's shape: every driver package at (= its own version).
    assert {"libnvidia-gl-580 (= 580.95.05-0ubuntu1)", "nvidia-kernel-common-580 (= 580.95.05-0ubuntu1)",
            "nvidia-dkms-580-open (= 580.95.05-0ubuntu1)"} <= set(meta.depends)  # fmt: skip
    # A newer build of the branch beside the pin, as NVIDIA's repository carries every build.
    assert ("nvidia-driver-580-open", "580.96.05-0ubuntu1") in standins
    assert "/usr/include/x86_64-linux-gnu/cudnn_version_v9.h" in standins[
        ("libcudnn9-headers-cuda-13", "9.17.0.29-1")].files
    assert standins[("libnccl-dev", NCCL)].depends == (f"libnccl2 (= {NCCL})",)
    unit = standins[("nvidia-persistenced", "580.95.05-0ubuntu1")].files[
        "/usr/lib/systemd/system/nvidia-persistenced.service"]
    assert "--no-persistence-mode" in unit  # Ubuntu's unit: persistence stays off until overridden


def test_rocm_pins_get_rocm_content_for_their_own_distribution() -> None:
    pins = [("rocm-core", "7.0.2.70002-56~22.04"), ("rocm", "7.0.2.70002-56~22.04"), ("rccl", "2.26.6.70002-56~22.04")]
    got = {p.name: p for p in pin_standins(pins)}
    assert got["rocm-core"].files["/opt/rocm-7.0.2/.info/version"] == "7.0.2-56\n"
    assert got["rccl"].depends == got["rocm"].depends == ("rocm-core (= 7.0.2.70002-56~22.04)",)
    assert {p.version for p in got.values()} == {"7.0.2.70002-56~22.04", "2.26.6.70002-56~22.04"}


def test_overlay_mirror_wins_over_the_rendered_group_vars(fleet, tmp_path: Path) -> None:
    """Checked with Ansible itself: the rendered all.yml sets the mirror to null."""
    for rel, text in render_ansible(fleet).items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    overlay = tmp_path / "overlay.yml"
    overlay.write_text(yaml.safe_dump(overlay_inventory({"h100-001": {"ansible_user": "root"}})))
    done = subprocess.run(["ansible-inventory", "-i", str(tmp_path / "ansible/inventory.yml"), "-i", str(overlay),
                           "--host", "h100-001"], capture_output=True, text=True, check=True)  # fmt: skip
    host = yaml.safe_load(done.stdout)
    assert host["fleetspec_package_mirror"] == {"uri": f"file:{REPO_MOUNT}", "suite": "./", "components": "",
                                                "key_url": None, "trusted": True} == mirror_var(LAB_MIRROR)
    assert host["fleetspec_stack"]["nccl"] == "2.28.3"  # the rendered vars still apply
    assert env_snippet(Path("/x y/slurm.conf")) == 'export SLURM_CONF="/x y/slurm.conf"\n'


# ---------------------------------------------------------------- a real lab


def test_status_and_down_without_a_lab_say_so(cli: typer.Typer, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["lab", "status", "--dir", str(tmp_path)])
    assert result.exit_code == 1 and "no lab at" in result.output, result.output
    for _ in range(2):  # down is idempotent: nothing there is nothing to take down
        result = CliRunner().invoke(cli, ["lab", "down", "--dir", str(tmp_path)])
        assert result.exit_code == 0 and "no lab here, nothing to take down" in result.output, result.output
    assert tmp_path.exists()  # the directory is the user's; down without a lab touches nothing


def real(test):
    """Marks a test that starts lab hosts and Slurm daemons (`-m "not lab"` leaves them out)."""
    return pytest.mark.lab(pytest.mark.slurm(test))


@pytest.fixture(scope="module")
def cli() -> typer.Typer:
    app = typer.Typer()
    app.add_typer(lab_app, name="lab")
    return app


def _invoke(cli: typer.Typer, *args: str) -> str:
    result = CliRunner().invoke(cli, ["lab", *args])
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


@pytest.fixture(scope="module")
def up(cli: typer.Typer, lab_base: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    """`lab up quickstart.yaml --nodes 2` in a copy of the spec; `lab down` at the end if a test failed first."""
    try:
        ensure_slurm()
    except (SlurmUnavailable, subprocess.CalledProcessError, OSError) as exc:
        lab_unavailable(str(exc))
    spec = tmp_path_factory.mktemp("fleet") / "quickstart.yaml"
    shutil.copy(QUICKSTART, spec)
    _invoke(cli, "up", str(spec), "--nodes", "2")
    lab_dir = spec.parent / ".fleetspec" / "lab"
    handle = LabHandle.load(lab_dir)
    try:
        yield handle
    finally:
        if (lab_dir / "lab.json").exists():
            _invoke(cli, "down", "--dir", str(lab_dir))


@real
def test_up_starts_the_selected_hosts_and_a_slurm_node_per_gpu_host(up: LabHandle, cli: typer.Typer) -> None:
    assert up.hosts == ("h100-001", "h100-002", "ctl-01")
    assert up.lab().status() == {h: "running" for h in up.hosts}
    assert up.sinfo_states() == {"h100-001": ("idle", ""), "h100-002": ("idle", "")}
    done = subprocess.run(["sinfo", "-h", "-o", "%R %N %T"], env={**os.environ, "SLURM_CONF": str(up.slurm_conf)},
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert sorted(done.stdout.splitlines()) == ["debug h100-[001-002] idle", "nvidia-hopper h100-[001-002] idle"]
    assert up.env_file.read_text() == f'export SLURM_CONF="{up.slurm_conf}"\n'
    status = _invoke(cli, "status", "--dir", str(up.dir))
    assert re.search(r"h100-001\s.*running\s.*idle", status) and "slurmctld: running" in status


@real
def test_drain_through_scontrol_shows_in_sinfo(up: LabHandle) -> None:
    drain = up.scontrol("update", "nodename=h100-001", "state=drain", "reason=test")
    assert drain.returncode == 0, drain.stderr
    assert up.sinfo_states()["h100-001"] == ("drained", "test")
    assert up.sinfo_states()["h100-002"] == ("idle", "")
    assert up.scontrol("update", "nodename=h100-001", "state=resume").returncode == 0
    # Resume marks the node not responding ("idle*") until slurmctld's next ping answers.
    end = time.monotonic() + 15
    while up.sinfo_states()["h100-001"] != ("idle", "") and time.monotonic() < end:
        time.sleep(0.1)
    assert up.sinfo_states()["h100-001"] == ("idle", "")


@real
def test_ansible_reaches_every_host_through_the_overlay(up: LabHandle) -> None:
    done = subprocess.run(["ansible", "all", "-i", str(up.inventory_overlay), "-m", "ping"],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(re.findall(r"^(\S+) \| SUCCESS", done.stdout, re.M)) == sorted(up.hosts)


def _policy(up: LabHandle, host: str) -> str:
    done = subprocess.run(up.ssh_argv(host, "sh", "-c", "apt-get update -q >/dev/null && apt-cache policy libnccl2"),
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


def _versions(policy: str) -> set[str]:
    """The versions in `apt-cache policy`'s version table (lines '     VERSION PRIORITY')."""
    table = policy.split("Version table:", 1)[-1].splitlines()
    return {line.split()[-2] for line in table if line.startswith("     ") and not line.startswith("      ")}


@real
def test_hosts_see_the_pinned_versions_and_a_refreshed_repository(up: LabHandle, cli: typer.Typer) -> None:
    # Like NVIDIA's CUDA repository, the lab's carries a newer build beside every pin: the
    # candidate without the rendered apt preferences is that newer build, never the pin
    # (the stack_packages role installs ansible/pins/<stack>.pref; tests/ansible covers it).
    for host in ("h100-001", "h100-002"):
        versions = _versions(_policy(up, host))
        assert NCCL in versions and any(v > NCCL for v in versions), versions
    up.spec.write_text(up.spec.read_text().replace('nccl: "2.28.3"', 'nccl: "2.28.9"'))
    assert "repository refreshed" in _invoke(cli, "up", str(up.spec), "--nodes", "2")
    versions = _versions(_policy(up, "h100-001"))
    assert BUMPED_NCCL in versions and NCCL not in versions, versions  # the old pin is gone
    other = CliRunner().invoke(cli, ["lab", "up", str(up.spec), "--nodes", "3"])
    assert other.exit_code == 1 and "fleetspec lab down" in other.output  # a different lab: refused


def _ours(handle: LabHandle) -> list[str]:
    """Anything of this lab still alive: recorded pids, namespaces, cgroups, mounts anywhere."""
    left = [f"pid {pid}" for group in handle.pids.values() for pid in group.values() if process_start_time(pid)]
    tag = handle.lab().fabric_ns.rsplit("-", 1)[0]  # fsl-<lab id>
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    left += [f"netns {line}" for line in netns.splitlines() if line.startswith(tag + "-")]
    cgroups = Path("/sys/fs/cgroup")
    left += [f"cgroup {p}" for p in (*cgroups.glob(f"{tag}-*"), *cgroups.glob(f"*/{tag}-*"))]
    for mountinfo in Path("/proc").glob("[0-9]*/mountinfo"):
        try:
            if str(handle.dir) in mountinfo.read_text():
                left.append(f"mount in {mountinfo}")
        except OSError:
            continue
    return left


@real
def test_down_leaves_nothing_behind(up: LabHandle, cli: typer.Typer) -> None:
    before = {x.split()[0] for x in _ours(up)}
    assert before == {"pid", "netns", "cgroup", "mount"} if up.mode == "nspawn" else {"pid", "netns", "mount"}
    _invoke(cli, "down", "--dir", str(up.dir))
    assert _ours(up) == []
    assert not up.dir.exists()
    assert "nothing to take down" in _invoke(cli, "down", "--dir", str(up.dir))  # twice is fine
