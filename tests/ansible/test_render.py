"""The rendered inventory and group_vars: groups, pins, sources; deterministic."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest
import yaml

from fleetspec.compile.ir import PackageSource
from fleetspec.pipeline import compile_file, compile_text
from fleetspec.render.ansible import render_ansible
from tests.conftest import EXAMPLES


@pytest.fixture(scope="module")
def museum_files() -> dict[PurePosixPath, str]:
    fleet = compile_file(EXAMPLES / "museum.yaml").fleet
    assert fleet is not None
    return render_ansible(fleet)


def load(files: dict, rel: str):
    return yaml.safe_load(files[PurePosixPath("ansible") / rel])


def test_museum_matches_golden(museum_files, golden) -> None:
    golden.check_tree("ansible/museum", {p.relative_to("ansible"): t for p, t in museum_files.items()})


def test_render_is_deterministic_and_matches_the_hand_built_ir(museum_files) -> None:
    again = render_ansible(compile_file(EXAMPLES / "museum.yaml").fleet)
    assert again == museum_files


def test_inventory_groups_by_partition_vendor_generation_rack_stack_and_role(museum_files) -> None:
    groups = load(museum_files, "inventory.yml")["all"]["children"]
    hosts = {g: set(v["hosts"]) for g, v in groups.items()}
    assert hosts["partition_nvidia_hopper"] >= {"h100-001", "h200-004"}
    assert hosts["partition_debug"] == {"h100-001", "h100-002"}
    assert "mi300x-01" in hosts["vendor_amd"] and "mi300x-01" not in hosts["vendor_nvidia"]
    assert hosts["generation_cdna4"] == {"mi355x-01", "mi355x-02"}
    assert hosts["rack_r07"] == {f"gb200-r07-{i:02d}" for i in range(1, 19)}
    assert hosts["stack_hopper_cu13"] == {f"h{m}-00{i}" for m in (100, 200) for i in range(1, 5)}
    assert hosts["slurm_controller"] == {"ctl-01", "ctl-02"} and hosts["slurmdbd"] == {"db-01"}
    assert "b200-01" in hosts["k8s_node"] and "b200-01" not in hosts["slurm_node"]
    assert "h200-001" in hosts["nvswitch"] and "gb200-r07-01" in hosts["imex"]


def test_stack_group_vars_carry_the_pins_and_the_vendor_sources(museum_files) -> None:
    hopper = load(museum_files, "group_vars/stack_hopper_cu13.yml")
    assert hopper["fleetspec_stack"]["nccl"] == "2.28.3"
    pins = {p["name"]: p["version"] for p in hopper["fleetspec_packages"]}
    assert pins["libnccl2"] == "2.28.3-1+cuda13.0" and pins["libcudnn9-cuda-13"] == "9.17.0.29-1"
    assert [s["uri"] for s in hopper["fleetspec_apt_sources"]] == [
        "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/{{ fleetspec_cuda_repo_arch }}/"
    ]
    # The repository path follows the node's CPU: NVIDIA calls its Arm server packages "sbsa".
    assert load(museum_files, "group_vars/all.yml")["fleetspec_cuda_repo_arch"] == "x86_64"
    assert load(museum_files, "group_vars/arch_arm64.yml")["fleetspec_cuda_repo_arch"] == "sbsa"
    groups = load(museum_files, "inventory.yml")["all"]["children"]
    assert set(groups["arch_arm64"]["hosts"]) == {f"gb200-r07-{i:02d}" for i in range(1, 19)}
    rocm = load(museum_files, "group_vars/stack_cdna3_rocm7.yml")
    assert rocm["fleetspec_apt_sources"][0]["uri"] == "https://repo.radeon.com/rocm/apt/7.0.2"


def test_kubernetes_nodes_with_the_operator_driver_install_nothing_on_the_host(museum_files) -> None:
    assert load(museum_files, "group_vars/k8s_node.yml") == {"fleetspec_components": []}
    assert "nccl" in load(museum_files, "group_vars/slurm_node.yml")["fleetspec_components"]


def test_mirror_replaces_vendor_sources_through_all_vars() -> None:
    mirror = PackageSource("https://mirror.example.internal/gpu", suite="noble", components="main",
                           key_url="https://mirror.example.internal/key.asc")
    files = render_ansible(compile_file(EXAMPLES / "museum.yaml").fleet, mirror=mirror)
    assert load(files, "group_vars/all.yml")["fleetspec_package_mirror"] == {
        "uri": "https://mirror.example.internal/gpu", "suite": "noble", "components": "main",
        "key_url": "https://mirror.example.internal/key.asc", "trusted": False}


def test_the_specs_mirror_reaches_all_vars() -> None:
    text = (EXAMPLES / "quickstart.yaml").read_text().replace(
        "  slurm:\n", "  packages:\n    mirror: {uri: \"file:/srv/repo\", trusted: true}\n  slurm:\n", 1)
    fleet = compile_text(text, "f.yaml").fleet
    assert fleet is not None
    assert load(render_ansible(fleet), "group_vars/all.yml")["fleetspec_package_mirror"] == {
        "uri": "file:/srv/repo", "suite": "./", "components": "", "key_url": None, "trusted": True}


def test_rendered_tree_is_a_valid_ansible_inventory(museum_files, tmp_path: Path) -> None:
    import json
    import shutil
    import subprocess

    for rel, text in museum_files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    exe = shutil.which("ansible-inventory")
    assert exe, "ansible-core is required"
    out = subprocess.run([exe, "-i", str(tmp_path / "ansible/inventory.yml"), "--list"], capture_output=True,
                         text=True, check=True, env={"ANSIBLE_HOME": str(tmp_path / ".ah"), "PATH": "/usr/bin:/bin:"
                         + str(Path(exe).parent)})
    data = json.loads(out.stdout)
    hostvars = data["_meta"]["hostvars"]
    h100 = hostvars["h100-001"]
    assert h100["fleetspec_stack"]["name"] == "hopper-cu13" and h100["fleetspec_nvswitch"] is True
    assert hostvars["b200-01"]["fleetspec_components"] == []
    assert hostvars["ctl-01"]["fleetspec_packages"] == []


def test_slinky_hosts_are_kubernetes_nodes_to_the_node_layer() -> None:
    """Slinky runs slurmd in pods: Slurm's hosts are kubelet nodes, in k8s_node, whose GPU
    operators own the driver; before, they were in no group and got no driver at all."""
    import dataclasses

    fleet = compile_file(EXAMPLES / "museum.yaml").fleet
    slinky = dataclasses.replace(fleet, slurm=dataclasses.replace(fleet.slurm, mode="slinky"))
    hosts = {g: set(v["hosts"]) for g, v in load(render_ansible(slinky), "inventory.yml")["all"]["children"].items()}
    assert "slurm_node" not in hosts and "slurm_controller" not in hosts
    assert {"h100-001", "a100-01", "mi300x-01", "b200-01"} <= hosts["k8s_node"]
    # Slinky's slurmdbd pod needs the accounting host's database, installed as in native mode.
    assert hosts["slurmdbd"] == {"db-01"}


def test_host_driver_per_vendor_on_kubernetes_nodes() -> None:
    """Each vendor's operator decides for its own nodes: AMD with driver: host gets amdgpu
    from Ansible while the NVIDIA GPU Operator still owns the NVIDIA driver."""
    import dataclasses

    fleet = compile_file(EXAMPLES / "museum.yaml").fleet
    amd_host = dataclasses.replace(fleet, kubernetes=dataclasses.replace(fleet.kubernetes, amd_driver="host"))
    assert load(render_ansible(amd_host), "group_vars/k8s_node.yml") == {"fleetspec_components": ["amdgpu"]}


def test_rdma_user_space_goes_to_gpu_nodes_only_on_an_infiniband_or_roce_fabric(museum_files) -> None:
    """#24 item 11: NCCL/RCCL reach InfiniBand/RoCE through libibverbs and a provider (mlx5):
    without them they fall back to sockets. libibverbs1 only recommends ibverbs-providers and
    the role installs without recommends, so the provider is named."""
    wanted = ["rdma-core", "libibverbs1", "ibverbs-providers"]
    assert load(museum_files, "group_vars/stack_ampere_cu12.yml")["fleetspec_rdma_userspace"] == wanted  # infiniband
    text = (EXAMPLES / "museum.yaml").read_text()
    assert "type: infiniband" in text
    for fabric, expected in (("roce", wanted), ("ethernet", None)):
        fleet = compile_text(text.replace("type: infiniband", f"type: {fabric}"), "museum.yaml").fleet
        assert fleet is not None and fleet.fabric is not None and fleet.fabric.type == fabric
        group = load(render_ansible(fleet), "group_vars/stack_ampere_cu12.yml")
        assert group.get("fleetspec_rdma_userspace") == expected, fabric
