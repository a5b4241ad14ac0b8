"""MIG on Kubernetes (#46): the GPU Operator's MIG manager gets each node group's geometry
(the nvidia.com/mig.config label, fleetspec's mig-parted ConfigMap for an explicit one), and
Kueue / Volcano count the instances by the resource names the mixed strategy exposes.
Checked against the real chart values and CRDs (tests/data/crds)."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from fleetspec.pipeline import compile_text
from fleetspec.render.kubernetes import kubernetes_resources
from tests.conftest import require_shared
from tests.k8s_schema import CrdIndex, validate_object

from .test_manifests_valid import _rendered_objects

SPEC = """\
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {name: inference}
spec:
  os: ubuntu-24.04
  stacks:
    cu13: {driver: "580.173.02", cuda: "13.0.2", nccl: "2.28.3"}
  racks:
    - name: r01
      nodes:
        - hosts: h200-inf-[01-02]
          gpu: {model: h200, count: 8, mig: {1g.18gb: 2, 2g.35gb: 1, 3g.71gb: 1}}
          stack: cu13
          scheduler: kubernetes
        - hosts: b200-inf-[01-02]
          gpu: {model: b200, count: 8, mig: all-1g.23gb}
          stack: cu13
          scheduler: kubernetes
        - hosts: a100-train-[01-02]
          gpu: {model: a100, count: 8}
          stack: cu13
          scheduler: kubernetes
  kubernetes:
    version: "1.34"
    gpu_operator: {version: v26.7.0, driver: operator}
    queueing: kueue
    tenants:
      - name: serving
        namespaces: [serving]
        quota: {nvidia-hopper: 4, nvidia-blackwell: 16}
      - name: training
        namespaces: [training]
        quota: {nvidia-ampere: 8}
"""


@pytest.fixture(scope="module")
def fleet():
    result = compile_text(SPEC, "inference.yaml")
    assert result.valid, [f.message for f in result.findings]
    return result.fleet


def test_each_mig_node_is_labelled_with_its_geometry(fleet):
    labels = {n.hostname: n.labels for n in kubernetes_resources(fleet).node_labels}
    # An explicit geometry in the fleet: fleetspec's ConfigMap names every geometry by its instances.
    assert labels["h200-inf-01"]["nvidia.com/mig.config"] == "fleetspec-2x1g.18gb-1x2g.35gb-1x3g.71gb"
    assert labels["b200-inf-02"]["nvidia.com/mig.config"] == "fleetspec-7x1g.23gb"
    assert "nvidia.com/mig.config" not in labels["a100-train-01"]


def test_the_mig_manager_reads_fleetspecs_configmap(fleet):
    layer = kubernetes_resources(fleet)
    release = next(r for r in layer.releases if r.name == "gpu-operator")
    assert release.values["mig"] == {"strategy": "mixed"}
    assert release.values["migManager"]["config"] == {"name": "fleetspec-mig-parted", "default": "all-disabled"}
    cm = next(m for m in layer.manifests if m.kind == "ConfigMap" and m.name == "fleetspec-mig-parted")
    assert cm.key in release.depends_on and cm.namespace == release.namespace
    config = yaml.safe_load(cm.body["data"]["config.yaml"])
    assert config["version"] == "v1"
    assert config["mig-configs"]["fleetspec-2x1g.18gb-1x2g.35gb-1x3g.71gb"] == [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}}]
    assert config["mig-configs"]["all-disabled"] == [{"devices": "all", "mig-enabled": False}]


def test_the_mig_values_are_the_charts_and_the_clusterpolicys(fleet):
    """mig.strategy and migManager.config.default are keys of the chart's values.yaml;
    migManager.config.name is the one its comment documents ("To use an existing ConfigMap:
    Set name=... with create=false") and the ClusterPolicy CRD carries (spec.migManager.config.name)."""
    values = yaml.safe_load(require_shared("crds/nvidia-gpu-operator/values.yaml").read_text())
    assert values["mig"]["strategy"] in ("single", "mixed") and "default" in values["migManager"]["config"]
    crd = yaml.safe_load(require_shared("crds/nvidia-gpu-operator/nvidia.com_clusterpolicies.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert {"name", "default"} <= set(spec["migManager"]["properties"]["config"]["properties"])
    assert "mixed" in spec["mig"]["properties"]["strategy"]["enum"]


def test_kueue_counts_instances_by_mig_resource(fleet):
    layer = kubernetes_resources(fleet)
    queues = {m.name: m.body["spec"] for m in layer.manifests if m.kind == "ClusterQueue"}
    serving = [g for q in queues.values() for g in q["resourceGroups"]
               if any(f["name"] == "nvidia-hopper" for f in g["flavors"])]
    assert serving[0]["coveredResources"] == ["nvidia.com/mig-1g.18gb", "nvidia.com/mig-2g.35gb",
                                              "nvidia.com/mig-3g.71gb"]
    # 4 GPUs of quota: their instances, 2 + 1 + 1 of each GPU.
    assert serving[0]["flavors"][0]["resources"] == [
        {"name": "nvidia.com/mig-1g.18gb", "nominalQuota": 8}, {"name": "nvidia.com/mig-2g.35gb", "nominalQuota": 4},
        {"name": "nvidia.com/mig-3g.71gb", "nominalQuota": 4}]
    one_g = [f for q in queues.values() for g in q["resourceGroups"] for f in g["flavors"]
             if f["name"] == "nvidia-blackwell"]
    assert one_g[0]["resources"] == [{"name": "nvidia.com/mig-1g.23gb", "nominalQuota": 16 * 7}]
    whole = [f for q in queues.values() for g in q["resourceGroups"] for f in g["flavors"]
             if f["name"] == "nvidia-ampere"]
    assert whole[0]["resources"] == [{"name": "nvidia.com/gpu", "nominalQuota": 8}]


def test_volcano_counts_instances_too(fleet):
    volcano = dataclasses.replace(fleet, kubernetes=dataclasses.replace(
        fleet.kubernetes, queueing="volcano", gang="volcano", quota_owners=("volcano",)))
    queues = {m.name: m.body["spec"] for m in kubernetes_resources(volcano).manifests if m.kind == "Queue"}
    serving = [q for q in queues.values() if "nvidia.com/mig-1g.23gb" in q["deserved"]]
    assert serving[0]["deserved"] == {"nvidia.com/mig-1g.23gb": 16 * 7}
    assert serving[0]["capability"] == {"nvidia.com/mig-1g.23gb": 2 * 8 * 7}  # the partition's 16 GPUs


def test_every_rendered_object_passes_the_real_crds(fleet, crd_index: CrdIndex):
    for obj in _rendered_objects(fleet):
        assert validate_object(obj, crd_index, fleet.kubernetes.version) == [], obj["kind"]


def test_named_geometries_alone_use_the_operators_defaults():
    text = SPEC.replace("mig: {1g.18gb: 2, 2g.35gb: 1, 3g.71gb: 1}", "mig: all-balanced")
    result = compile_text(text, "inference.yaml")
    assert result.valid, [f.message for f in result.findings]
    layer = kubernetes_resources(result.fleet)
    release = next(r for r in layer.releases if r.name == "gpu-operator")
    assert "migManager" not in release.values and release.values["mig"] == {"strategy": "mixed"}
    assert not any(m.kind == "ConfigMap" and m.name == "fleetspec-mig-parted" for m in layer.manifests)
    labels = {n.hostname: n.labels for n in layer.node_labels}
    assert labels["h200-inf-02"]["nvidia.com/mig.config"] == "all-balanced"


def test_a_partition_mixing_geometries_is_a_located_error():
    text = SPEC.replace("model: a100, count: 8}", "model: h100-sxm, count: 8}")
    result = compile_text(text, "inference.yaml")
    found = [f for f in result.findings if f.rule == "mig-geometry"]
    assert found and "mixes MIG geometries" in found[0].message and found[0].path[-2:] == ("gpu", "mig")


SHARED = SPEC.replace("""          gpu: {model: a100, count: 8}
""", """          gpu: {model: a100, count: 8, sharing: {time_slicing: 4}}
""")


def test_time_sliced_gpus_get_the_device_plugin_config_and_count_replicas():
    result = compile_text(SHARED, "inference.yaml")
    assert result.valid, [f.message for f in result.findings]
    layer = kubernetes_resources(result.fleet)
    labels = {n.hostname: n.labels for n in layer.node_labels}
    assert labels["a100-train-01"]["nvidia.com/device-plugin.config"] == "time-sliced-4"
    assert "nvidia.com/device-plugin.config" not in labels["h200-inf-01"]
    release = next(r for r in layer.releases if r.name == "gpu-operator")
    assert release.values["devicePlugin"] == {"config": {"name": "fleetspec-device-plugin", "default": "default"}}
    defaults = yaml.safe_load(require_shared("crds/nvidia-gpu-operator/values.yaml").read_text())
    assert {"name", "default"} <= set(defaults["devicePlugin"]["config"])  # the chart's own keys
    cm = next(m for m in layer.manifests if m.kind == "ConfigMap" and m.name == "fleetspec-device-plugin")
    assert cm.key in release.depends_on
    assert yaml.safe_load(cm.body["data"]["time-sliced-4"]) == {
        "version": "v1", "flags": {"migStrategy": "mixed"},
        "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}}
    queues = {m.name: m.body["spec"] for m in layer.manifests if m.kind == "ClusterQueue"}
    ampere = [f for q in queues.values() for g in q["resourceGroups"] for f in g["flavors"]
              if f["name"] == "nvidia-ampere"]
    assert ampere[0]["resources"] == [{"name": "nvidia.com/gpu", "nominalQuota": 8 * 4}]


def test_time_slicing_rendered_objects_pass_the_real_crds(crd_index: CrdIndex):
    fleet = compile_text(SHARED, "inference.yaml").fleet
    for obj in _rendered_objects(fleet):
        assert validate_object(obj, crd_index, fleet.kubernetes.version) == [], obj["kind"]


@pytest.mark.parametrize(("old", "new", "says"), [
    ("scheduler: kubernetes\n  kubernetes:", "scheduler: slurm\n  slurm: {version: \"25.11.8\", controllers: ctl-01}\n"
     "  kubernetes:", "Slurm shares GPUs with other_gres"),
    ("model: a100, count: 8, sharing: {time_slicing: 4}}",
     "model: a100, count: 8, sharing: {time_slicing: 4}, mig: all-balanced}", "the instances are the sharing"),
    ("    gpu_operator: {version: v26.7.0, driver: operator}\n",
     "    gpu_operator: {version: v26.7.0, driver: operator}\n    dra:\n      nvidia: {version: \"0.4.1\"}\n"
     "      gpus: true\n", "the device plugin that time-slices them does not run there"),
])
def test_sharing_where_it_cannot_apply_is_a_located_error(old, new, says):
    text = SHARED.replace(old, new)
    result = compile_text(text, "inference.yaml")
    found = [f for f in result.findings if f.rule == "mig-geometry"]
    assert found and says in found[0].message and found[0].path[-2:] == ("gpu", "sharing"), \
        [f.message for f in result.findings]


def test_the_inference_example_renders_objects_the_crds_accept(crd_index: CrdIndex):
    from tests.kubernetes.fleets import compiled

    fleet = compiled("inference")
    objs = _rendered_objects(fleet)
    assert {"fleetspec-mig-parted", "fleetspec-device-plugin"} <= {o["metadata"]["name"] for o in objs}
    for obj in objs:
        assert validate_object(obj, crd_index, fleet.kubernetes.version) == [], obj["kind"]


# ----------------------------------------------------------------------------- KAI

KAI = SPEC.replace("queueing: kueue", "queueing: kai\n    gang: kai").replace(
    "quota: {nvidia-hopper: 4, nvidia-blackwell: 16}",
    "quota: {nvidia-hopper: 4, nvidia-blackwell: 16}\n        limit: {nvidia-hopper: 6}")


@pytest.fixture(scope="module")
def kai_queues():
    result = compile_text(KAI, "inference.yaml")
    assert result.valid, [f.message for f in result.findings]
    return {m.name: m.body for m in kubernetes_resources(result.fleet).manifests if m.kind == "Queue"}


def test_kai_counts_mig_instances_by_their_compute_slices(kai_queues):
    """KAI's gpu quota counts nvidia.com/mig-<N>g.<M>gb as N GPUs (catalog/mig.py kai_gpus):
    one H200 of 2 x 1g.18gb + 2g.35gb + 3g.71gb is 7, not 1 (a board) nor 4 (instances)."""
    hopper = kai_queues["serving-nvidia-hopper"]["spec"]["resources"]["gpu"]
    assert hopper == {"quota": 4 * 7, "limit": 6 * 7, "overQuotaWeight": 1}
    # all-1g.23gb: 7 instances of one slice each per B200.
    assert kai_queues["serving-nvidia-blackwell"]["spec"]["resources"]["gpu"]["quota"] == 16 * 7
    # The partition's parent: its 16 GPUs' slices.
    assert kai_queues["inference-nvidia-hopper"]["spec"]["resources"]["gpu"] == {
        "quota": 16 * 7, "limit": 16 * 7, "overQuotaWeight": 1}
    # Whole GPUs stay GPUs.
    assert kai_queues["training-nvidia-ampere"]["spec"]["resources"]["gpu"]["quota"] == 8


def test_kai_counts_a_geometry_that_leaves_slices_idle():
    """all-3g.71gb: two 3-slice instances, 6 of KAI's GPUs per H200 (the seventh slice is idle)."""
    text = KAI.replace("mig: {1g.18gb: 2, 2g.35gb: 1, 3g.71gb: 1}", "mig: all-3g.71gb")
    result = compile_text(text, "inference.yaml")
    assert result.valid, [f.message for f in result.findings]
    queues = {m.name: m.body for m in kubernetes_resources(result.fleet).manifests if m.kind == "Queue"}
    assert queues["serving-nvidia-hopper"]["spec"]["resources"]["gpu"]["quota"] == 4 * 6


def test_kai_counts_time_sliced_replicas():
    text = KAI.replace("gpu: {model: a100, count: 8}", "gpu: {model: a100, count: 8, sharing: {time_slicing: 4}}")
    result = compile_text(text, "inference.yaml")
    assert result.valid, [f.message for f in result.findings]
    queues = {m.name: m.body for m in kubernetes_resources(result.fleet).manifests if m.kind == "Queue"}
    assert queues["training-nvidia-ampere"]["spec"]["resources"]["gpu"]["quota"] == 8 * 4


def test_kai_queues_pass_the_real_queue_crd(kai_queues, crd_index: CrdIndex):
    for body in kai_queues.values():
        assert validate_object(body, crd_index, "1.34") == [], body["metadata"]["name"]


def test_kai_refuses_quota_on_a_profile_it_counts_as_zero():
    text = KAI.replace("mig: {1g.18gb: 2, 2g.35gb: 1, 3g.71gb: 1}", "mig: {1g.18gb+me: 1, 1g.18gb: 5}")
    result = compile_text(text, "inference.yaml")
    found = [f for f in result.findings if f.rule == "quota-engine-coverage"]
    assert found and "1g.18gb+me" in found[0].message and "0 GPUs" in found[0].message
    assert found[0].path[-2:] == ("quota", "nvidia-hopper")
    # The same geometry under Kueue counts nvidia.com/mig-1g.18gb+me itself: no refusal.
    kueue = compile_text(text.replace("queueing: kai\n    gang: kai", "queueing: kueue"), "inference.yaml")
    assert not [f for f in kueue.findings if f.rule == "quota-engine-coverage"]


# ----------------------------------------------------------------------------- DRA

DRA = SPEC.replace('    gpu_operator: {version: v26.7.0, driver: operator}\n',
                   '    gpu_operator: {version: v26.7.0, driver: operator}\n'
                   '    dra:\n      nvidia: {version: "0.4.1"}\n      gpus: true\n')


@pytest.fixture(scope="module")
def dra_fleet():
    result = compile_text(DRA, "inference.yaml")
    assert result.valid, [f.message for f in result.findings]
    return result.fleet


def _device(profile: str | None, product: str = "NVIDIA H200", arch: str = "Hopper") -> dict:
    """A device of the driver's ResourceSlice: a MIG instance with the attributes
    CommonAttributesMig publishes (kubernetes-sigs/dra-driver-nvidia-gpu
    cmd/gpu-kubelet-plugin/mig.go: type mig, profile, the parent's productName and
    architecture), or a whole GPU (deviceinfo.go GpuInfo.Attributes: type gpu)."""
    attrs = {"productName": product, "architecture": arch, "brand": "Nvidia"}
    attrs.update({"type": "mig", "profile": profile} if profile else {"type": "gpu"})
    return {"driver": "gpu.nvidia.com", "attributes": {"gpu.nvidia.com": attrs}}


def _cel(expression: str, device: dict) -> bool:
    import celpy

    env = celpy.Environment()
    return bool(env.program(env.compile(expression)).evaluate({"device": celpy.json_to_cel(device)}))


def test_dra_device_classes_select_one_profiles_instances(dra_fleet):
    objs = {m.name: m.body for m in kubernetes_resources(dra_fleet).manifests if m.kind == "DeviceClass"}
    assert {"nvidia-hopper-1g.18gb", "nvidia-hopper-2g.35gb", "nvidia-hopper-3g.71gb",
            "nvidia-blackwell-1g.23gb", "nvidia-ampere"} == set(objs)
    one_g = objs["nvidia-hopper-1g.18gb"]["spec"]["selectors"][0]["cel"]["expression"]
    assert _cel(one_g, _device("1g.18gb"))
    assert not _cel(one_g, _device("3g.71gb"))          # another profile: its own class
    assert not _cel(one_g, _device(None))               # a whole H200 is never an instance
    assert not _cel(one_g, _device("1g.18gb", "NVIDIA B200", "Blackwell"))
    b200 = objs["nvidia-blackwell-1g.23gb"]["spec"]["selectors"][0]["cel"]["expression"]
    assert _cel(b200, _device("1g.23gb", "NVIDIA B200", "Blackwell"))
    whole = objs["nvidia-ampere"]["spec"]["selectors"][0]["cel"]["expression"]
    assert _cel(whole, _device(None, "NVIDIA A100-SXM4-80GB", "Ampere"))
    assert not _cel(whole, _device("1g.10gb", "NVIDIA A100-SXM4-80GB", "Ampere"))


def test_kueue_counts_dra_claims_as_instances(dra_fleet):
    """Each profile's DeviceClass maps to nvidia.com/mig-<profile>, the resource the MIG
    partition's ClusterQueue counts instances in; a claim for one instance is one of it."""
    from fleetspec.render.kubernetes.layer import kueue_configuration

    config = yaml.safe_load(kueue_configuration(dra_fleet))
    assert config["resources"]["deviceClassMappings"] == [
        {"name": "nvidia.com/gpu", "deviceClassNames": ["nvidia-ampere"]},
        {"name": "nvidia.com/mig-1g.18gb", "deviceClassNames": ["nvidia-hopper-1g.18gb"]},
        {"name": "nvidia.com/mig-1g.23gb", "deviceClassNames": ["nvidia-blackwell-1g.23gb"]},
        {"name": "nvidia.com/mig-2g.35gb", "deviceClassNames": ["nvidia-hopper-2g.35gb"]},
        {"name": "nvidia.com/mig-3g.71gb", "deviceClassNames": ["nvidia-hopper-3g.71gb"]}]
    layer = kubernetes_resources(dra_fleet)
    covered = {r for m in layer.manifests if m.kind == "ClusterQueue"
               for g in m.body["spec"]["resourceGroups"] for r in g["coveredResources"]}
    assert {m["name"] for m in config["resources"]["deviceClassMappings"]} <= covered
    templates = {(m.namespace, m.name): m.body for m in layer.manifests if m.kind == "ResourceClaimTemplate"}
    request = templates[("serving", "nvidia-hopper-2g.35gb")]["spec"]["spec"]["devices"]["requests"][0]
    assert request["exactly"] == {"deviceClassName": "nvidia-hopper-2g.35gb",
                                  "allocationMode": "ExactCount", "count": 1}
    whole = templates[("training", "nvidia-ampere-node-gpus")]["spec"]["spec"]["devices"]["requests"][0]
    assert whole["exactly"]["count"] == 8


def test_dra_plugin_waits_for_the_applied_geometry(dra_fleet):
    release = next(r for r in kubernetes_resources(dra_fleet).releases if r.name == "dra-driver-nvidia-gpu")
    terms = release.values["kubeletPlugin"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {"matchExpressions": [{"key": "fleetspec.io/partition", "operator": "In", "values": ["nvidia-ampere"]}]},
        {"matchExpressions": [
            {"key": "fleetspec.io/partition", "operator": "In", "values": ["nvidia-blackwell", "nvidia-hopper"]},
            {"key": "nvidia.com/mig.config.state", "operator": "In", "values": ["success"]}]}]
    values = yaml.safe_load(require_shared("crds/nvidia-dra-driver-gpu/values.yaml").read_text())
    assert "affinity" in values["kubeletPlugin"]  # the chart's own key


def test_dra_mig_objects_pass_the_real_schemas(dra_fleet, crd_index: CrdIndex):
    objs = _rendered_objects(dra_fleet)
    assert {"DeviceClass", "ResourceClaimTemplate"} <= {o["kind"] for o in objs}
    for obj in objs:
        assert validate_object(obj, crd_index, dra_fleet.kubernetes.version) == [], obj["metadata"]["name"]


def test_a_media_extension_profile_is_counted_under_the_device_plugins_name(crd_index: CrdIndex):
    """The device plugin advertises 1g.18gb+me as nvidia.com/mig-1g.18gb.me (a resource name
    is a DNS subdomain: k8s-device-plugin internal/rm/rm.go replaces + with .); quotas and
    DRA mappings use that name, the DRA class selects the driver's profile 1g.18gb+me."""
    geometry = "mig: {1g.18gb+me: 1, 1g.18gb: 5}"
    kueue = compile_text(SPEC.replace("mig: {1g.18gb: 2, 2g.35gb: 1, 3g.71gb: 1}", geometry), "me.yaml")
    assert kueue.valid, [f.message for f in kueue.findings]
    flavors = [f for m in kubernetes_resources(kueue.fleet).manifests if m.kind == "ClusterQueue"
               for g in m.body["spec"]["resourceGroups"] for f in g["flavors"] if f["name"] == "nvidia-hopper"]
    assert flavors[0]["resources"] == [{"name": "nvidia.com/mig-1g.18gb", "nominalQuota": 4 * 5},
                                       {"name": "nvidia.com/mig-1g.18gb.me", "nominalQuota": 4}]
    dra = compile_text(DRA.replace("mig: {1g.18gb: 2, 2g.35gb: 1, 3g.71gb: 1}", geometry), "me.yaml")
    assert dra.valid, [f.message for f in dra.findings]
    from fleetspec.render.kubernetes.layer import kueue_configuration

    mappings = yaml.safe_load(kueue_configuration(dra.fleet))["resources"]["deviceClassMappings"]
    assert {"name": "nvidia.com/mig-1g.18gb.me", "deviceClassNames": ["nvidia-hopper-1g.18gb.me"]} in mappings
    classes = {m.name: m.body for m in kubernetes_resources(dra.fleet).manifests if m.kind == "DeviceClass"}
    me = classes["nvidia-hopper-1g.18gb.me"]["spec"]["selectors"][0]["cel"]["expression"]
    assert _cel(me, _device("1g.18gb+me")) and not _cel(me, _device("1g.18gb"))
    for obj in _rendered_objects(dra.fleet):
        assert validate_object(obj, crd_index, dra.fleet.kubernetes.version) == [], obj["metadata"]["name"]


@pytest.mark.parametrize("engine,scheduler", [("kai", "kai-scheduler"), ("volcano", "volcano")])
def test_a_pod_asking_for_instances_must_name_the_quota_engine(engine, scheduler):
    """Volcano and KAI see only pods that name them; a pod asking for nvidia.com/mig-<profile>
    on the default scheduler would take instances outside quota. The admission gate refuses
    it as it refuses one asking for nvidia.com/gpu."""
    from .test_workload_plane import _cel as cel
    from .test_workload_plane import _pod

    text = SPEC.replace("queueing: kueue", f"queueing: {engine}\n    gang: {engine}")
    result = compile_text(text, "inference.yaml")
    assert result.valid, [f.message for f in result.findings]
    policy = next(m.body for m in kubernetes_resources(result.fleet).manifests
                  if m.kind == "ValidatingAdmissionPolicy" and m.name == f"fleetspec-gpu-pods-use-{scheduler}")
    expr = policy["spec"]["validations"][0]["expression"]
    for resource in ("nvidia.com/mig-1g.18gb", "nvidia.com/mig-3g.71gb", "nvidia.com/gpu"):
        assert not cel(expr, object=_pod("default-scheduler", {resource: 1})), resource
        assert cel(expr, object=_pod(scheduler, {resource: 1})), resource
    assert cel(expr, object=_pod("default-scheduler", {"cpu": "2"}))


@pytest.mark.parametrize("text", [DRA, KAI], ids=["dra", "kai"])
def test_mig_chart_values_use_real_chart_keys(text):
    """Every Helm value the MIG fleets render (the DRA driver's gated affinity, KAI's, the GPU
    Operator's MIG keys) is a key of the chart's own values.yaml at the pinned tag."""
    from .test_chart_values import CHART_VALUES, _chart_defaults, unknown_paths

    fleet = compile_text(text, "inference.yaml").fleet
    checked = set()
    for release in kubernetes_resources(fleet).releases:
        if release.name in CHART_VALUES:
            defaults = _chart_defaults(release.name)
            assert unknown_paths(release.values, defaults, defaults) == [], release.name
            checked.add(release.name)
    assert "gpu-operator" in checked and ({"dra-driver-nvidia-gpu", "kai-scheduler"} & checked)
