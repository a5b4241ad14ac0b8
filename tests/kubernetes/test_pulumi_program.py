"""The Pulumi program under Pulumi's own mock runtime: the resources it registers, their
types, names, chart versions, per-stack drivers, flavors and quotas, and dependencies."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

import pulumi
import pytest
import yaml
from pulumi.runtime import mocks as pulumi_mocks

from fleetspec.apply.pulumi import load_program
from fleetspec.render.slurm import render_slinky_values

from . import fleets


@dataclass
class Registered:
    type: str
    name: str
    inputs: dict
    depends_on: list[str]  # names of the resources it was declared to depend on
    provider: str = ""  # the provider reference it was registered with ("urn::id")
    retain_on_delete: bool = False
    ignore_changes: tuple[str, ...] = ()


class _Mocks(pulumi.runtime.Mocks):
    def new_resource(self, args: pulumi.runtime.MockResourceArgs):
        return f"{args.name}-id", args.inputs

    def call(self, args: pulumi.runtime.MockCallArgs):
        return {}


class _RecordingMonitor(pulumi_mocks.MockMonitor):
    """Pulumi's mock monitor, also keeping each registration's declared dependencies
    (the mock API hands ``new_resource`` the inputs only)."""

    def __init__(self, mocks: pulumi.runtime.Mocks) -> None:
        super().__init__(mocks)
        self.registered: list[Registered] = []

    def RegisterResource(self, request):
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            self.registered.append(Registered(
                request.type, request.name, {},
                [urn.rsplit("::", 1)[-1] for urn in request.dependencies],
                request.provider, bool(request.retainOnDelete), tuple(request.ignoreChanges)))
        return response


@pytest.fixture
def run_program():
    """Run the program for a fleet (or from ``fleetspec:irPath``) under the mock runtime;
    return {name: Registered}, inputs filled in from what the mocks saw."""
    program = load_program()
    seen: dict[str, dict] = {}

    class Mocks(_Mocks):
        def new_resource(self, args):
            seen[args.name] = args.inputs
            return super().new_resource(args)

    def run(fleet=None, config: dict[str, str] | None = None, preview: bool = False) -> dict[str, Registered]:
        mocks = Mocks()
        monitor = _RecordingMonitor(mocks)
        pulumi.runtime.set_mocks(mocks, project="fleetspec-kubernetes", stack="test",
                                 preview=preview, monitor=monitor)
        settings = {"fleetspec:context": "museum-admin"} if config is None else config
        pulumi.runtime.config.CONFIG.get().clear()  # each run sees only its own config
        for key, value in settings.items():
            pulumi.runtime.set_config(key, value)

        @pulumi.runtime.test
        def declare():
            program.program(fleet)

        declare()
        out = {}
        for r in monitor.registered:
            r.inputs = seen[r.name]
            out[r.name] = r
        return out

    saved = dict(pulumi.runtime.config.CONFIG.get())
    yield run
    pulumi.runtime.config.CONFIG.get().clear()  # the stack config is process-global
    pulumi.runtime.config.CONFIG.get().update(saved)


def test_museum_resources(run_program) -> None:
    res = run_program(fleets.museum())
    types = {}
    for r in res.values():
        types.setdefault(r.type, set()).add(r.name)
    assert types["kubernetes:helm.sh/v3:Release"] == {
        "release/gpu-operator", "release/amd-gpu-operator", "release/kueue",
        "release/network-operator", "release/dra-driver-nvidia-gpu", "release/kuberay-operator",
        "release/jobset"}
    assert len(types["kubernetes:core/v1:NodePatch"]) == 24
    assert not any(n.startswith("node/h100") or n.startswith("node/mi300x")
                   for n in types["kubernetes:core/v1:NodePatch"])  # Slurm-owned
    fleet = fleets.museum()
    k8s_parts = {p.name for p in fleet.partitions if p.scheduler == "kubernetes"}
    assert types["kubernetes:kueue.x-k8s.io/v1beta2:ResourceFlavor"] == {
        f"ResourceFlavor/{p}" for p in k8s_parts}
    # A ClusterQueue per (tenant, partition); LocalQueues named after the partition.
    assert types["kubernetes:kueue.x-k8s.io/v1beta2:ClusterQueue"] == {
        f"ClusterQueue/{t.name}-{p}" for t in fleet.kubernetes.tenants for p, _ in t.quota}
    assert types["kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue"] == {
        f"LocalQueue/{ns}/{p}" for t in fleet.kubernetes.tenants for p, _ in t.quota
        for ns in t.namespaces}
    # One stack still gets its own NVIDIADriver: the ClusterPolicy's driver would go to
    # every NVIDIA node the cluster ever holds, at this one version.
    assert types["kubernetes:nvidia.com/v1alpha1:NVIDIADriver"] == {"NVIDIADriver/blackwell-cu13"}

    gpu = res["release/gpu-operator"].inputs
    assert gpu["chart"] == "gpu-operator" and gpu["version"] == "v26.7.0"
    assert gpu["repositoryOpts"]["repo"] == "https://helm.ngc.nvidia.com/nvidia"
    assert gpu["values"]["driver"] == {
        "enabled": True, "nvidiaDriverCRD": {"enabled": True, "deployDefaultCR": False}}
    assert res["NVIDIADriver/blackwell-cu13"].inputs["spec"]["version"] == "580.173.02"
    # One NFD for both vendors: NVIDIA's on, AMD's off.
    assert gpu["values"]["nfd"] == {"enabled": True}
    amd = res["release/amd-gpu-operator"].inputs["values"]
    assert amd["node-feature-discovery"] == {"enabled": False}
    kueue = res["release/kueue"].inputs
    assert kueue["chart"] == "oci://registry.k8s.io/kueue/charts/kueue"
    assert kueue["version"] == "0.19.2" and kueue["name"] == "kueue"
    assert res["release/amd-gpu-operator"].inputs["version"] == "v1.5.1"

    for tenant in fleet.kubernetes.tenants:
        for partition, gpus in tenant.quota:
            spec = res[f"ClusterQueue/{tenant.name}-{partition}"].inputs["spec"]
            assert spec["cohortName"] == "museum"
            resource = "amd.com/gpu" if partition.startswith("amd-") else "nvidia.com/gpu"
            # The NVL72 partition also covers its ComputeDomains' IMEX channels (#25 item 3).
            channel = ["nvidia.com/compute-domain-channel"] if partition == "nvidia-blackwell-arm64" else []
            assert spec["resourceGroups"] == [{"coveredResources": [resource, *channel], "flavors": [
                {"name": partition, "resources": [{"name": r, "nominalQuota": gpus}
                                                  for r in (resource, *channel)]}]}]
    flavor = res["ResourceFlavor/nvidia-blackwell"].inputs["spec"]
    assert flavor["nodeLabels"] == {"fleetspec.io/partition": "nvidia-blackwell"}
    assert flavor["topologyName"] == "museum-fabric"
    labels = res["node/gb200-r07-01"].inputs["metadata"]["labels"]
    assert labels["fleetspec.io/nvlink-domain"] == "r07"
    assert labels["fleetspec.io/nccl"] == "2.28.3"


def test_museum_dependencies(run_program) -> None:
    res = run_program(fleets.museum())
    deps = {name: set(r.depends_on) for name, r in res.items()}
    assert "Namespace/kueue-system" in deps["release/kueue"]
    assert "release/kueue" in deps["ResourceFlavor/nvidia-blackwell"]
    assert "Topology/museum-fabric" in deps["ResourceFlavor/nvidia-blackwell"]
    assert {"release/kueue", "Cohort/museum", "ResourceFlavor/amd-cdna4"} <= \
        deps["ClusterQueue/inference-amd-cdna4"]
    assert {"ClusterQueue/inference-amd-cdna4", "Namespace/inference-canary"} <= \
        deps["LocalQueue/inference-canary/amd-cdna4"]
    assert "release/amd-gpu-operator" in deps["DeviceConfig/kube-amd-gpu/cdna4-rocm7"]
    # The operators select nodes by the labels fleetspec sets: labels first.
    assert "node/b200-01" in deps["release/gpu-operator"]
    # The AMD chart's NFD rule needs NVIDIA's NFD (the only one): after it.
    assert "release/gpu-operator" in deps["release/amd-gpu-operator"]


def test_per_stack_nvidia_drivers(run_program) -> None:
    res = run_program(fleets.two_nvidia_stacks(fleets.museum()))
    gpu = res["release/gpu-operator"].inputs["values"]["driver"]
    assert gpu == {"enabled": True,
                   "nvidiaDriverCRD": {"enabled": True, "deployDefaultCR": False}}
    drivers = {n: r.inputs["spec"] for n, r in res.items()
               if r.type == "kubernetes:nvidia.com/v1alpha1:NVIDIADriver"}
    assert {n: (s["version"], s["nodeSelector"]) for n, s in drivers.items()} == {
        "NVIDIADriver/ampere-cu12": ("580.95.05", {"fleetspec.io/stack": "ampere-cu12"}),
        "NVIDIADriver/blackwell-cu13": ("580.173.02",
                                        {"fleetspec.io/stack": "blackwell-cu13"}),
    }
    for name in drivers:
        assert "release/gpu-operator" in res[name].depends_on


def test_host_driver_disables_operator_drivers(run_program) -> None:
    res = run_program(fleets.host_driver(fleets.two_nvidia_stacks(fleets.museum())))
    assert res["release/gpu-operator"].inputs["values"]["driver"] == {"enabled": False}
    assert not any(r.type.endswith(":NVIDIADriver") for r in res.values())


def test_volcano_queues_and_hypernodes(run_program) -> None:
    res = run_program(fleets.volcano(fleets.museum()))
    assert "release/kueue" not in res
    assert res["release/volcano"].inputs["version"] == "1.15.1"
    queues = {n: r.inputs["spec"] for n, r in res.items()
              if r.type == "kubernetes:scheduling.volcano.sh/v1beta1:Queue"}
    fleet = fleets.museum()
    expected = {f"Queue/{t.name}-{p}": (p, g) for t in fleet.kubernetes.tenants
                for p, g in t.quota}
    assert set(queues) == set(expected)
    for name, (partition, gpus) in expected.items():
        assert list(queues[name]["deserved"].values()) == [gpus]
        assert queues[name]["affinity"]["nodeGroupAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"] == [partition]
    hyper = {n: r for n, r in res.items() if r.type.endswith(":HyperNode")}
    assert set(hyper) == {"HyperNode/rack-r03", "HyperNode/rack-r04", "HyperNode/rack-r07",
                          "HyperNode/leaf-02"}  # one leaf: no spine tier
    assert set(hyper["HyperNode/leaf-02"].depends_on) >= {
        "HyperNode/rack-r03", "HyperNode/rack-r04", "HyperNode/rack-r07"}
    assert "gang" in res["release/volcano"].inputs["values"]["custom"][
        "scheduler_config_override"]


def test_program_reads_ir_from_stack_config(run_program, tmp_path) -> None:
    ir = tmp_path / "fleet.json"
    ir.write_text(fleets.museum().to_json())
    res = run_program(None, {"fleetspec:irPath": str(ir), "fleetspec:context": "museum-admin"})
    assert "ClusterQueue/research-nvidia-blackwell-arm64" in res
    assert len(res) == len(run_program(fleets.museum()))


def test_quickstart_declares_nothing(run_program) -> None:
    quick = fleets.compiled("quickstart")
    assert run_program(quick) == {}


SLINKY_CONFIG = {"fleetspec:context": "museum-admin", "fleetspec:slurmdbdPassword": "s3cret"}


def test_slinky_accounting_gets_its_secret_from_the_stack(run_program) -> None:
    """The slurm chart's accounting reads the DB password from a Secret nothing else makes:
    the stack creates it, from the spec's slurmdbd_password (a secret stack config value),
    before the chart."""
    fleet = fleets.slinky(fleets.museum())
    res = run_program(fleet, SLINKY_CONFIG)
    secret = res["Secret/slurm/slurmdbd-password"]
    assert secret.type == "kubernetes:core/v1:Secret"
    assert secret.inputs["metadata"]["name"] == "slurmdbd-password"
    assert secret.inputs["metadata"]["namespace"] == "slurm"
    data = secret.inputs["stringData"]
    # Kept a Pulumi secret end to end: the value travels wrapped with Pulumi's secret
    # signature, never as plain state.
    assert data["4dabf18193072939515e22adb298388d"] == "1b47061264138c4ac30d75fd1eb44270"
    assert data["value"] == {"password": "s3cret"}
    assert "Namespace/slurm" in secret.depends_on
    assert "Secret/slurm/slurmdbd-password" in res["release/slurm"].depends_on
    ref = res["release/slurm"].inputs["values"]["accounting"]["storageConfig"]["passwordKeyRef"]
    assert ref == {"name": "slurmdbd-password", "key": "password"}
    assert secret.ignore_changes == ()  # with the value, a changed password is an update
    with pytest.raises(pulumi.ConfigMissingError, match="slurmdbdPassword"):
        run_program(fleet, {"fleetspec:context": "museum-admin"})


def test_a_preview_without_the_slurmdbd_password_keeps_the_applied_secret(run_program) -> None:
    """``fleetspec plan`` resolves no secrets. Its preview must neither fail on the missing
    config nor show the Secret as changed: without the value the Secret ignores changes to
    its data (Pulumi then diffs the state's own inputs), and the chart still follows it."""
    fleet = fleets.slinky(fleets.museum())
    res = run_program(fleet, {"fleetspec:context": "museum-admin"}, preview=True)
    secret = res["Secret/slurm/slurmdbd-password"]
    assert secret.ignore_changes == ("stringData",)
    assert secret.inputs["stringData"]["value"] == {"password": ""}  # a secret placeholder, never applied
    assert "Secret/slurm/slurmdbd-password" in res["release/slurm"].depends_on
    with_value = run_program(fleet, SLINKY_CONFIG, preview=True)["Secret/slurm/slurmdbd-password"]
    assert with_value.ignore_changes == () and with_value.inputs["stringData"]["value"] == {"password": "s3cret"}


def test_slinky_cluster_release_and_host_labels(run_program) -> None:
    """Slinky mode: the ``slurm`` chart after the operator and after the labels of the
    nodes its NodeSets select (NodePatches of the Slurm-owned hosts)."""
    fleet = fleets.slinky(fleets.museum())
    res = run_program(fleet, SLINKY_CONFIG)
    slurm = res["release/slurm"]
    assert slurm.type == "kubernetes:helm.sh/v3:Release"
    assert slurm.inputs["chart"] == "oci://ghcr.io/slinkyproject/charts/slurm"
    assert slurm.inputs["version"] == "1.2.1" and slurm.inputs["namespace"] == "slurm"
    assert slurm.inputs["values"]["clusterName"] == fleet.name
    slinky_values = yaml.safe_load(render_slinky_values(fleet))
    assert set(slurm.inputs["values"]["nodesets"]) == set(slinky_values["nodesets"])
    assert set(slurm.inputs["values"]["partitions"]) == set(slinky_values["partitions"])
    hosts = {n.hostname for n in fleet.nodes if n.scheduler == "slurm"}
    assert {f"node/{h}" for h in hosts} <= set(slurm.depends_on)
    assert {"release/slurm-operator", "Namespace/slurm"} <= set(slurm.depends_on)
    labels = res["node/h200-001"].inputs["metadata"]["labels"]
    assert labels == {"fleetspec.io/gpu-model": "h200", "fleetspec.io/partition": "nvidia-hopper",
                      "fleetspec.io/stack": "hopper-cu13", "fleetspec.io/vendor": "nvidia"}


# --- item 8: the provider, retained tenant namespaces, the project's toolchain ----------


def test_every_resource_goes_through_the_stack_configs_provider(run_program) -> None:
    res = run_program(fleets.museum(), {"fleetspec:context": "museum-admin",
                                        "fleetspec:kubeconfig": "/etc/fleet/kubeconfig"})
    provider = res.pop("fleet-cluster")
    assert provider.type == "pulumi:providers:kubernetes"
    assert provider.inputs["context"] == "museum-admin"
    assert provider.inputs["kubeconfig"] == "/etc/fleet/kubeconfig"
    assert res and all("::fleet-cluster::" in r.provider for r in res.values()), [
        r.name for r in res.values() if "::fleet-cluster::" not in r.provider]


def test_without_a_context_the_program_refuses_instead_of_using_the_ambient_one(run_program) -> None:
    with pytest.raises(pulumi.ConfigMissingError, match="fleetspec:context"):
        run_program(fleets.museum(), {})


def test_tenant_namespaces_outlive_their_removal_from_the_spec(run_program) -> None:
    res = run_program(fleets.museum())
    fleet = fleets.museum()
    tenant_spaces = {ns for t in fleet.kubernetes.tenants for ns in t.namespaces}
    namespaces = {r.name.split("/", 1)[1]: r for r in res.values() if r.type == "kubernetes:core/v1:Namespace"}
    assert tenant_spaces <= set(namespaces)
    for name, r in namespaces.items():
        assert r.retain_on_delete is (name in tenant_spaces), name


def test_the_project_names_its_python_toolchain_and_virtualenv() -> None:
    from pathlib import Path

    folder = Path(load_program().__file__).parent
    project = yaml.safe_load((folder / "Pulumi.yaml").read_text())
    assert project["runtime"]["name"] == "python"
    assert project["runtime"]["options"] == {"toolchain": "pip", "virtualenv": "venv"}
    requirements = (folder / "requirements.txt").read_text().split("\n")
    assert "-e ../..[pulumi]" in requirements  # the program imports fleetspec


@pytest.mark.parametrize("variant", ["museum", "slinky", "volcano", "dra_gpus"])
def test_kubelet_registers_each_node_with_exactly_the_labels_the_stack_patches(run_program, variant) -> None:
    """A node that rejoins comes back with what its kubelet registers: the node layer's
    --node-labels (inventory ``fleetspec_node_labels``) must be the NodePatch labels, for
    every node the stack labels and no other."""
    from fleetspec.render.ansible import render_ansible

    fleet = fleets.museum() if variant == "museum" else getattr(fleets, variant)(fleets.museum())
    patched = {r.inputs["metadata"]["name"]: r.inputs["metadata"]["labels"]
               for r in run_program(fleet, SLINKY_CONFIG).values() if r.type == "kubernetes:core/v1:NodePatch"}
    inventory = yaml.safe_load(render_ansible(fleet)[PurePosixPath("ansible/inventory.yml")])
    hosts = inventory["all"]["children"]["k8s_node"]["hosts"]
    registered = {h: dict(pair.split("=", 1) for pair in v["fleetspec_node_labels"].split(","))
                  for h, v in hosts.items() if v}
    assert patched and registered == patched
