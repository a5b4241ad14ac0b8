"""KAI Scheduler, KubeRay, DRA and the workload operators: what renders, that it passes the
upstream CRDs (KAI, KubeRay, the NVIDIA DRA driver) and kubernetes-validate, the order the
Pulumi program declares it in, and that Kueue manages only what the stack installs."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import yaml

from fleetspec.pipeline import compile_text
from fleetspec.render.kubernetes import kubernetes_resources, render_kubernetes
from fleetspec.render.kubernetes.layer import kueue_configuration
from tests.k8s_schema import validate_object

from . import fleets
from .test_pulumi_program import run_program  # noqa: F401  (the fixture)


def _objs(fleet, kind: str) -> dict[str, dict]:
    return {m.name if m.namespace is None else f"{m.namespace}/{m.name}": dict(m.body)
            for m in kubernetes_resources(fleet).manifests if m.kind == kind}


def _releases(fleet):
    return {r.name: r for r in kubernetes_resources(fleet).releases}


def _examples(fleet) -> list[dict]:
    return [d for p, text in render_kubernetes(fleet).items() if p.parts[1] == "examples"
            for d in yaml.safe_load_all(text) if d]


# ----------------------------------------------------------------------------- KAI


def test_kai_queue_tree_from_the_tenants() -> None:
    museum = fleets.museum()
    fleet = fleets.kai(museum)
    queues = _objs(fleet, "Queue")
    parts = {p.name: p for p in fleet.partitions}
    # A parent per NVIDIA partition that a tenant holds, capped at the partition's GPUs...
    for p in ("nvidia-blackwell", "nvidia-blackwell-arm64"):
        parent = queues[f"museum-{p}"]["spec"]
        assert "parentQueue" not in parent
        assert parent["resources"]["gpu"] == {"quota": parts[p].gpus, "limit": parts[p].gpus,
                                              "overQuotaWeight": 1}
        assert parent["resources"]["cpu"] == {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    # ...and a child per tenant with quota on it, named like the Kueue ClusterQueue.
    for t in fleet.kubernetes.tenants:
        for p, gpus in t.quota:
            child = queues[f"{t.name}-{p}"]
            assert child["metadata"]["labels"]["fleetspec.io/partition"] == p
            assert child["spec"]["parentQueue"] == f"museum-{p}"
            assert child["spec"]["resources"]["gpu"] == {"quota": gpus, "limit": -1,
                                                         "overQuotaWeight": 1}
    # KAI counts nvidia.com/gpu only: no queue on the AMD partition.
    assert not any("amd" in name for name in queues)
    assert set(queues) == {"museum-nvidia-blackwell", "museum-nvidia-blackwell-arm64",
                           "research-nvidia-blackwell-arm64", "inference-nvidia-blackwell",
                           "inference-nvidia-blackwell-arm64"}


def test_kai_weight_and_limit_come_from_the_spec(crd_index) -> None:
    fleet = fleets.kai(fleets.museum())
    tenants = tuple(dataclasses.replace(t, over_quota_weight=3,
                                        limit=(("nvidia-blackwell-arm64", 70),))
                    if t.name == "research" else t for t in fleet.kubernetes.tenants)
    fleet = dataclasses.replace(fleet, kubernetes=dataclasses.replace(fleet.kubernetes,
                                                                      tenants=tenants))
    gpu = _objs(fleet, "Queue")["research-nvidia-blackwell-arm64"]["spec"]["resources"]["gpu"]
    assert gpu == {"quota": 64, "limit": 70, "overQuotaWeight": 3}
    # The same cap under Kueue: borrow at most limit - quota from the cohort.
    kueue = dataclasses.replace(fleet, kubernetes=dataclasses.replace(
        fleet.kubernetes, queueing="kueue", gang="kueue", quota_owners=("kueue",)))
    cq = _objs(kueue, "ClusterQueue")["research-nvidia-blackwell-arm64"]["spec"]
    assert cq["resourceGroups"][0]["flavors"][0]["resources"][0] == {
        "name": "nvidia.com/gpu", "nominalQuota": 64, "borrowingLimit": 6}
    assert "borrowingLimit" not in _objs(kueue, "ClusterQueue")[
        "inference-nvidia-blackwell"]["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0]
    assert validate_object(_objs(kueue, "ClusterQueue")["research-nvidia-blackwell-arm64"],
                           crd_index, "1.36") == []
    # And under Volcano: capability = the limit instead of the whole partition.
    volcano = fleets.volcano(fleet)
    queues = _objs(volcano, "Queue")
    assert queues["research-nvidia-blackwell-arm64"]["spec"]["capability"] == {"nvidia.com/gpu": 70}
    assert queues["inference-nvidia-blackwell"]["spec"]["capability"] == {"nvidia.com/gpu": 32}
    assert validate_object(queues["research-nvidia-blackwell-arm64"], crd_index, "1.36") == []


def test_kai_shards_release_and_topology() -> None:
    fleet = fleets.kai(fleets.museum())
    kai = _releases(fleet)["kai-scheduler"]
    assert kai.chart == "oci://ghcr.io/kai-scheduler/kai-scheduler/kai-scheduler"
    assert kai.version == "v0.17.0" and kai.namespace == "kai-scheduler"
    # Shards by partition label; no catch-all default queue outside quota.
    assert kai.values == {"global": {"nodePoolLabelKey": "fleetspec.io/partition"},
                          "defaultQueue": {"createDefaultQueue": False}}
    shards = _objs(fleet, "SchedulingShard")
    assert {n: s["spec"]["partitionLabelValue"] for n, s in shards.items()} == {
        "nvidia-blackwell": "nvidia-blackwell",
        "nvidia-blackwell-arm64": "nvidia-blackwell-arm64"}
    topo = _objs(fleet, "Topology")
    assert [lvl["nodeLabel"] for lvl in topo["museum-fabric"]["spec"]["levels"]] == [
        "fleetspec.io/leaf", "fleetspec.io/rack", "kubernetes.io/hostname"]
    assert topo["museum-fabric"]["apiVersion"] == "kai.scheduler/v1alpha1"
    # No Kueue and no Volcano: one engine holds quota.
    assert "kueue" not in _releases(fleet) and "volcano" not in _releases(fleet)
    # KubeRay gang-schedules through KAI.
    assert _releases(fleet)["kuberay-operator"].values == {
        "batchScheduler": {"name": "kai-scheduler"}}


def test_kai_spec_compiles_to_the_same_stack() -> None:
    """``queueing: kai`` in a spec is one line (gang follows it); the compiled fleet renders
    KAI, not Kueue."""
    text = (fleets.EXAMPLES / "museum.yaml").read_text()
    text = text.replace("queueing: kueue ", "queueing: kai ")
    text = text.replace("    gang: kueue ", "    # no gang: it follows queueing ")
    text = text.replace("amd-cdna4: 16", "amd-cdna4: 0")
    result = compile_text(text, "museum-kai.yaml")
    assert result.valid, [f.message for f in result.findings]
    releases = _releases(result.fleet)
    assert "kai-scheduler" in releases and "kueue" not in releases
    assert "inference-nvidia-blackwell" in _objs(result.fleet, "Queue")
    assert result.fleet.kubernetes.gang == "kai"
    assert result.fleet.kubernetes.quota_owners == ("kai",)


def test_kai_without_tenants_holds_each_partition() -> None:
    fleet = fleets.no_tenants(fleets.kai(fleets.museum()))
    queues = _objs(fleet, "Queue")
    assert set(queues) == {"museum-nvidia-blackwell", "museum-nvidia-blackwell-arm64",
                           "nvidia-blackwell", "nvidia-blackwell-arm64"}
    parts = {p.name: p.gpus for p in fleet.partitions}
    assert queues["nvidia-blackwell"]["spec"]["resources"]["gpu"]["quota"] == \
        parts["nvidia-blackwell"]
    assert queues["nvidia-blackwell"]["spec"]["parentQueue"] == "museum-nvidia-blackwell"


def test_kai_broken_queue_fails_the_crd(crd_index) -> None:
    queue = copy.deepcopy(next(iter(_objs(fleets.kai(fleets.museum()), "Queue").values())))
    assert validate_object(queue, crd_index, "1.36") == []
    queue["spec"]["resources"]["gpu"]["quota"] = "all"
    assert validate_object(queue, crd_index, "1.36")


def test_kai_pulumi_order(run_program) -> None:
    res = run_program(fleets.kai(fleets.museum()))
    deps = {name: set(r.depends_on) for name, r in res.items()}
    assert {"Namespace/kai-scheduler"} <= deps["release/kai-scheduler"]
    assert "release/kai-scheduler" in deps["Queue/museum-nvidia-blackwell"]
    assert {"release/kai-scheduler", "Queue/museum-nvidia-blackwell"} <= \
        deps["Queue/inference-nvidia-blackwell"]
    assert {"release/kai-scheduler", "node/b200-01"} <= deps["SchedulingShard/nvidia-blackwell"]
    # KubeRay's KAI integration needs KAI's PodGroup CRD first.
    assert "release/kai-scheduler" in deps["release/kuberay-operator"]
    assert res["Queue/inference-nvidia-blackwell"].type == \
        "kubernetes:scheduling.run.ai/v2:Queue"
    # The scheduler exists before GPU pods are required to name it.
    gate = "fleetspec-gpu-pods-use-kai-scheduler"
    assert "release/kai-scheduler" in deps[f"ValidatingAdmissionPolicy/{gate}"]
    assert {f"ValidatingAdmissionPolicy/{gate}", "Namespace/research"} <= \
        deps[f"ValidatingAdmissionPolicyBinding/{gate}"]


# ----------------------------------------------------------------------- operators


def test_kueue_manages_only_installed_operators() -> None:
    museum = fleets.museum()
    frameworks = yaml.safe_load(kueue_configuration(museum))["integrations"]["frameworks"]
    assert frameworks == ["batch/job", "pod", "deployment", "statefulset", "jobset.x-k8s.io/jobset",
                          "ray.io/rayjob", "ray.io/raycluster", "ray.io/rayservice"]
    assert "kubeflow.org/mpijob" not in frameworks  # no MPI Operator in the stack
    bare = dataclasses.replace(museum, kubernetes=dataclasses.replace(
        museum.kubernetes, ray_version=None, integrations=()))
    assert yaml.safe_load(kueue_configuration(bare))["integrations"]["frameworks"] == [
        "batch/job", "pod", "deployment", "statefulset"]
    releases = _releases(bare)
    assert "kuberay-operator" not in releases and "jobset" not in releases
    # Each named operator is installed and pinned.
    full = dataclasses.replace(museum, kubernetes=dataclasses.replace(
        museum.kubernetes, integrations=("jobset", "leaderworkerset")))
    pinned = {n: (r.chart, r.version) for n, r in _releases(full).items()}
    assert pinned["jobset"] == ("oci://registry.k8s.io/jobset/charts/jobset", "0.12.0")
    assert pinned["lws"] == ("oci://registry.k8s.io/lws/charts/lws", "0.9.0")
    assert pinned["kuberay-operator"] == ("kuberay-operator", "1.7.0")
    assert "leaderworkerset.x-k8s.io/leaderworkerset" in \
        yaml.safe_load(kueue_configuration(full))["integrations"]["frameworks"]


def test_kuberay_batch_scheduler_per_engine() -> None:
    museum = fleets.museum()
    assert _releases(museum)["kuberay-operator"].values == {}  # Kueue: ray.io integrations
    volcano = _releases(fleets.volcano(museum))
    assert volcano["kuberay-operator"].values == {"batchScheduler": {"name": "volcano"}}
    assert volcano["volcano"].key in volcano["kuberay-operator"].depends_on


@pytest.mark.parametrize("make,label", [
    (fleets.museum, "kueue.x-k8s.io/queue-name"),
    (lambda: fleets.volcano(fleets.museum()), "volcano.sh/queue-name"),
    (lambda: fleets.kai(fleets.museum()), "kai.scheduler/queue"),
    (lambda: fleets.dra_gpus(fleets.museum()), "kueue.x-k8s.io/queue-name"),
], ids=["kueue", "volcano", "kai", "dra-gpus"])
def test_example_rayjobs_pass_the_crds(make, label, crd_index) -> None:
    fleet = make()
    examples = _examples(fleet)
    jobs = [o for o in examples if o["kind"] == "RayJob"]
    # One per tenant and NVIDIA partition it holds.
    assert len(jobs) == 3
    for obj in examples:
        assert validate_object(obj, crd_index, fleet.kubernetes.version) == [], obj["metadata"]
    for job in jobs:
        assert label in job["metadata"]["labels"]
        worker = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]
        assert worker["replicas"] == worker["minReplicas"] == worker["maxReplicas"]
    # The NVL72 partition's RayJob joins a ComputeDomain (IMEX channel claim).
    arm = next(j for j in jobs if j["metadata"]["name"] == "research-nvidia-blackwell-arm64-ray")
    pod = arm["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert {"name": "imex", "resourceClaimTemplateName": "research-nvidia-blackwell-arm64-ray-imex"} \
        in pod["resourceClaims"]
    assert any(o["kind"] == "ComputeDomain" and o["metadata"]["name"] == arm["metadata"]["name"]
               for o in examples)


def test_a_broken_rayjob_fails_the_crd(crd_index) -> None:
    job = next(o for o in _examples(fleets.museum()) if o["kind"] == "RayJob")
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["replicas"] = "two"
    assert validate_object(job, crd_index, "1.36")


# ----------------------------------------------------------------------------- DRA


def test_dra_driver_with_compute_domains_for_nvl72() -> None:
    museum = fleets.museum()
    dra = _releases(museum)["dra-driver-nvidia-gpu"]
    assert dra.chart == "oci://registry.k8s.io/dra-driver-nvidia/charts/dra-driver-nvidia-gpu"
    assert dra.version == "0.4.1"
    assert dra.values["resources"] == {"gpus": {"enabled": False},
                                       "computeDomains": {"enabled": True}}
    assert dra.values["nvidiaDriverRoot"] == "/run/nvidia/driver"  # the operator's driver
    terms = dra.values["kubeletPlugin"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{
        "key": "fleetspec.io/partition", "operator": "In",
        "values": ["nvidia-blackwell", "nvidia-blackwell-arm64"]}]}]
    # Before the GPU Operator: its ComputeDomain CRD is the one installed
    # (test_compute_domain_crd_is_the_dra_drivers).
    assert "release/gpu-operator" not in dra.depends_on
    assert dra.key in _releases(museum)["gpu-operator"].depends_on
    # GPUs stay with the device plugin: no DeviceClass, no claim templates, plugin on.
    assert not _objs(museum, "DeviceClass")
    assert not any("nvidia.com/gpu.deploy.device-plugin" in n.labels
                   for n in kubernetes_resources(museum).node_labels)


def test_dra_plugin_never_on_slinky_hosts() -> None:
    """Slinky: Slurm-owned hosts are Kubernetes nodes with NVIDIA GPUs that slurmd owns. The
    DRA kubelet plugin must not publish them (one allocator per device)."""
    fleet = fleets.slinky(fleets.museum())
    dra = _releases(fleet)["dra-driver-nvidia-gpu"]
    allowed = set(dra.values["kubeletPlugin"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"][0]["values"])
    layer = kubernetes_resources(fleet)
    slurm_hosts = {n.hostname for n in fleet.nodes if n.scheduler == "slurm"}
    labelled = {n.hostname: n.labels for n in layer.node_labels}
    assert slurm_hosts and all(labelled[h].get("fleetspec.io/partition") not in allowed
                               for h in slurm_hosts if h in labelled)
    k8s_nvidia = {n.hostname for n in fleet.nodes
                  if n.scheduler == "kubernetes" and n.gpu.vendor == "nvidia"}
    assert all(labelled[h]["fleetspec.io/partition"] in allowed for h in k8s_nvidia)


def test_dra_gpus_one_allocator_and_kueue_counts_claims(crd_index) -> None:
    fleet = fleets.dra_gpus(fleets.museum())
    releases = _releases(fleet)
    # One allocator per device: no device plugin on the DRA nodes, by the operator's
    # per-node operand label (Slinky's slurmd pods elsewhere still need the plugin).
    assert "devicePlugin" not in releases["gpu-operator"].values
    labels = {n.hostname: n.labels for n in kubernetes_resources(fleet).node_labels}
    assert labels["gb200-r07-01"]["nvidia.com/gpu.deploy.device-plugin"] == "false"
    assert labels["b200-01"]["nvidia.com/gpu.deploy.device-plugin"] == "false"
    assert "nvidia.com/gpu.deploy.device-plugin" not in labels["mi355x-01"]
    slinky = fleets.slinky(fleet)
    slinky_labels = {n.hostname: n.labels for n in kubernetes_resources(slinky).node_labels}
    assert "nvidia.com/gpu.deploy.device-plugin" not in slinky_labels["h200-001"]
    assert releases["dra-driver-nvidia-gpu"].values["gpuResourcesEnabledOverride"] is True
    classes = _objs(fleet, "DeviceClass")
    assert set(classes) == {"nvidia-blackwell", "nvidia-blackwell-arm64"}
    expr = classes["nvidia-blackwell"]["spec"]["selectors"][0]["cel"]["expression"]
    assert "device.driver == 'gpu.nvidia.com'" in expr and "'Blackwell'" in expr
    # Model by NVML product name: B200 and GB200 share an architecture, not a partition.
    assert expr.endswith("productName in ['NVIDIA B200']")
    assert classes["nvidia-blackwell-arm64"]["spec"]["selectors"][0]["cel"]["expression"].endswith(
        "productName in ['NVIDIA GB200']")
    templates = _objs(fleet, "ResourceClaimTemplate")
    assert set(templates) == {"research/nvidia-blackwell-arm64-node-gpus",
                              "inference/nvidia-blackwell-node-gpus",
                              "inference-canary/nvidia-blackwell-node-gpus",
                              "inference/nvidia-blackwell-arm64-node-gpus",
                              "inference-canary/nvidia-blackwell-arm64-node-gpus"}
    request = templates["research/nvidia-blackwell-arm64-node-gpus"]["spec"]["spec"]["devices"][
        "requests"][0]
    assert request["exactly"] == {"deviceClassName": "nvidia-blackwell-arm64",
                                  "allocationMode": "ExactCount", "count": 4}
    config = yaml.safe_load(kueue_configuration(fleet))
    assert config["resources"]["deviceClassMappings"] == [
        {"name": "nvidia.com/gpu", "deviceClassNames": ["nvidia-blackwell", "nvidia-blackwell-arm64"]},
        {"name": "nvidia.com/compute-domain-channel",
         "deviceClassNames": ["compute-domain-default-channel.nvidia.com"]}]
    for obj in list(classes.values()) + list(templates.values()):
        assert validate_object(obj, crd_index, "1.34") == []
    # Below 1.34 resource.k8s.io/v1 does not exist: the same objects fail.
    assert validate_object(next(iter(classes.values())), crd_index, "1.33")


DRA_133 = """
apiVersion: fleetspec.io/v1alpha1
kind: Fleet
metadata: {name: old}
spec:
  os: ubuntu-24.04
  stacks:
    blackwell-cu13: {driver: "580.173.02", cuda: "13.0.2", nccl: "2.28.3"}
  racks:
    - name: r07
      nvlink_domain: rack
      nodes:
        - {hosts: "gb200-[01-18]", gpu: {model: gb200, count: 4}, stack: blackwell-cu13,
           scheduler: kubernetes}
  kubernetes:
    version: "1.33"
    ray: {version: "1.7.0"}
    dra:
      nvidia: {version: "0.4.1"}
"""


def test_dra_refused_below_1_34_with_the_version_named() -> None:
    result = compile_text(DRA_133, "old.yaml")
    found = [f for f in result.located() if f.rule == "dra-needs-k8s-1.34"]
    assert len(found) == 1 and "1.34" in found[0].message and found[0].line == 18
    ok = compile_text(DRA_133.replace('"1.33"', '"1.34"'), "new.yaml")
    assert not [f for f in ok.findings if f.rule == "dra-needs-k8s-1.34"]
    assert "dra-driver-nvidia-gpu" in _releases(ok.fleet)


def test_nvl72_gets_the_dra_driver_by_default_and_can_opt_out() -> None:
    """GB200 NVL72 on Kubernetes 1.34+: NVIDIA's DRA driver (catalog-pinned) with ComputeDomains
    even when the spec has no dra section; ``dra: {}`` opts out, with a warning."""
    no_section = DRA_133.replace('"1.33"', '"1.36"').replace(
        '    dra:\n      nvidia: {version: "0.4.1"}\n', "")
    result = compile_text(no_section, "default.yaml")
    assert result.valid and result.fleet.kubernetes.dra_nvidia_version == "0.4.1"
    dra = _releases(result.fleet)["dra-driver-nvidia-gpu"]
    assert dra.values["resources"]["computeDomains"] == {"enabled": True}
    assert not [f for f in result.findings if f.rule == "nvlink-domain-needs-dra"]
    opted_out = compile_text(no_section.replace("    ray:", "    dra: {}\n    ray:"), "out.yaml")
    assert opted_out.valid and "dra-driver-nvidia-gpu" not in _releases(opted_out.fleet)
    warned = [f for f in opted_out.findings if f.rule == "nvlink-domain-needs-dra"]
    assert len(warned) == 1 and str(warned[0].severity) == "warning"


def test_dra_gpus_without_a_driver_is_a_schema_error() -> None:
    text = DRA_133.replace('"1.33"', '"1.36"').replace(
        'nvidia: {version: "0.4.1"}', "gpus: true")
    result = compile_text(text, "bad.yaml")
    assert not result.valid
    assert any(f.rule == "schema" and "dra.nvidia" in f.message for f in result.findings)


def test_dra_pulumi_order(run_program) -> None:
    """The driver after the labels of the nodes its kubelet plugin selects (and before the
    GPU Operator: the ComputeDomain CRD test below); DeviceClasses after the driver; claim
    templates after their class and namespace."""
    res = run_program(fleets.dra_gpus(fleets.museum()))
    deps = {name: set(r.depends_on) for name, r in res.items()}
    assert {"Namespace/dra-driver-nvidia-gpu", "node/gb200-r07-01"} <= \
        deps["release/dra-driver-nvidia-gpu"]
    assert "release/dra-driver-nvidia-gpu" in deps["DeviceClass/nvidia-blackwell"]
    assert {"DeviceClass/nvidia-blackwell-arm64", "Namespace/research"} <= \
        deps["ResourceClaimTemplate/research/nvidia-blackwell-arm64-node-gpus"]
    assert res["DeviceClass/nvidia-blackwell"].type == "kubernetes:resource.k8s.io/v1:DeviceClass"
    assert res["node/b200-01"].inputs["metadata"]["labels"][
        "nvidia.com/gpu.deploy.device-plugin"] == "false"


def _crd(path: str) -> dict:
    from tests.conftest import require_shared

    return yaml.safe_load((require_shared("crds") / path).read_text())


@pytest.mark.parametrize("make,awaited", [
    (lambda: fleets.dra_gpus(fleets.museum()), False),
    (lambda: fleets.host_driver(fleets.dra_gpus(fleets.museum())), True),
], ids=["operator-driver", "host-driver"])
def test_compute_domain_crd_is_the_dra_drivers(make, awaited, run_program) -> None:
    """Both charts ship computedomains.resource.nvidia.com in crds/, the GPU Operator's an
    older schema (numNodes required); Helm creates a crds/ CRD only when it is absent and
    never upgrades it, so the first release installed decides. The program installs the
    DRA driver's release first (not awaited while its plugin waits for the operator's
    driver), and both releases keep their crds/ (skipCrds on the GPU Operator would drop
    ClusterPolicy and NVIDIADriver) and the GPU Operator its CRD upgrade hook."""
    name = "computedomains.resource.nvidia.com"
    ours = _crd("nvidia-dra-driver-gpu/resource.nvidia.com_computedomains.yaml")
    theirs = _crd("nvidia-gpu-operator/resource.nvidia.com_computedomains.yaml")
    assert ours["metadata"]["name"] == theirs["metadata"]["name"] == name

    def spec_required(crd: dict) -> list[str]:
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        return schema["properties"]["spec"].get("required", [])

    assert "numNodes" in spec_required(theirs) and "numNodes" not in spec_required(ours)
    res = run_program(make())
    deps = {n: set(r.depends_on) for n, r in res.items()}
    assert "release/dra-driver-nvidia-gpu" in deps["release/gpu-operator"]
    assert "release/gpu-operator" not in deps["release/dra-driver-nvidia-gpu"]
    names = list(res)
    assert names.index("release/dra-driver-nvidia-gpu") < names.index("release/gpu-operator")
    for release in ("release/dra-driver-nvidia-gpu", "release/gpu-operator"):
        assert not res[release].inputs.get("skipCrds")
    assert res["release/gpu-operator"].inputs["values"].get("operator", {}).get(
        "upgradeCRD", True) is True
    assert bool(res["release/dra-driver-nvidia-gpu"].inputs.get("skipAwait")) is not awaited
    # The same order, and the same wait, in the helm/install.sh written for a manual install.
    script = next(t for p, t in render_kubernetes(make()).items() if p.name == "install.sh")
    lines = [ln for ln in script.splitlines() if ln.startswith("$HELM upgrade --install ")]
    order = [ln.split()[3] for ln in lines]
    assert order.index("dra-driver-nvidia-gpu") < order.index("gpu-operator")
    dra_line = lines[order.index("dra-driver-nvidia-gpu")]
    assert dra_line.endswith("--wait") is awaited


@pytest.mark.parametrize("make", [fleets.museum, lambda: fleets.kai(fleets.museum()),
                                  lambda: fleets.dra_gpus(fleets.museum())],
                         ids=["museum", "kai", "dra-gpus"])
def test_rendered_files_have_no_yaml_anchors(make) -> None:
    """Shared dicts would be written as &id001/*id001: valid YAML, unreadable for users."""
    for path, text in render_kubernetes(make()).items():
        assert "&id0" not in text and "*id0" not in text, path


# --------------------------------------------------------- CEL, evaluated for real


def _cel(expression: str, **activation) -> bool:
    """Evaluate a rendered CEL expression with cel-python (the API server's language; the
    offline schema check does not run CEL)."""
    import celpy

    env = celpy.Environment()
    program = env.program(env.compile(expression))
    return bool(program.evaluate({k: celpy.json_to_cel(v) for k, v in activation.items()}))


def _pod(scheduler: str, limits: dict | None) -> dict:
    container = {"name": "main", "image": "x"}
    if limits is not None:
        container["resources"] = {"limits": limits}
    return {"spec": {"schedulerName": scheduler, "containers": [container]}}


@pytest.mark.parametrize("make,scheduler,counted", [
    (lambda: fleets.kai(fleets.museum()), "kai-scheduler", ("nvidia.com/gpu",)),
    (lambda: fleets.volcano(fleets.museum()), "volcano", ("nvidia.com/gpu", "amd.com/gpu")),
], ids=["kai", "volcano"])
def test_gpu_pods_in_tenant_namespaces_must_name_the_quota_engine(make, scheduler, counted,
                                                                   crd_index) -> None:
    """Volcano and KAI see only pods that name them: a GPU pod on the default scheduler in a
    tenant namespace would run outside quota. The admission policy refuses it."""
    fleet = make()
    policy = _objs(fleet, "ValidatingAdmissionPolicy")[f"fleetspec-gpu-pods-use-{scheduler}"]
    binding = _objs(fleet, "ValidatingAdmissionPolicyBinding")[
        f"fleetspec-gpu-pods-use-{scheduler}"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0][
        "values"] == ["inference", "inference-canary", "research"]
    for obj in (policy, binding):
        assert validate_object(obj, crd_index, "1.36") == []
    expr = policy["spec"]["validations"][0]["expression"]
    for resource in counted:
        assert not _cel(expr, object=_pod("default-scheduler", {resource: 8}))
        assert _cel(expr, object=_pod(scheduler, {resource: 8}))
    assert _cel(expr, object=_pod("default-scheduler", {"cpu": "2"}))  # no GPU: not its business
    assert _cel(expr, object=_pod("default-scheduler", None))
    # Kueue gates its namespaces itself: no policy there.
    assert not _objs(fleets.museum(), "ValidatingAdmissionPolicy")


def test_gpu_gate_sees_init_containers_and_native_sidecars() -> None:
    """A GPU in a native sidecar (an init container with ``restartPolicy: Always``) or a
    plain init container is held by the pod like a container's: it needs the engine too."""
    for make, scheduler in ((lambda: fleets.kai(fleets.museum()), "kai-scheduler"),
                            (lambda: fleets.volcano(fleets.museum()), "volcano")):
        policy = _objs(make(), "ValidatingAdmissionPolicy")[
            f"fleetspec-gpu-pods-use-{scheduler}"]
        expr = policy["spec"]["validations"][0]["expression"]
        for restart in ({"restartPolicy": "Always"}, {}):
            pod = _pod("default-scheduler", {"cpu": "1"})
            pod["spec"]["initContainers"] = [{"name": "side", "image": "x", **restart,
                                              "resources": {"limits": {"nvidia.com/gpu": 1}}}]
            assert not _cel(expr, object=pod)
            pod["spec"]["schedulerName"] = scheduler
            assert _cel(expr, object=pod)
        pod = _pod("default-scheduler", {"cpu": "1"})
        pod["spec"]["initContainers"] = [{"name": "setup", "image": "x"}]
        assert _cel(expr, object=pod)


def _admit(policy: dict, obj: dict, namespace_labels: dict[str, str]) -> tuple[bool, str]:
    """Run a ValidatingAdmissionPolicy as the API server does: its object selector and match
    conditions, then its variables in order (each may use the ones before), then each
    validation; the message of the first that fails (``messageExpression`` evaluated)."""
    import celpy

    env = celpy.Environment()
    spec = policy["spec"]
    selector = spec["matchConstraints"].get("objectSelector", {"matchExpressions": []})
    assert set(selector) == {"matchExpressions"}
    for expr in selector["matchExpressions"]:
        assert expr["operator"] == "Exists"
        if expr["key"] not in obj["metadata"].get("labels", {}):
            return True, "not matched"
    act = {"object": celpy.json_to_cel(obj),
           "namespaceObject": celpy.json_to_cel({"metadata": {"labels": namespace_labels}})}
    for cond in spec.get("matchConditions", []):
        if not env.program(env.compile(cond["expression"])).evaluate(act):
            return True, "not matched"
    variables: dict = {}
    for var in spec.get("variables", []):
        act["variables"] = celpy.celtypes.MapType(variables)
        variables[celpy.celtypes.StringType(var["name"])] = env.program(
            env.compile(var["expression"])).evaluate(act)
    act["variables"] = celpy.celtypes.MapType(variables)
    for v in spec["validations"]:
        if not env.program(env.compile(v["expression"])).evaluate(act):
            return False, str(env.program(env.compile(v["messageExpression"])).evaluate(act))
    return True, ""


_TENANT = {"fleetspec.io/tenant": "research"}  # research holds research-nvidia-blackwell-arm64


def _volcano_carriers(queue: str | None) -> dict[str, dict]:
    """A Volcano PodGroup, Job and pod naming ``queue`` (None: the field left out)."""
    meta = {"name": "train", "namespace": "research"}
    spec = {} if queue is None else {"queue": queue}
    pod: dict = {"apiVersion": "v1", "kind": "Pod", "metadata": dict(meta), "spec": {
        "schedulerName": "volcano", "containers": [{"name": "main", "image": "x"}]}}
    if queue is not None:
        pod["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": queue}
    return {
        "podgroups-jobs/PodGroup": {"apiVersion": "scheduling.volcano.sh/v1beta1",
                                    "kind": "PodGroup", "metadata": meta,
                                    "spec": {"minMember": 2, **spec}},
        "podgroups-jobs/Job": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                               "metadata": meta, "spec": {"minAvailable": 2, **spec, "tasks": [{
                                   "name": "worker", "replicas": 2,
                                   "template": {"spec": pod["spec"]}}]}},
        "pods/Pod": pod,
    }


def _kai_carriers(queue: str | None) -> dict[str, dict]:
    """A KAI PodGroup and a top owner (a batch Job) naming ``queue``."""
    meta = {"name": "train", "namespace": "research"}
    labels = {} if queue is None else {"kai.scheduler/queue": queue}
    return {
        "podgroups/PodGroup": {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
                               "metadata": meta,
                               "spec": {"minMember": 1, **({} if queue is None
                                                           else {"queue": queue})}},
        "labelled/Job": {"apiVersion": "batch/v1", "kind": "Job",
                         "metadata": {**meta, "labels": labels}, "spec": {"template": {"spec": {
                             "schedulerName": "kai-scheduler", "restartPolicy": "Never",
                             "containers": [{"name": "main", "image": "x"}]}}}},
    }


@pytest.mark.parametrize("engine,make,carriers", [
    ("volcano", lambda: fleets.volcano(fleets.museum()), _volcano_carriers),
    ("kai", lambda: fleets.kai(fleets.museum()), _kai_carriers),
], ids=["volcano", "kai"])
def test_a_tenant_runs_only_in_its_own_queues(engine, make, carriers, crd_index) -> None:
    """Volcano and KAI queues are cluster-scoped and neither engine checks who submits: the
    policies refuse, in each object that carries a queue, a queue of another tenant, a
    queue that is no tenant's from a tenant namespace, and a tenant's queue from a namespace
    with no tenant. Sample objects pass the engines' real CRDs; the CEL runs in cel-python."""
    fleet = make()
    policies = {n: p for n, p in _objs(fleet, "ValidatingAdmissionPolicy").items()
                if "queues-of-tenant" in n}
    bindings = _objs(fleet, "ValidatingAdmissionPolicyBinding")
    prefix = f"fleetspec-{engine}-queues-of-tenant-"
    assert {n.removeprefix(prefix) for n in policies} == \
        {k.split("/")[0] for k in carriers("x")}
    for name, policy in policies.items():
        assert bindings[name]["spec"] == {"policyName": name, "validationActions": ["Deny"]}
        for obj in (policy, bindings[name]):
            assert validate_object(obj, crd_index, "1.30") == []
    mine, theirs = "research-nvidia-blackwell-arm64", "inference-nvidia-blackwell-arm64"
    for queue, ns_labels, allowed in (
        (mine, _TENANT, True),
        (theirs, _TENANT, False),  # another tenant's quota
        ("default", _TENANT, False),  # outside quota
        (theirs, {}, False),  # a namespace of no tenant, spending a tenant's quota
        ("default", {}, True),  # not fleetspec's business
    ):
        for key, obj in carriers(queue).items():
            assert validate_object(obj, crd_index, "1.36") == [], key
            ok, message = _admit(policies[prefix + key.split("/")[0]], obj, ns_labels)
            assert ok is allowed, (key, queue, ns_labels, message)
            if not allowed:
                assert queue in message, message
    # No queue named: a Volcano PodGroup/Job gets the CRDs' default queue ("default"),
    # refused in a tenant namespace; a pod without the annotation is left to its PodGroup.
    for key, obj in carriers(None).items():
        ok, _ = _admit(policies[prefix + key.split("/")[0]], obj, _TENANT)
        assert ok is (key in ("pods/Pod", "labelled/Job")), key


def test_deviceclass_cel_selects_exactly_its_partitions_gpus() -> None:
    """The DeviceClass selectors, evaluated against devices shaped as the NVIDIA DRA driver
    publishes them (driver gpu.nvidia.com; type, architecture, productName attributes)."""
    classes = _objs(fleets.dra_gpus(fleets.museum()), "DeviceClass")

    def device(product: str, arch: str = "Blackwell", kind: str = "gpu") -> dict:
        return {"driver": "gpu.nvidia.com", "attributes": {"gpu.nvidia.com": {
            "type": kind, "architecture": arch, "productName": product}}}

    def selects(name: str, dev: dict) -> bool:
        return _cel(classes[name]["spec"]["selectors"][0]["cel"]["expression"], device=dev)

    assert selects("nvidia-blackwell", device("NVIDIA B200"))
    assert not selects("nvidia-blackwell", device("NVIDIA GB200"))
    assert selects("nvidia-blackwell-arm64", device("NVIDIA GB200"))
    assert not selects("nvidia-blackwell-arm64", device("NVIDIA H200", "Hopper"))
    assert not selects("nvidia-blackwell", device("NVIDIA B200", kind="mig"))
    other = {"driver": "compute-domain.nvidia.com", "attributes": {"compute-domain.nvidia.com": {}}}
    assert not selects("nvidia-blackwell", other)


def test_dra_gpu_flavors_carry_no_kueue_topology() -> None:
    """Kueue documents "No DRA + Topology Aware Scheduling": the flavors of partitions whose
    GPUs are DRA claims (dra.gpus), or whose jobs claim ComputeDomain channels (the NVL72
    partition), have no topologyName; the others keep TAS."""
    plain = _objs(fleets.museum(), "ResourceFlavor")
    assert {n for n, f in plain.items() if f["spec"].get("topologyName") != "museum-fabric"} == {
        "nvidia-blackwell-arm64"}
    flavors = _objs(fleets.dra_gpus(fleets.museum()), "ResourceFlavor")
    dra_parts = {"nvidia-blackwell", "nvidia-blackwell-arm64"}
    assert dra_parts < set(flavors)
    for name, flavor in flavors.items():
        assert ("topologyName" in flavor["spec"]) is (name not in dra_parts), name
    assert "museum-fabric" in _objs(fleets.dra_gpus(fleets.museum()), "Topology")  # the AMD flavor keeps it


def test_amd_device_plugin_and_labeller_images_are_pinned_not_latest() -> None:
    """The operator's DeviceConfig defaults are rocm/k8s-device-plugin:latest and
    :labeller-latest (tests/data/crds/amd-gpu-operator/values.yaml), which move under a
    running cluster: each DeviceConfig names the catalog's device-plugin release instead."""
    configs = _objs(fleets.museum(), "DeviceConfig")
    assert configs
    for name, config in configs.items():
        plugin = config["spec"]["devicePlugin"]
        assert plugin["devicePluginImage"] == "docker.io/rocm/k8s-device-plugin:1.31.0.10", name
        assert plugin["nodeLabellerImage"] == "docker.io/rocm/k8s-device-plugin:labeller-1.31.0.10", name


def test_kueue_admits_compute_domain_channels_and_keeps_them_in_one_rack(crd_index) -> None:
    """#25 item 3: a ComputeDomain's pods claim an IMEX channel of DeviceClass
    compute-domain-default-channel.nvidia.com; Kueue 0.18+ refuses a workload naming an
    unmapped class (kueue#6949, #10504). The class maps to its own resource, which the NVL72
    partition's ClusterQueues (and the cohort) cover one per GPU; the example job's workers
    share a rack (pod affinity on the rack label). Under an engine other than Kueue, or a
    Kueue before deviceClassMappings, nothing is mapped."""
    fleet = fleets.museum()
    config = yaml.safe_load(kueue_configuration(fleet))
    assert config["resources"]["deviceClassMappings"] == [{
        "name": "nvidia.com/compute-domain-channel",
        "deviceClassNames": ["compute-domain-default-channel.nvidia.com"]}]
    queues = _objs(fleet, "ClusterQueue")
    research = queues["research-nvidia-blackwell-arm64"]["spec"]["resourceGroups"]
    assert research == [{"coveredResources": ["nvidia.com/gpu", "nvidia.com/compute-domain-channel"],
                         "flavors": [{"name": "nvidia-blackwell-arm64", "resources": [
                             {"name": "nvidia.com/gpu", "nominalQuota": 64},
                             {"name": "nvidia.com/compute-domain-channel", "nominalQuota": 64}]}]}]
    assert queues["inference-nvidia-blackwell"]["spec"]["resourceGroups"][0]["coveredResources"] == [
        "nvidia.com/gpu"]
    cohort = _objs(fleet, "Cohort")["museum"]["spec"]
    for group in cohort.get("resourceGroups", []):
        for flavor in group["flavors"]:
            assert [r["name"] for r in flavor["resources"]] == group["coveredResources"]
    for obj in list(queues.values()) + [_objs(fleet, "Cohort")["museum"]]:
        assert validate_object(obj, crd_index, "1.36") == [], obj["metadata"]
    job = next(o for o in _examples(fleet) if o["kind"] == "RayJob"
               and o["metadata"]["name"] == "research-nvidia-blackwell-arm64-ray")
    template = job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]
    (term,) = template["spec"]["affinity"]["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "fleetspec.io/rack"
    assert term["labelSelector"]["matchLabels"].items() <= template["metadata"]["labels"].items()
    assert validate_object(job, crd_index, "1.36") == []
    # Not Kueue's quota, or a Kueue that cannot map classes: no mapping, no channel resource.
    for other in (fleets.volcano(fleet), dataclasses.replace(fleet, kubernetes=dataclasses.replace(
            fleet.kubernetes, kueue_version="0.17.1"))):
        assert "deviceClassMappings" not in yaml.safe_load(kueue_configuration(other))["resources"]
        assert all("compute-domain-channel" not in str(q) for q in _objs(other, "ClusterQueue").values())
