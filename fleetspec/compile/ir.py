"""The Fleet IR: the resolved, explicit, immutable form of a fleet spec.

Everything downstream of the compiler (rules, renderers, plan, verify) reads only
these types. They are frozen dataclasses so that nothing can mutate a compiled fleet,
and `to_dict` gives a deterministic JSON form (``fleet.json``): same spec, same bytes.

Spec locations are kept beside the data (``path`` fields, the key path into the spec)
so that rules can point at ``fleet.yaml:line:col``; they are left out of ``fleet.json``
because moving a block in the spec is not a change to the fleet.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal

Vendor = Literal["nvidia", "amd"]
Scheduler = Literal["slurm", "kubernetes"]
SpecPath = tuple[str | int, ...]

IR_VERSION = "fleetspec.io/ir/v1"

NVIDIA_TUPLE_KEYS = ("driver", "cuda", "cudnn", "nccl", "dcgm")  # dcgm: optional
AMD_TUPLE_KEYS = ("amdgpu", "rocm", "rccl")

# slurmctld's StateSaveLocation unless the spec names one: local to each controller.
DEFAULT_STATE_SAVE_LOCATION = "/var/spool/slurmctld"


def _optional(default: Any) -> Any:
    """A field added after fleet.json's format settled: written only when not ``default``,
    so fleets that do not use it keep their fleet.json and state byte for byte."""
    return dataclasses.field(default=default, metadata={"optional": True})


def _loc(path: SpecPath = ()) -> Any:
    """A field holding a spec path: compared and kept, never serialised."""
    return field(default=path, compare=False, repr=False, metadata={"location": True})


@dataclass(frozen=True, slots=True)
class StackTuple:
    """A pinned stack tuple. NVIDIA: driver, cuda, cudnn, nccl. AMD: amdgpu, rocm, rccl.

    ``rccl`` and ``amdgpu`` may be resolved from the catalog (the RCCL ROCm bundles);
    ``resolved`` names the keys that were filled in that way.
    """

    name: str
    vendor: Vendor
    driver: str | None = None
    cuda: str | None = None
    cudnn: str | None = None
    nccl: str | None = None
    amdgpu: str | None = None
    rocm: str | None = None
    rccl: str | None = None
    resolved: tuple[str, ...] = ()
    # (component, version): vbios, nvswitch, connectx, bmc, bios as the spec pins them
    firmware: tuple[tuple[str, str], ...] = ()
    # NVIDIA DCGM 4 on the nodes (optional; installed with the driver). Last: IR JSON
    # written before it decodes with None.
    dcgm: str | None = None
    path: SpecPath = _loc()
    # The site's Machine Owner Key on Secure Boot nodes (spec stacks.<name>.secure_boot):
    # paths on the node, DKMS signs with them. Last, like dcgm.
    mok_certificate: str | None = None
    mok_signing_key: str | None = None

    def versions(self) -> dict[str, str]:
        """The pinned component versions, in canonical order, without empty ones."""
        keys = NVIDIA_TUPLE_KEYS if self.vendor == "nvidia" else AMD_TUPLE_KEYS
        return {k: v for k in keys if (v := getattr(self, k)) is not None}

    def fingerprint(self) -> str:
        """A short stable text form, e.g. ``driver=580.95.05,cuda=13.0.2,nccl=2.28.3``."""
        return ",".join(f"{k}={v}" for k, v in self.versions().items())


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """The GPUs of one node, resolved against the catalog."""

    model: str  # catalog id, e.g. "h100-sxm"
    count: int
    vendor: Vendor
    generation: str  # architecture family: "hopper", "cdna3", ...
    gres_type: str  # Slurm GRES type, e.g. "h100"
    memory_gb: int | None
    cpu_arch: str = "x86_64"  # the node's CPU: x86_64, or arm64 for Grace superchips


@dataclass(frozen=True, slots=True)
class Node:
    """One node of the fleet: where it sits, its GPUs, its stack and who schedules it."""

    hostname: str
    rack: str
    leaf: str | None
    nvlink_domain: str | None  # the NVLink domain id (the rack name for NVL72 racks)
    gpu: GpuSpec
    stack: str
    scheduler: Scheduler
    partition: str  # the node's primary (generated or named) partition
    cpus: int | None = None
    sockets: int | None = None
    cores_per_socket: int | None = None
    threads_per_core: int | None = None
    memory_gb: int | None = None
    features: tuple[str, ...] = ()  # extra user features
    path: SpecPath = _loc()  # the node group in the spec
    # Slurm RealMemory as written (imported clusters), instead of memory_gb; fleet.json has it only when set.
    real_memory_mb: int | None = _optional(None)
    # GPU-sharing GRES beside the GPUs ((mps, 400), (shard, 16)), sorted; fleet.json has it only when set.
    other_gres: tuple[tuple[str, int], ...] = _optional(())
    # More GPU models in the node (spec other_gpus), after ``gpu`` in device order; same
    # vendor as ``gpu``. ``gpu`` alone names the partition and drives the tuple rules.
    other_gpus: tuple[GpuSpec, ...] = _optional(())
    # MIG instances on each GPU ((profile, count), sorted: (("1g.10gb", 2), ("3g.40gb", 1))), the
    # same on every GPU, and the mig-parted config that makes them (spec gpu.mig; docs/mig.md).
    mig: tuple[tuple[str, int], ...] = _optional(())
    mig_config: str = _optional("")
    # Time-slicing replicas per GPU (spec gpu.sharing, Kubernetes); 0: not shared.
    time_slicing: int = _optional(0)


@dataclass(frozen=True, slots=True)
class CpuNode:
    """A node without GPUs that Slurm schedules (login, service, CPU partitions): in
    slurm.conf and the inventory's ``slurm_node`` group, never in a GPU partition or rule."""

    hostname: str
    rack: str
    cpus: int | None = None
    sockets: int | None = None
    cores_per_socket: int | None = None
    threads_per_core: int | None = None
    memory_gb: int | None = None
    real_memory_mb: int | None = None
    features: tuple[str, ...] = ()
    path: SpecPath = _loc()
    site_gres: tuple[str, ...] = _optional(())  # GPUs no catalog model describes, as the site wrote them


@dataclass(frozen=True, slots=True)
class Partition:
    """A set of nodes that can run one collective: one vendor, one generation, one tuple.

    ``generated`` partitions come from vendor + generation; the others are the user's
    (``slurm.partitions.<name>: {nodes: ...}``) and may overlap generated ones.
    ``stack`` is None only when the nodes disagree (a finding says so).
    """

    name: str
    scheduler: Scheduler
    vendors: tuple[str, ...]
    generations: tuple[str, ...]
    gpu_models: tuple[str, ...]
    nodes: tuple[str, ...]  # sorted hostnames
    gpus: int
    stacks: tuple[str, ...]
    generated: bool
    default: bool = False
    max_time: str | None = None
    state: str | None = None
    allow_mixed_generations: bool = False
    # What the vendor's tools and drivers call these GPUs (nvidia-smi/NVML names, which the
    # NVIDIA DRA driver publishes as ``productName``), from the catalog.
    device_names: tuple[str, ...] = ()
    path: SpecPath = _loc()
    cpu_nodes: tuple[str, ...] = _optional(())  # sorted hostnames of CPU-only members (extra partitions)

    @property
    def vendor(self) -> str | None:
        return self.vendors[0] if len(self.vendors) == 1 else None

    @property
    def generation(self) -> str | None:
        return self.generations[0] if len(self.generations) == 1 else None

    @property
    def stack(self) -> str | None:
        return self.stacks[0] if len(self.stacks) == 1 else None


@dataclass(frozen=True, slots=True)
class Rack:
    """A rack: its leaf switch, its NVLink domain, its nodes."""

    name: str
    leaf: str | None
    nvlink_domain: bool  # the whole rack is one NVLink domain (NVL72-class)
    nodes: tuple[str, ...]
    path: SpecPath = _loc()


@dataclass(frozen=True, slots=True)
class Fabric:
    """The GPU fabric: its type, spine and leaf switches."""

    type: Literal["infiniband", "roce", "ethernet"]
    spines: tuple[str, ...]
    leaves: tuple[str, ...]  # every leaf named by a rack, in first-seen order
    path: SpecPath = _loc()


@dataclass(frozen=True, slots=True)
class SlurmPartitionSettings:
    """Settings the user gave a partition (generated or extra) under ``slurm.partitions``."""

    name: str
    nodes: str | None = None  # a hostlist: an extra partition
    default: bool = False
    max_time: str | None = None
    state: str | None = None
    allow_mixed_generations: bool = False
    path: SpecPath = _loc()


@dataclass(frozen=True, slots=True)
class SlurmTenant:
    """A Slurm account: its users, the site groups whose members join it, its GPU quota per
    partition or GRES type (GrpTRES), and its fair-share shares."""

    name: str
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    quota: tuple[tuple[str, int], ...] = ()  # (partition or GRES type, GPUs), sorted
    fairshare: int = 1
    path: SpecPath = _loc()


@dataclass(frozen=True, slots=True)
class SlurmConverge:
    """How Slurm nodes converge themselves at boot (the fleetspec_converge role, #30 item 2):
    the directory they fetch their partition's signed bundle from, the one public key they
    accept its signature from, and where they write their result."""

    bundles: str
    public_key: str
    results: str
    path: SpecPath = _loc()


@dataclass(frozen=True, slots=True)
class SlurmConfig:
    """The Slurm cluster: release, mode, controllers, accounting and site settings."""

    version: str
    mode: Literal["native", "slinky"]
    controllers: tuple[str, ...]
    accounting_host: str | None
    containers: Literal["none", "pyxis"]
    partition_settings: tuple[SlurmPartitionSettings, ...] = ()
    slinky_version: str | None = None  # slurm-operator chart version when mode == "slinky"
    slinky_database_clients: tuple[str, ...] = ()  # CIDRs slurmdbd pods reach MariaDB from
    enroot_version: str | None = None  # containers == "pyxis"
    pyxis_version: str | None = None
    state_save_location: str = DEFAULT_STATE_SAVE_LOCATION
    gres_autodetect: bool = False  # AutoDetect lines in gres.conf (needs an NVML/RSMI build)
    gpu_billing_weights: tuple[tuple[str, float], ...] = ()  # (GRES type, billing units per GPU), sorted
    slurm_ids: tuple[int, int] = (64030, 64030)  # (uid, gid) of SlurmUser on every host
    munge_ids: tuple[int, int] = (64031, 64031)
    tenants: tuple[SlurmTenant, ...] = ()  # accounts made with sacctmgr at apply
    converge: SlurmConverge | None = None  # nodes converge from a signed bundle at boot
    cluster_name: str | None = _optional(None)  # ClusterName as the site wrote it; None: the fleet's name
    path: SpecPath = _loc()


@dataclass(frozen=True, slots=True)
class Tenant:
    """A Kubernetes tenant: its namespaces, GPU quota per partition and share beyond it."""

    name: str
    namespaces: tuple[str, ...]
    quota: tuple[tuple[str, int], ...]  # (partition, GPUs), sorted by partition
    over_quota_weight: int = 1  # share of idle GPUs beyond quota (KAI overQuotaWeight)
    limit: tuple[tuple[str, int], ...] = ()  # (partition, GPU cap), sorted; absent: no cap
    path: SpecPath = _loc()


@dataclass(frozen=True, slots=True)
class GpuOperatorConfig:
    """NVIDIA's GPU Operator: its release and who installs the driver."""

    version: str
    driver: Literal["operator", "host"]
    path: SpecPath = _loc()


@dataclass(frozen=True, slots=True)
class KubernetesConfig:
    """The Kubernetes layer: release, operators, queueing, gang scheduling and tenants."""

    version: str
    gpu_operator: GpuOperatorConfig | None
    amd_gpu_operator_version: str | None
    queueing: Literal["kueue", "volcano", "kai", "none"]
    gang: Literal["kueue", "volcano", "kai", "workload-api", "none"]
    quota_owners: tuple[str, ...]  # who holds GPU quota: normally exactly the queueing system
    tenants: tuple[Tenant, ...] = ()
    kueue_version: str | None = None  # chart/app version, from the spec or the catalog
    volcano_version: str | None = None
    gang_timeout: str = "30m"  # waitForPodsReady.timeout
    gang_recovery_timeout: str | None = None  # waitForPodsReady.recoveryTimeout; None: timeout
    gang_requeue_limit: int | None = None
    kai_version: str | None = None  # KAI Scheduler chart version (queueing or gang: kai)
    ray_version: str | None = None  # KubeRay operator chart version: None, no KubeRay
    dra_nvidia_version: str | None = None  # NVIDIA DRA driver chart: None, no DRA driver
    dra_gpus: bool = False  # DRA (not the device plugin) allocates the NVIDIA GPUs
    integrations: tuple[str, ...] = ()  # workload operators installed besides KubeRay
    quota_owners_explicit: bool = False  # the spec names quota_owners (not the default)
    # AMD GPU Operator: who installs amdgpu on Kubernetes nodes, and where the operator keeps
    # the driver images it builds (DeviceConfig spec.driver.image, imageRegistrySecret).
    amd_driver: Literal["operator", "host"] = "operator"
    amd_driver_image: str | None = None
    amd_registry_secret: str | None = None
    # NVIDIA Network Operator on InfiniBand/RoCE fabrics (version None: the default).
    network_operator_enabled: bool = True
    network_operator_version: str | None = None
    network_rdma: Literal["shared", "sriov"] = "shared"
    path: SpecPath = _loc()


@dataclass(frozen=True, slots=True)
class PackageSource:
    """The site's mirror for every pinned package (None in Fleet: the vendors' repositories)."""

    uri: str
    suite: str = "./"
    components: str = ""
    key_url: str | None = None
    trusted: bool = False
    path: SpecPath = _loc()


Pairs = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Hook:
    """A site playbook (``spec.ansible.hooks``), run inside each apply wave."""

    playbook: str  # as written: relative to the spec file
    phase: Literal["before", "after"]
    disruption: str  # a plan Disruption value the site declares
    partitions: tuple[str, ...] = ()  # empty: every partition
    digest: str = ""  # the playbook's content hash: editing it is a planned change
    path: SpecPath = _loc()


@dataclass(frozen=True, slots=True)
class Adoption:
    """An adopted cluster's own values where fleetspec would decide otherwise (spec
    ``slurm.adopted``, checked): slurm.conf keys at the site's value (None: not written,
    Slurm's default), the defaults declined, and gres.conf as the site wrote it."""

    conf: tuple[tuple[str, str | None], ...] = ()
    declines: tuple[str, ...] = ()
    gres_conf: tuple[str, ...] | None = None
    topology_conf: tuple[str, ...] | None = None
    cgroup_conf: tuple[str, ...] | None = _optional(None)  # the site's cgroup.conf, Key=value lines
    slurmdbd_conf: tuple[str, ...] | None = _optional(None)  # the site's slurmdbd.conf, StoragePass a reference
    path: SpecPath = _loc(("spec", "slurm", "adopted"))


@dataclass(frozen=True, slots=True)
class SiteSettings:
    """The site's escape hatches (fleetspec/site), checked: Slurm parameters with their
    canonical key spelling and the value as written, Helm values overlays and Ansible
    variables as canonical JSON (sorted keys), and hook playbooks."""

    slurm_conf: Pairs = ()
    partitions: tuple[tuple[str, Pairs], ...] = ()  # (partition, PartitionName parameters)
    nodes: tuple[tuple[str, Pairs], ...] = ()  # (host, NodeName parameters)
    cgroup_conf: Pairs = ()
    slurmdbd_conf: Pairs = ()
    helm_values: tuple[tuple[str, str], ...] = ()  # (release, overlay as JSON)
    ansible_vars: str = "{}"
    hooks: tuple[Hook, ...] = ()
    adoption: Adoption | None = _optional(None)


# The bare-metal records are NamedTuples, not dataclasses: each dataclass costs every start
# (tests/test_startup_imports.py), and a spec without BMCs never makes one. ``path`` is a
# location, left out of fleet.json like a dataclass's location fields.
class NodeBmc(typing.NamedTuple):
    """One node's BMC, resolved: its Redfish endpoint and system, the credential as a
    reference (never a value), and the BIOS attributes the site pins."""

    host: str
    endpoint: str  # https://HOST[:PORT], or http:// to loopback (an emulator)
    system: str | None  # Redfish System Id or Name; None: the service's only system
    username: str
    password: str  # a secret reference (env:, file:, vault:)
    ca_file: str | None = None
    bios: tuple[tuple[str, str | int | bool], ...] = ()  # sorted by attribute
    path: SpecPath = ()
    server_name: str | None = None  # the name checked in the certificate instead of the endpoint's host
    fingerprints: tuple[str, ...] = ()  # pinned certificate SHA-256s, lowercase hex, no colons


class TicketWebhook(typing.NamedTuple):
    url: str
    token: str | None = None  # a secret reference
    timeout: int = 10


class PxeConfig(typing.NamedTuple):
    server: str
    interface: str
    dhcp_range: str
    image_url: str  # no trailing slash
    dns: tuple[str, ...] = ()  # the site's DNS servers, DHCP option 6


class BareMetal(typing.NamedTuple):
    """The bare-metal plane: each node's BMC, the spare pools and where tickets go."""

    bmcs: tuple[NodeBmc, ...] = ()  # spec order
    spares: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (partition, spare hostnames), sorted
    tickets: TicketWebhook | None = None
    pxe: PxeConfig | None = None
    # (component, version, image URI, its SHA-256 or ""), sorted
    firmware_images: tuple[tuple[str, str, str, str], ...] = ()

    def bmc(self, host: str) -> NodeBmc | None:
        return next((b for b in self.bmcs if b.host == host), None)

    def firmware_image(self, component: str, version: str) -> str | None:
        return next((uri for c, v, uri, _ in self.firmware_images if (c, v) == (component, version)), None)

    def firmware_sha256(self, component: str, version: str) -> str | None:
        """The SHA-256 the spec pins for the image (None: none given)."""
        return next((sha or None for c, v, _, sha in self.firmware_images if (c, v) == (component, version)), None)


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    """``spec.health`` resolved: every fault class with its action (the catalog's
    default where the spec says nothing)."""

    interval: int
    checks: tuple[str, ...]
    actions: tuple[tuple[str, str], ...]  # (fault class, action), sorted by class
    slurm_node_state: tuple[str, ...] = ("ANY",)
    dcgm_level: int = 1  # dcgmi diag -r LEVEL, with "dcgm" among checks
    min_healthy: str = "51%"  # Kubernetes remediation's blast-radius limit: "51%" or a count ("3")
    path: SpecPath = _loc()

    def action(self, fault_class: str) -> str:
        return dict(self.actions).get(fault_class, "none")


@dataclass(frozen=True)
class Fleet:
    """The checked fleet every renderer, plan and apply reads (fleet.json is its JSON form)."""

    name: str
    os: str
    stacks: tuple[StackTuple, ...]  # sorted by name
    fabric: Fabric | None
    racks: tuple[Rack, ...]
    nodes: tuple[Node, ...]  # spec order
    partitions: tuple[Partition, ...]  # generated first (sorted), then extra ones (sorted)
    slurm: SlurmConfig | None
    kubernetes: KubernetesConfig | None
    suppress: tuple[str, ...] = ()
    secrets: tuple[tuple[str, str], ...] = ()  # (name, reference): references only, never values
    package_mirror: PackageSource | None = None
    registry_mirror: str | None = None  # OCI registry holding every image and OCI chart (air-gapped sites)
    chart_repository: str | None = None  # Helm repository serving the https-repository charts
    health: HealthPolicy | None = None
    api_version: str = "fleetspec.io/v1alpha1"
    site: SiteSettings | None = None  # the site's escape hatches, when it uses any
    baremetal: BareMetal | None = None  # BMCs, spares, tickets: only when the spec has them
    cpu_nodes: tuple[CpuNode, ...] = _optional(())  # nodes without GPUs, spec order
    # (id, the name nvidia-smi/amd-smi prints) of each GPU model the site declared
    # (spec.gpu_models): verify reads the node's GPUs against it, not the catalog.
    site_gpu_names: tuple[tuple[str, str], ...] = _optional(())

    def stack(self, name: str) -> StackTuple | None:
        return next((s for s in self.stacks if s.name == name), None)

    def partition(self, name: str) -> Partition | None:
        return next((p for p in self.partitions if p.name == name), None)

    def node(self, hostname: str) -> Node | None:
        return self._nodes_by_name.get(hostname)

    @functools.cached_property
    def _nodes_by_name(self) -> dict[str, Node]:
        return {n.hostname: n for n in self.nodes}

    def to_dict(self) -> dict[str, Any]:
        return {"irVersion": IR_VERSION, **_to_plain(self)}

    def to_json(self) -> str:
        """fleet.json: one top-level key per line and one list item (node, partition,
        ...) per line, so diffs read per node and the C encoder keeps 20,000 nodes fast."""
        import json  # here: only rendering writes fleet.json (startup time)

        encode = json.JSONEncoder(separators=(", ", ": ")).encode  # one encoder, not one per node
        seen: dict[int, Any] = {}
        names = ["irVersion", *(f.name for f in dataclasses.fields(self) if not f.metadata.get("location")
                                and not (f.metadata.get("optional") and getattr(self, f.name) == f.default))]
        lines = ["{"]
        for i, key in enumerate(names):
            comma = "," if i < len(names) - 1 else ""
            value = IR_VERSION if key == "irVersion" else getattr(self, key)
            if type(value) is tuple and value:
                # Item by item: the plain form of 100,000 nodes is never held at once.
                lines.append(f"  {encode(key)}: [")
                lines.append(",\n".join(f"    {encode(_convert_item(v, seen))}" for v in value))
                lines.append(f"  ]{comma}")
            else:
                lines.append(f"  {encode(key)}: {encode(_convert(value, seen))}{comma}")
        lines.append("}\n")  # the final newline inside the join: no second 45 MB copy at 100,000 nodes
        return "\n".join(lines)


def _to_plain(value: Any) -> Any:
    """Dataclasses to dicts, tuples to lists, location fields dropped. Each dataclass
    type gets a generated converter (field names resolved once), and an instance that
    many nodes share (their GpuSpec) is converted once per call."""
    return _convert(value, {})


_SCALARS = frozenset({str, int, float, bool, type(None)})


def _convert(value: Any, seen: dict[int, Any]) -> Any:
    kind = type(value)
    if kind in _SCALARS:
        return value
    if kind is tuple or kind is list:
        return [_convert(v, seen) for v in value]
    converter = _CONVERTERS.get(kind)
    if converter is None:
        if isinstance(value, tuple) and hasattr(kind, "_fields"):
            converter = _CONVERTERS[kind] = _record_converter(kind)
        elif not (dataclasses.is_dataclass(value) and not isinstance(value, type)):
            return value
        else:
            converter = _CONVERTERS[kind] = _converter_for(kind)
    key = id(value)
    done = seen.get(key)
    if done is None:
        done = seen[key] = (value, converter(value, seen))
    return done[1]


def _convert_item(value: Any, seen: dict[int, Any]) -> Any:
    """A list item of the fleet (a node, a partition) converted without being remembered:
    only what items share (a node's GpuSpec) stays in ``seen``."""
    kind = type(value)
    if kind in _SCALARS or not dataclasses.is_dataclass(value):
        return _convert(value, seen)
    converter = _CONVERTERS.get(kind) or _CONVERTERS.setdefault(kind, _converter_for(kind))
    return converter(value, seen)


def _record_converter(kind: type) -> Any:
    """A NamedTuple record to a dict, its ``path`` (a location) left out."""
    names = tuple(f for f in kind._fields if f != "path")  # type: ignore[attr-defined]

    def converter(value: Any, seen: dict[int, Any]) -> dict[str, Any]:
        return {name: _convert(getattr(value, name), seen) for name in names}

    return converter


def _converter_for(kind: type) -> Any:
    hints = typing.get_type_hints(kind)
    parts, optional = [], []
    for f in dataclasses.fields(kind):
        if f.metadata.get("location"):
            continue
        access = f"value.{f.name}"
        shape = _shape(hints[f.name])
        text = access if shape == "scalar" else f"list({access})" if shape == "scalars" else f"convert({access}, seen)"
        if f.metadata.get("optional"):
            optional.append(f"    if {access} != {f.default!r}:\n        out[{f.name!r}] = {text}\n")
        else:
            parts.append(f"{f.name!r}: {text}")
    namespace: dict[str, Any] = {"convert": _convert}
    body = f"    out = {{{', '.join(parts)}}}\n" + "".join(optional) + "    return out\n"
    exec("def converter(value, seen):\n" + body, namespace)  # field names only
    return namespace["converter"]


def _shape(hint: Any) -> str:
    """'scalar' (written as it is), 'scalars' (a tuple of scalars: a list), or 'other'."""
    origin = typing.get_origin(hint)
    if hint in _SCALARS or origin is Literal:
        return "scalar"
    if origin in (typing.Union, types.UnionType):
        return "scalar" if all(_shape(a) == "scalar" for a in typing.get_args(hint)) else "other"
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis and _shape(args[0]) == "scalar":
            return "scalars"
    return "other"


_CONVERTERS: dict[type, Any] = {}
