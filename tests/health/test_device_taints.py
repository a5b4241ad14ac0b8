"""DRA device taints: a quarantine-device fault on a DRA pool taints only that GPU.

``fleetspec health --remediate`` against the kubectl stand-in holding Nodes and the
ResourceSlices the NVIDIA DRA driver publishes (cmd/gpu-kubelet-plugin/deviceinfo.go: device
``gpu-<minor>``, attributes ``type``, ``uuid``, ``productName``, ``pcieBusID`` and the standard
``resource.kubernetes.io/pciBusID``; pool = the node). Every ResourceSlice stand-in and every
DeviceTaintRule written is checked against the Kubernetes schema for the spec's version.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.node_side import device_taints
from tests.conftest import require_shared
from tests.k8s_schema import CrdIndex, validate_object

from .nodes import FIXTURES, make_node
from .test_node_check import check

HERE = Path(__file__).resolve().parent
SPEC = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {name: dra-pool}
spec:
  os: ubuntu-24.04
  stacks:
    hopper: {driver: "580.95.05", cuda: "13.0.2", nccl: "2.28.3"}
  racks:
    - name: r01
      nodes:
        - {hosts: "k-[1-3]", gpu: {model: h200, count: 1}, stack: hopper, scheduler: kubernetes}
  kubernetes:
    version: "1.36"
    gpu_operator: {version: v26.7.0}
    queueing: kueue
    dra:
      nvidia: {version: "0.4.1"}
      gpus: true
  health: {interval: 60, min_healthy: 0}  # per-node behaviour: no blast-radius limit
"""
# Kernel-log lines of the fixture (real NVRM shape): Xid 48 (DBE) and 63 (row remap pending)
# on the GPU at 0000:5d:00, both quarantine-device; Xid 79 on 0000:18:00 (drain-reboot).
KMSG = (FIXTURES / "kmsg-xids.txt").read_text().splitlines()
DEVICE_FAULT = "\n".join(line for line in KMSG if "Xid (PCI:0000:5d:00): 48," in line
                         or "Xid (PCI:0000:5d:00): 63," in line) + "\n"
NODE_FAULT = "\n".join(line for line in KMSG if "Xid (PCI:0000:18:00): 79," in line) + "\n"


def resource_slice(node: str) -> dict:
    def gpu(minor: int, bus: str) -> dict:
        return {"name": f"gpu-{minor}", "attributes": {
            "type": {"string": "gpu"}, "uuid": {"string": f"GPU-1f1e2c3d-0000-4a5b-8c9d-00000000000{minor}"},
            "productName": {"string": "NVIDIA H200"}, "architecture": {"string": "Hopper"},
            "pcieBusID": {"string": bus}, "resource.kubernetes.io/pciBusID": {"string": bus}},
            "capacity": {"memory": {"value": "143771Mi"}}}

    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu.nvidia.com-x7k2p"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [gpu(0, "0000:5d:00.0")]}}


@pytest.fixture(scope="module")
def crd_index() -> CrdIndex:
    return CrdIndex.load(require_shared("crds"))


def test_api_version_per_kubernetes_minor() -> None:
    assert [device_taints.api_version(v) for v in ("1.32", "1.33", "1.35.2", "1.36", "1.37")] == [
        None, "resource.k8s.io/v1alpha3", "resource.k8s.io/v1alpha3", "resource.k8s.io/v1beta2", "resource.k8s.io/v1"]


@pytest.mark.parametrize("version", ["1.33", "1.35", "1.36", "1.37"])
def test_the_rule_validates_and_a_broken_one_fails(crd_index, version) -> None:
    rule = device_taints.device_taint_rule(device_taints.api_version(version), "k-1", "k-1", "gpu-0",
                                           "ecc-uncorrectable")
    assert validate_object(rule, crd_index, version) == []
    for breakage in (lambda r: r["spec"].pop("taint"),
                     lambda r: r["spec"]["deviceSelector"].update(deviceName="gpu-0"),
                     lambda r: r["spec"]["taint"].update(key=5)):
        broken = copy.deepcopy(rule)
        breakage(broken)
        assert validate_object(broken, crd_index, version), broken


@pytest.mark.parametrize("version", ["1.33", "1.34", "1.35", "1.36", "1.37"])
def test_the_rendered_effect_is_one_the_kubernetes_api_accepts(crd_index, version) -> None:
    """OpenAPI v2 has no enums: the effects come from DeviceTaint.Effect's documentation in
    that release's schema (1.33-1.34 NoSchedule, NoExecute; 1.35+ also None)."""
    from tests.k8s_schema import builtin_schema_version, documented_values

    api = device_taints.api_version(version) or "resource.k8s.io/v1alpha3"
    allowed = documented_values(builtin_schema_version(version)[0], api, "devicetaint", "effect")
    assert allowed == (("NoSchedule", "NoExecute") if version in ("1.33", "1.34") else ("None", "NoSchedule", "NoExecute"))
    rule = device_taints.device_taint_rule(api, "k-1", "k-1", "gpu-0", "ecc-uncorrectable")
    assert rule["spec"]["taint"]["effect"] == device_taints.EFFECT and device_taints.EFFECT in allowed
    assert validate_object(rule, crd_index, version) == []
    for effect in ("PreferNoSchedule", "noschedule", "") + (("None",) if "None" not in allowed else ()):
        broken = copy.deepcopy(rule)
        broken["spec"]["taint"]["effect"] = effect
        assert validate_object(broken, crd_index, version) == [
            f"spec.taint.effect: Unsupported value: {json.dumps(effect)}: supported values: "
            + ", ".join(json.dumps(v) for v in allowed)], effect
    if "None" in allowed:
        informational = copy.deepcopy(rule)
        informational["spec"]["taint"]["effect"] = "None"
        assert validate_object(informational, crd_index, version) == []


def test_the_resource_slice_stand_in_is_a_valid_resource_slice(crd_index) -> None:
    assert validate_object(resource_slice("k-1"), crd_index, "1.36") == []


def test_pci_addresses_match_across_kernel_log_nvidia_smi_and_dra() -> None:
    slices = [resource_slice("k-1")]
    assert device_taints.find_devices(slices, "k-1", "0000:5d:00") == [("k-1", "gpu-0")]  # the kernel log's form
    assert device_taints.find_devices(slices, "k-1", "00000000:5D:00.0") == [("k-1", "gpu-0")]  # nvidia-smi's
    assert device_taints.find_devices(slices, "k-2", "0000:5d:00") == []  # another node's slice
    assert device_taints.find_devices(slices, "k-1", "0000:9a:00") == []  # not published


# A GB200 compute tray: four GPUs, one PCI domain each, every one at bus 01 device 00 (its
# nvidia-smi lists 00000008:01:00.0, 00000009:01:00.0, 00000018:01:00.0, 00000019:01:00.0;
# GH200's one GPU is 00000009:01:00.0, e.g. NVIDIA/dcgm-exporter's DRA example). The DRA
# driver's resource.kubernetes.io/pciBusID is the sysfs name, a 4-digit domain (kubernetes
# staging/src/k8s.io/dynamic-resource-allocation/deviceattribute/pci.go, bdfRegexp).
GB200_BUSES = ("0008:01:00.0", "0009:01:00.0", "0018:01:00.0", "0019:01:00.0")


def gb200_slice(node: str) -> dict:
    item = resource_slice(node)
    template = item["spec"]["devices"][0]
    item["spec"]["devices"] = []
    for minor, bus in enumerate(GB200_BUSES):
        device = copy.deepcopy(template)
        device["name"] = f"gpu-{minor}"
        device["attributes"].update({"productName": {"string": "NVIDIA GB200"}, "architecture": {"string": "Blackwell"},
                                     "pcieBusID": {"string": bus}, "resource.kubernetes.io/pciBusID": {"string": bus}})
        item["spec"]["devices"].append(device)
    return item


def test_the_pci_domain_tells_a_gb200_trays_gpus_apart(crd_index) -> None:
    """Every GB200 GPU is at bus 01 device 00: only the domain names the faulty one. An
    address without a domain there matches four devices: no guess, the node path."""
    slices = [gb200_slice("gb-1")]
    assert validate_object(slices[0], crd_index, "1.36") == []
    assert device_taints.find_devices(slices, "gb-1", "0018:01:00") == [("gb-1", "gpu-2")]  # the kernel log's form
    assert device_taints.find_devices(slices, "gb-1", "00000019:01:00.0") == [("gb-1", "gpu-3")]  # nvidia-smi's, DCGM's
    assert device_taints.find_devices(slices, "gb-1", "00000008:01:00.0") == [("gb-1", "gpu-0")]
    assert device_taints.find_devices(slices, "gb-1", "0001:01:00") == []  # no GPU in that domain
    assert device_taints.find_devices(slices, "gb-1", "01:00") == []  # ambiguous: never a guess
    wanted, rest = device_taints.plan("resource.k8s.io/v1beta2", "gb-1", slices, [
        {"action": "quarantine-device", "device": "0019:01:00", "class": "ecc-uncorrectable"}])
    assert [r["spec"]["deviceSelector"]["device"] for r in wanted.values()] == ["gpu-3"] and rest == []


def mig_slice(node: str) -> dict:
    """An H200 node whose two GPUs run MIG (1g.18gb x2 + 2g.35gb + 3g.71gb) as the DRA driver
    publishes them: no full-GPU device, one device per instance named
    gpu-<minor>-mig-<profile without dots>-<GI profile ID>-<placement start>, type mig, the
    parent's UUID and standard PCI bus id (kubernetes-sigs/dra-driver-nvidia-gpu
    cmd/gpu-kubelet-plugin/mig.go: ToCanonicalName, CommonAttributesMig). Profile IDs and
    placements as `nvidia-smi mig -lgip` / `-lgipp` list them for the H100/H200 family (1g 19,
    2g 14, 3g 9)."""
    item = resource_slice(node)
    item["spec"]["devices"] = []
    for minor, bus in enumerate(("0000:5d:00.0", "0000:18:00.0")):
        parent = f"GPU-1f1e2c3d-0000-4a5b-8c9d-00000000000{minor}"
        for profile, profile_id, start in (("1g.18gb", 19, 0), ("1g.18gb", 19, 1), ("2g.35gb", 14, 2),
                                           ("3g.71gb", 9, 4)):
            item["spec"]["devices"].append({
                "name": f"gpu-{minor}-mig-{profile.replace('.', '')}-{profile_id}-{start}",
                "attributes": {"type": {"string": "mig"}, "parentUUID": {"string": parent},
                               "profile": {"string": profile}, "productName": {"string": "NVIDIA H200"},
                               "architecture": {"string": "Hopper"},
                               "resource.kubernetes.io/pciBusID": {"string": bus}}})
    return item


def test_a_fault_on_a_mig_gpu_taints_every_instance_of_that_gpu_only(crd_index) -> None:
    """A GPU in MIG mode is published as its instances only: before #46 a device fault there
    found no full GPU and cordoned the whole node. Now each instance of that GPU is tainted
    (the reset the fault needs takes them all), the other GPU's instances are not, and every
    rule passes the 1.36 schema."""
    slices = [mig_slice("k-1")]
    assert validate_object(slices[0], crd_index, "1.36") == []
    assert device_taints.find_devices(slices, "k-1", "0000:5d:00") == [
        ("k-1", "gpu-0-mig-1g18gb-19-0"), ("k-1", "gpu-0-mig-1g18gb-19-1"), ("k-1", "gpu-0-mig-2g35gb-14-2"),
        ("k-1", "gpu-0-mig-3g71gb-9-4")]
    faults = device_taints.npd_faults("quarantine-device ecc-uncorrectable: 0000:5d:00 Xid 48 on GPU-I 1 GPU-CI 0: "
                                      "DBE [devices: 0000:5d:00=ecc-uncorrectable]")
    wanted, rest = device_taints.plan("resource.k8s.io/v1beta2", "k-1", slices, faults)
    assert rest == []
    assert sorted(r["spec"]["deviceSelector"]["device"] for r in wanted.values()) == [
        "gpu-0-mig-1g18gb-19-0", "gpu-0-mig-1g18gb-19-1", "gpu-0-mig-2g35gb-14-2", "gpu-0-mig-3g71gb-9-4"]
    for rule in wanted.values():
        assert validate_object(rule, crd_index, "1.36") == []
        assert rule["spec"]["taint"] == {"key": device_taints.TAINT_KEY, "value": "ecc-uncorrectable",
                                         "effect": "NoSchedule"}
    # two parents answer an address without its domain only if they share bus and device: here they
    # do not, and an unknown parent UUID is never a device of ours
    orphan = copy.deepcopy(slices[0])
    for device in orphan["spec"]["devices"]:
        device["attributes"].pop("parentUUID")
    assert device_taints.find_devices([orphan], "k-1", "0000:5d:00") == []


def test_remediate_taints_the_device_not_the_node(crd_index, tmp_path, monkeypatch, kubectl_state, capsys) -> None:
    from fleetspec.pipeline import compile_text
    from fleetspec.render.health import node_config

    compiled = compile_text(SPEC)
    assert compiled.valid, [f.message for f in compiled.findings]
    config = tmp_path / "health.json"
    config.write_text(json.dumps(node_config(compiled.fleet)))
    verdicts = tmp_path / "verdicts"
    verdicts.mkdir()

    def verdict(name: str, kmsg: str, boot_id: str = "boot-1") -> None:
        root = make_node(tmp_path / name, kmsg="kmsg-healthy.txt", ib=None, boot_id=boot_id)
        (root / "dev" / "kmsg").write_text(kmsg)
        _, result = check(config, root, name, monkeypatch, capsys)
        (verdicts / f"{name}.json").write_text(json.dumps(result))

    verdict("k-1", DEVICE_FAULT)  # device faults only: a DeviceTaintRule, the node stays schedulable
    verdict("k-2", DEVICE_FAULT + NODE_FAULT)  # and a node fault: the rule and the node path
    verdict("k-3", DEVICE_FAULT)  # its ResourceSlice does not show the GPU: the node path
    state = kubectl_state
    other = resource_slice("k-3")
    other["spec"]["devices"][0]["attributes"]["pcieBusID"] = {"string": "0000:18:00.0"}
    other["spec"]["devices"][0]["attributes"]["resource.kubernetes.io/pciBusID"] = {"string": "0000:18:00.0"}
    state.write_text(json.dumps({"nodes": {"k-1": {"pods": [{"name": "trainer-0"}]},
                                           "k-2": {"pods": [{"name": "trainer-1"}]},
                                           "k-3": {"pods": [{"name": "trainer-2"}]}},
                                 "resourceslices": [resource_slice("k-1"), resource_slice("k-2"), other]}))
    spec = tmp_path / "fleet.yaml"
    spec.write_text(SPEC)
    result = CliRunner().invoke(app, ["health", str(spec), "--facts", str(verdicts), "--remediate"])
    out = json.loads(state.read_text())
    rules = out["devicetaintrules"]
    assert sorted(rules) == ["fleetspec-k-1-gpu-0", "fleetspec-k-2-gpu-0"], result.output
    for rule in rules.values():
        assert validate_object(rule, crd_index, "1.36") == []
        assert rule["spec"]["taint"]["effect"] == "NoSchedule"
    assert rules["fleetspec-k-1-gpu-0"]["spec"]["deviceSelector"] == {
        "driver": "gpu.nvidia.com", "pool": "k-1", "device": "gpu-0"}
    nodes = out["nodes"]
    assert not nodes["k-1"].get("unschedulable") and nodes["k-1"]["pods"] == [{"name": "trainer-0"}]
    assert nodes["k-2"]["unschedulable"] and nodes["k-2"]["pods"] == []
    assert nodes["k-2"]["annotations"]["fleetspec.io/drain-reason"].startswith("fleetspec-health: drain-reboot gpu-lost")
    assert nodes["k-3"]["unschedulable"]  # the device was not found: quarantine-device takes the node
    assert "device k-1/gpu-0 tainted fleetspec.io/gpu-fault=" in result.output

    # k-1's GPU is repaired (reset, a new boot): its rule goes, and nothing else changes
    verdict("k-1", "", boot_id="boot-2")
    state.write_text(json.dumps(dict(json.loads(state.read_text()), calls=[])))
    result = CliRunner().invoke(app, ["health", str(spec), "--facts", str(verdicts), "--remediate"])
    out = json.loads(state.read_text())
    assert "fleetspec-k-1-gpu-0" not in out["devicetaintrules"] and "fleetspec-k-2-gpu-0" in out["devicetaintrules"]
    assert "DeviceTaintRule fleetspec-k-1-gpu-0 deleted" in result.output
    assert not [c for c in out["calls"] if c[0] == "apply"]  # k-2's rule exists: not re-applied


def test_a_dcgm_fault_taints_only_its_device(crd_index, tmp_path, monkeypatch, kubectl_state, capsys) -> None:
    """dcgmi diag fails GPU 3 (DCGM's id) with an ISOLATE error; dcgmi discovery -l puts GPU 3
    at 00000000:4E:00.0; the DRA driver publishes that GPU as gpu-0 of k-1: only it is tainted."""
    from fleetspec.pipeline import compile_text
    from fleetspec.render.health import node_config

    from .nodes import set_tool_output

    text = SPEC.replace("health: {interval: 60,", "health: {interval: 60, checks: [kernel-log, gpu-memory, dcgm],")
    assert "dcgm" in text
    compiled = compile_text(text)
    assert compiled.valid, [f.message for f in compiled.findings]
    config = tmp_path / "health.json"
    config.write_text(json.dumps(node_config(compiled.fleet)))
    root = make_node(tmp_path / "k-1", kmsg="kmsg-healthy.txt", ib=None)
    set_tool_output(root, "dcgmi", FIXTURES / "dcgmi-diag-r1-fail.json", "diag -r 1 -j", rc=226)
    set_tool_output(root, "dcgmi", FIXTURES / "dcgmi-discovery-l.txt", "discovery -l")
    _, result = check(config, root, "k-1", monkeypatch, capsys)
    assert [(f["class"], f["device"]) for f in result["faults"]] == [("dcgm-diag-isolate", "GPU 3 00000000:4E:00.0")]
    verdicts = tmp_path / "verdicts"
    verdicts.mkdir()
    (verdicts / "k-1.json").write_text(json.dumps(result))
    published = resource_slice("k-1")
    published["spec"]["devices"][0]["attributes"]["pcieBusID"] = {"string": "0000:4e:00.0"}
    published["spec"]["devices"][0]["attributes"]["resource.kubernetes.io/pciBusID"] = {"string": "0000:4e:00.0"}
    kubectl_state.write_text(json.dumps({"nodes": {n: {"pods": [{"name": f"trainer-{n}"}]} for n in ("k-1", "k-2", "k-3")},
                                         "resourceslices": [published]}))
    spec = tmp_path / "fleet.yaml"
    spec.write_text(text)
    done = CliRunner().invoke(app, ["health", str(spec), "--facts", str(verdicts), "--remediate"])
    out = json.loads(kubectl_state.read_text())
    assert sorted(out.get("devicetaintrules", {})) == ["fleetspec-k-1-gpu-0"], done.output
    rule = out["devicetaintrules"]["fleetspec-k-1-gpu-0"]
    assert validate_object(rule, crd_index, "1.36") == []
    assert rule["spec"]["taint"]["value"] == "dcgm-diag-isolate"
    assert not out["nodes"]["k-1"].get("unschedulable")  # the node stays schedulable


def test_npd_device_list_parses_and_an_unaddressed_gpu_takes_the_node_path() -> None:
    """The in-cluster remediator reads the node check's `[devices: ...]`; a fault the check could
    not place at a PCI address (`-`) matches no ResourceSlice device, so it stays for the node."""
    faults = device_taints.npd_faults("quarantine-device ecc-uncorrectable: 0000:5d:00 Xid 48 (+1 more)"
                                      " [devices: 0000:5d:00=ecc-uncorrectable -=dcgm-diag-isolate]")
    assert faults == [{"action": "quarantine-device", "device": "0000:5d:00", "class": "ecc-uncorrectable"},
                      {"action": "quarantine-device", "device": "-", "class": "dcgm-diag-isolate"}]
    wanted, rest = device_taints.plan("resource.k8s.io/v1", "k-1", [resource_slice("k-1")], faults)
    assert list(wanted) == ["fleetspec-k-1-gpu-0"] and rest == faults[1:]
    assert device_taints.npd_faults("drain-reboot gpu-lost: 0000:18:00 Xid 79 [devices:]") == []
    assert device_taints.npd_faults("quarantine-device ecc-uncorrectable: 0000:5d:00 Xid 48") is None
