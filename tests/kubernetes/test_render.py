"""The rendered kubernetes/ tree: goldens, determinism, and what must never appear."""

from __future__ import annotations

import dataclasses

import yaml

from fleetspec.render.kubernetes import kubernetes_resources, render_kubernetes

from . import fleets


def test_museum_golden(golden) -> None:
    golden.check_tree("kubernetes/museum", render_kubernetes(fleets.museum()))


def test_museum_volcano_golden(golden) -> None:
    golden.check_tree("kubernetes/museum-volcano",
                      render_kubernetes(fleets.volcano(fleets.museum())))


def test_museum_kai_golden(golden) -> None:
    golden.check_tree("kubernetes/museum-kai", render_kubernetes(fleets.kai(fleets.museum())))


def test_museum_dra_gpus_golden(golden) -> None:
    golden.check_tree("kubernetes/museum-dra-gpus",
                      render_kubernetes(fleets.dra_gpus(fleets.museum())))


def test_quickstart_renders_nothing() -> None:
    quick = fleets.compiled("quickstart")
    assert render_kubernetes(quick) == {}


def test_no_kubernetes_section_renders_nothing() -> None:
    assert render_kubernetes(dataclasses.replace(fleets.museum(), kubernetes=None)) == {}


def test_deterministic_and_sorted() -> None:
    first = render_kubernetes(fleets.museum())
    assert first == render_kubernetes(fleets.museum())
    assert list(first) == sorted(first)
    assert all(str(p).startswith("kubernetes/") for p in first)


def test_slurm_nodes_never_appear() -> None:
    fleet = fleets.museum()
    slurm_hosts = {n.hostname for n in fleet.nodes if n.scheduler == "slurm"}
    slurm_parts = {p.name for p in fleet.partitions if p.scheduler == "slurm"}
    for variant in (fleet, fleets.volcano(fleet), fleets.no_tenants(fleet)):
        text = "\n".join(render_kubernetes(variant).values())
        assert not any(h in text for h in slurm_hosts)
        assert not any(f"name: {p}\n" in text or f"partition={p}\n" in text
                       for p in slurm_parts)


def _k8s_partition_gpus(fleet) -> dict[str, int]:
    return {p.name: p.gpus for p in fleet.partitions
            if p.scheduler == "kubernetes" and p.generated}


def _kinds(layer, kind: str) -> list:
    return [m for m in layer.manifests if m.kind == kind]


def test_without_tenants_each_partition_gets_a_queue() -> None:
    fleet = fleets.no_tenants(fleets.museum())
    layer = kubernetes_resources(fleet)
    cqs = {m.name: m.body["spec"]["resourceGroups"] for m in _kinds(layer, "ClusterQueue")}
    assert {n: g[0]["flavors"][0]["resources"][0]["nominalQuota"] for n, g in cqs.items()} \
        == _k8s_partition_gpus(fleet)
    assert {(m.namespace, m.name, m.body["spec"]["clusterQueue"])
            for m in _kinds(layer, "LocalQueue")} == {("default", p, p) for p in cqs}


def test_unassigned_gpus_stay_in_the_cohort() -> None:
    fleet = fleets.museum()
    research = fleet.kubernetes.tenants[0]
    assert research.name == "research"
    one = dataclasses.replace(fleet, kubernetes=dataclasses.replace(
        fleet.kubernetes, tenants=(research,)))
    cohort = next(m for m in kubernetes_resources(one).manifests if m.kind == "Cohort")
    quotas = {f["name"]: f["resources"][0]["nominalQuota"]
              for g in cohort.body["spec"]["resourceGroups"] for f in g["flavors"]}
    held = dict(research.quota)
    expected = {p: g - held.get(p, 0) for p, g in _k8s_partition_gpus(fleet).items()}
    assert quotas == {p: g for p, g in expected.items() if g > 0}


def test_each_kueue_queue_holds_one_partition() -> None:
    """One job, one generation: a ClusterQueue per (tenant, partition) with one flavor, so
    every PodSet of a workload gets the same flavor; LocalQueues are named after the
    partition in each of the tenant's namespaces, pointing at that tenant's queue."""
    fleet = fleets.museum()
    layer = kubernetes_resources(fleet)
    cqs = {m.name: m.body for m in _kinds(layer, "ClusterQueue")}
    expected_cqs = {f"{t.name}-{p}": (t, p, g) for t in fleet.kubernetes.tenants
                    for p, g in t.quota}
    assert set(cqs) == set(expected_cqs)
    for name, (tenant, partition, gpus) in expected_cqs.items():
        spec = cqs[name]["spec"]
        [group] = spec["resourceGroups"]
        [flavor] = group["flavors"]
        assert flavor["name"] == partition
        assert flavor["resources"][0]["nominalQuota"] == gpus
        assert spec["cohortName"] == fleet.name
        assert spec["namespaceSelector"]["matchExpressions"][0]["values"] == \
            sorted(tenant.namespaces)
        assert cqs[name]["metadata"]["labels"]["fleetspec.io/partition"] == partition
    lqs = {(m.namespace, m.name): m.body["spec"]["clusterQueue"]
           for m in _kinds(layer, "LocalQueue")}
    assert lqs == {(ns, p): f"{t.name}-{p}" for t in fleet.kubernetes.tenants
                   for p, _ in t.quota for ns in t.namespaces}
    # Some tenant of museum holds quota on two generations: the case this guards.
    assert any(len(t.quota) > 1 for t in fleet.kubernetes.tenants)


def test_a_partition_a_node_group_names_gets_its_flavor_and_every_quota() -> None:
    """A Kubernetes node group with ``partition:`` is a Kueue flavor of the generated
    flavors' shape (its nodes' partition label, the fabric topology), and a tenant's quota
    on it becomes that tenant's ClusterQueue and LocalQueues: no quota is dropped."""
    fleet = fleets.named_pool()
    layer = kubernetes_resources(fleet)
    flavors = {m.name: m.body["spec"] for m in _kinds(layer, "ResourceFlavor")}
    generated = flavors["amd-cdna4"]
    assert flavors["b200-pool"] == {**generated, "nodeLabels": {"fleetspec.io/partition": "b200-pool"}}
    labels = {n.hostname: n.labels for n in layer.node_labels}
    assert {h for h, lab in labels.items() if lab.get("fleetspec.io/partition") == "b200-pool"} \
        == {f"b200-0{i}" for i in range(1, 5)}
    cqs = {m.name: m.body["spec"]["resourceGroups"] for m in _kinds(layer, "ClusterQueue")}
    quotas = {f"{t.name}-{p}": g for t in fleet.kubernetes.tenants for p, g in t.quota}
    assert "inference-b200-pool" in quotas
    assert {n: g[0]["flavors"][0]["resources"][0]["nominalQuota"] for n, g in cqs.items()} == quotas
    assert cqs["inference-b200-pool"][0]["flavors"][0]["name"] == "b200-pool"
    volcano = kubernetes_resources(fleets.volcano(fleet))
    queues = {m.name: m.body["spec"] for m in _kinds(volcano, "Queue")}
    assert queues["inference-b200-pool"]["deserved"] == {"nvidia.com/gpu": 32}


def test_no_variant_drops_a_tenant_quota(variant) -> None:
    """Every tenant quota of a valid fleet is some engine's queue (Kueue ClusterQueue,
    Volcano or KAI Queue, named ``<tenant>-<partition>``): what cannot be placed is a
    validation finding (tenant-quota, double-allocation-owner, quota-engine-coverage)."""
    name, fleet = variant
    queues = {m.name for m in kubernetes_resources(fleet).manifests if m.kind in ("ClusterQueue", "Queue")}
    wanted = {f"{t.name}-{p}" for t in fleet.kubernetes.tenants for p, _ in t.quota}
    assert wanted <= queues, (name, sorted(wanted - queues))


def test_each_volcano_queue_holds_one_node_group() -> None:
    fleet = fleets.volcano(fleets.museum())
    layer = kubernetes_resources(fleet)
    queues = {m.name: m.body["spec"] for m in _kinds(layer, "Queue")}
    parts = {p.name: p for p in fleet.partitions}
    expected = {f"{t.name}-{p}": (p, g) for t in fleet.kubernetes.tenants
                for p, g in t.quota}
    assert set(queues) == set(expected)
    for name, (partition, gpus) in expected.items():
        resource = "amd.com/gpu" if parts[partition].vendors == ("amd",) else "nvidia.com/gpu"
        assert queues[name]["deserved"] == {resource: gpus}
        assert queues[name]["capability"] == {resource: parts[partition].gpus}
        assert queues[name]["affinity"]["nodeGroupAffinity"] == {
            "requiredDuringSchedulingIgnoredDuringExecution": [partition]}
    # every node group a queue names is a label value some node carries
    groups = {n.labels["volcano.sh/nodegroup-name"] for n in layer.node_labels}
    assert {p for p, _ in expected.values()} <= groups


def test_prerequisites_feature_gate_and_cert_manager() -> None:
    layer = kubernetes_resources(fleets.workload_api(fleets.museum()))
    pre = {p.id: p for p in layer.prerequisites}
    assert set(pre) == {"feature-gate-GenericWorkload", "cert-manager"}
    gate = pre["feature-gate-GenericWorkload"]
    assert gate.feature_gates == ("GenericWorkload=true",)
    assert gate.components == ("kube-apiserver", "kube-controller-manager", "kube-scheduler")
    readme = next(v for k, v in render_kubernetes(fleets.workload_api(fleets.museum())).items()
                  if k.name == "README.md")
    assert "GenericWorkload" in readme and "cert-manager" in readme
    # museum runs the AMD GPU Operator: cert-manager is its prerequisite, nothing else
    assert [p.id for p in kubernetes_resources(fleets.museum()).prerequisites] == \
        ["cert-manager"]


def test_without_amd_nodes_no_cert_manager_and_no_nfd_override() -> None:
    fleet = fleets.museum()
    nvidia_only = dataclasses.replace(fleet, nodes=tuple(
        dataclasses.replace(n, scheduler="slurm") if n.gpu.vendor == "amd" else n
        for n in fleet.nodes))
    layer = kubernetes_resources(nvidia_only)
    assert layer.prerequisites == ()
    assert not any(r.name == "amd-gpu-operator" for r in layer.releases)
    gpu = next(r for r in layer.releases if r.name == "gpu-operator")
    assert set(gpu.values) == {"driver"}  # the chart's own NFD, untouched


def test_amd_driver_follows_the_tuple_and_host_mode() -> None:
    fleet = fleets.museum()
    stacks = tuple(dataclasses.replace(s, amdgpu="30.10.1") if s.name == "cdna4-rocm7" else s
                   for s in fleet.stacks)
    pinned = dataclasses.replace(fleet, stacks=stacks)

    def device_config(f):
        return next(m for m in kubernetes_resources(f).manifests if m.kind == "DeviceConfig")

    k8s = dataclasses.replace(pinned.kubernetes, amd_driver_image="registry.example.com/amdgpu",
                              amd_registry_secret="pull")
    pinned = dataclasses.replace(pinned, kubernetes=k8s)
    # The operator's own install path: the inbox module blacklisted, the built image kept in
    # the site's registry with its pull/push secret.
    assert device_config(pinned).body["spec"]["driver"] == {
        "enable": True, "blacklist": True, "version": "30.10.1",
        "image": "registry.example.com/amdgpu", "imageRegistrySecret": {"name": "pull"}}
    assert device_config(pinned).body["spec"]["metricsExporter"] == {"enable": True}
    # The NVIDIA operator's driver mode does not decide the AMD one.
    assert device_config(fleets.host_driver(pinned)).body["spec"]["driver"]["enable"] is True
    amd_host = dataclasses.replace(pinned, kubernetes=dataclasses.replace(k8s, amd_driver="host"))
    assert device_config(amd_host).body["spec"]["driver"] == {"enable": False}


def test_node_label_values_are_valid_label_values() -> None:
    fleet = fleets.museum()
    stacks = tuple(dataclasses.replace(s, nccl="2.28.3-1+cuda13.0") if s.name ==
                   "blackwell-cu13" else s for s in fleet.stacks)
    layer = kubernetes_resources(dataclasses.replace(fleet, stacks=stacks))
    labels = next(n for n in layer.node_labels if n.hostname == "b200-01").labels
    assert labels["fleetspec.io/nccl"] == "2.28.3-1_cuda13.0"


def test_manifests_parse_back_to_the_layer() -> None:
    fleet = fleets.museum()
    layer = kubernetes_resources(fleet)
    parsed = [d for p, t in render_kubernetes(fleet).items() if p.parts[1] == "manifests"
              for d in yaml.safe_load_all(t) if d]
    assert sorted(map(repr, parsed)) == sorted(repr(dict(m.body)) for m in layer.manifests)


def test_kueue_and_volcano_give_one_declaration_the_same_quota_semantics() -> None:
    """Per tenant and partition: guaranteed GPUs (Kueue nominalQuota, Volcano deserved), the
    most it may use by borrowing idle GPUs (Kueue: the whole partition through the cohort,
    no borrowingLimit; Volcano: capability), and reclaim of what was lent (Kueue
    reclaimWithinCohort; Volcano reclaimable, the reclaim action and the capacity plugin)."""
    import yaml

    from fleetspec.render.kubernetes.layer import volcano_scheduler_conf

    fleet = fleets.museum()
    parts = {p.name: p for p in fleet.partitions}
    kueue = {m.name: m.body["spec"] for m in _kinds(kubernetes_resources(fleet), "ClusterQueue")}
    volcano = {m.name: m.body["spec"] for m in _kinds(kubernetes_resources(fleets.volcano(fleet)), "Queue")}
    assert set(kueue) == set(volcano)
    for name, cq in kueue.items():
        (group,) = cq["resourceGroups"]
        (flavor,) = group["flavors"]
        res = flavor["resources"][0]  # the GPUs (NVL72: then the IMEX channels, one per GPU)
        assert all(r["nominalQuota"] == res["nominalQuota"] for r in flavor["resources"])
        assert "borrowingLimit" not in res and cq["cohortName"] == fleet.name
        assert cq["preemption"]["reclaimWithinCohort"] == "Any"
        q = volcano[name]
        assert q["deserved"] == {res["name"]: res["nominalQuota"]}
        assert q["capability"] == {res["name"]: parts[flavor["name"]].gpus}
        assert q["reclaimable"] is True
    conf = yaml.safe_load(volcano_scheduler_conf(True, True))
    assert "reclaim" in [a.strip() for a in conf["actions"].split(",")]
    plugins = [p["name"] for tier in conf["tiers"] for p in tier["plugins"]]
    assert "capacity" in plugins and "proportion" not in plugins  # they cannot be combined


def test_hypernode_names_say_the_tier_once() -> None:
    layer = kubernetes_resources(fleets.volcano(fleets.museum()))
    names = {m.name for m in _kinds(layer, "HyperNode")}
    assert "leaf-02" in names and "rack-r07" in names
    assert not any(n.startswith("leaf-leaf-") for n in names)


def test_rdma_fabric_gives_pods_rdma_devices_through_the_network_operator() -> None:
    """InfiniBand museum: NVIDIA's Network Operator with one NicClusterPolicy over the
    cluster's GPU nodes, the RDMA shared device plugin by default, SR-IOV/host devices on
    request; Kueue does not count the RDMA resources; nothing on plain Ethernet."""
    import json

    import yaml

    fleet = fleets.museum()
    layer = kubernetes_resources(fleet)
    release = next(r for r in layer.releases if r.name == "network-operator")
    assert release.chart == "network-operator" and release.version == "v26.4.1"
    assert release.values["nfd"] == {"enabled": False, "deployNodeFeatureRules": True}
    assert "release/gpu-operator" in release.depends_on  # the NFD it relies on
    (policy,) = _kinds(layer, "NicClusterPolicy")
    assert policy.name == "nic-cluster-policy"  # the only name the operator reconciles
    plugin = policy.body["spec"]["rdmaSharedDevicePlugin"]
    config = json.loads(plugin["config"])["configList"][0]
    assert config["resourceName"] == "rdma_shared_device_a"
    assert config["selectors"] == {"vendors": ["15b3"], "linkTypes": ["infiniband"]}
    term = policy.body["spec"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"][0]["key"] == "fleetspec.io/stack"
    kueue = next(r for r in layer.releases if r.name == "kueue")
    excluded = yaml.safe_load(kueue.values["managerConfig"]["controllerManagerConfigYaml"])[
        "resources"]["excludeResourcePrefixes"]
    assert "rdma/" in excluded and "nvidia.com/hostdev" in excluded

    sriov_layer = kubernetes_resources(fleets.rdma_sriov(fleet))
    (policy,) = _kinds(sriov_layer, "NicClusterPolicy")
    assert "rdmaSharedDevicePlugin" not in policy.body["spec"]
    resource = json.loads(policy.body["spec"]["sriovDevicePlugin"]["config"])["resourceList"][0]
    assert resource["resourcePrefix"] == "nvidia.com" and resource["selectors"]["isRdma"] is True
    # A host device gets its address from a secondary network: Multus, CNI plugins, nv-ipam,
    # and a HostDeviceNetwork (a NetworkAttachmentDefinition) in every tenant namespace.
    assert set(policy.body["spec"]["secondaryNetwork"]) == {"cniPlugins", "multus"}
    assert policy.body["spec"]["nvIpam"]["image"] == "nvidia-k8s-ipam"
    networks = {m.name: m for m in _kinds(sriov_layer, "HostDeviceNetwork")}
    tenant_spaces = sorted({ns for t in fleet.kubernetes.tenants for ns in t.namespaces})
    assert sorted(networks) == [f"hostdev-{ns}" for ns in tenant_spaces]
    for ns in tenant_spaces:
        net = networks[f"hostdev-{ns}"]
        assert net.body["spec"]["networkNamespace"] == ns and net.body["spec"]["resourceName"] == "hostdev"
        assert json.loads(net.body["spec"]["ipam"]) == {"type": "nv-ipam", "poolName": "hostdev-pool"}
        assert {"release/network-operator", "NicClusterPolicy/nic-cluster-policy", f"Namespace/{ns}"} \
            <= set(net.depends_on)
    # The pool's subnet is the site's: the plan and README name it as a prerequisite.
    assert [p.id for p in sriov_layer.prerequisites if p.id == "nv-ipam-pool"] == ["nv-ipam-pool"]
    assert not any(p.id == "nv-ipam-pool" for p in layer.prerequisites)

    roce = dataclasses.replace(fleet, fabric=dataclasses.replace(fleet.fabric, type="roce"))
    (policy,) = _kinds(kubernetes_resources(roce), "NicClusterPolicy")
    assert json.loads(policy.body["spec"]["rdmaSharedDevicePlugin"]["config"])["configList"][0][
        "selectors"]["linkTypes"] == ["ether"]
    ethernet = dataclasses.replace(fleet, fabric=dataclasses.replace(fleet.fabric, type="ethernet"))
    assert not any(r.name == "network-operator" for r in kubernetes_resources(ethernet).releases)
    off = dataclasses.replace(fleet, kubernetes=dataclasses.replace(fleet.kubernetes, network_operator_enabled=False))
    assert not _kinds(kubernetes_resources(off), "NicClusterPolicy")


def test_no_toleration_for_a_taint_nothing_sets() -> None:
    """fleetspec sets no taints (node-labels.sh and the NodePatches set labels only), so its
    flavors tolerate none: a toleration without its taint only hides intent."""
    for make in (fleets.museum, lambda: fleets.slinky(fleets.museum())):
        layer = kubernetes_resources(make())
        flavors = _kinds(layer, "ResourceFlavor")
        assert flavors
        for flavor in flavors:
            assert "tolerations" not in flavor.body["spec"], flavor.name
        assert not any("taint" in str(n.labels) for n in layer.node_labels)
