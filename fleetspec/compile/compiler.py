"""FleetSpec -> Fleet: expand hostlists, resolve GPUs and stacks, build partitions.

The compiler reports structural problems itself (bad hostlists, duplicate hosts,
unknown GPU models and stacks) as findings and leaves the offending node groups out,
so that the rules still run over the rest and a user sees every problem at once. Any
error finding makes the result invalid; renderers refuse invalid results.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Iterable
from typing import Any, NamedTuple

from fleetspec.catalog import Catalog, GpuModel
from fleetspec.compile import ir
from fleetspec.compile import mig as mig_geometry
from fleetspec.compile.baremetal import build_baremetal
from fleetspec.compile.partitions import build_partitions
from fleetspec.findings import Finding, Severity, SpecPath, dotted
from fleetspec.node_side.faults import default_actions
from fleetspec.node_side.hostlist import MAX_HOSTS, HostlistError, HostlistTooLarge, expand, is_kubernetes_name
from fleetspec.spec import model as m
from fleetspec.versions import at_least, parse_version

NVIDIA_KEYS = set(ir.NVIDIA_TUPLE_KEYS)
AMD_KEYS = set(ir.AMD_TUPLE_KEYS)


def _claim(host: str, group_path: SpecPath, first_seen: dict[str, SpecPath], findings: list[Finding]) -> bool:
    """Record ``host`` as ``group_path``'s; a host some group (GPU or CPU) already has is a
    finding. Hostnames ignore case (DNS, RFC 4343): AMD7763 and amd7763 are one host."""
    key = host.lower()
    if key in first_seen:
        findings.append(Finding(
            "duplicate-host", Severity.ERROR,
            f"host '{host}' is listed twice (first at {dotted(first_seen[key])}; hostnames ignore case). "
            "Each host belongs to exactly one node group: remove it from one of them",
            group_path + ("hosts",),
        ))
        return False
    first_seen[key] = group_path
    return True


class Built(NamedTuple):
    """What :func:`build_fleet` made of a spec, kept to build another revision of it beside
    (``plan --base``): the spec, the fleet, the findings after the stacks' own, and the
    stacks whose contents the rest of the build looked into (by name)."""

    spec: m.FleetSpec
    fleet: ir.Fleet
    findings: tuple[Finding, ...]
    opened: frozenset[str]


class _StackIndex(dict[str, ir.StackTuple]):
    """The stacks by name for the rest of the build. ``name in index`` and the names read only
    names; taking a stack out (``index[name]``, ``get``, ``values``, ``items``) notes its name
    in ``opened``: what the build made may then depend on what that stack pins."""

    def __init__(self, stacks: Iterable[ir.StackTuple]) -> None:
        super().__init__((s.name, s) for s in stacks)
        self.opened: set[str] = set()

    def __getitem__(self, name: str) -> ir.StackTuple:
        self.opened.add(name)
        return super().__getitem__(name)

    def get(self, name: str, default: Any = None) -> Any:
        if name in self:
            self.opened.add(name)
        return super().get(name, default)

    def values(self) -> Any:
        self.opened.update(self)
        return super().values()

    def items(self) -> Any:
        self.opened.update(self)
        return super().items()


def build_stacks(body: m.FleetBody, catalog: Catalog) -> tuple[tuple[ir.StackTuple, ...], list[Finding]]:
    """The stack tuples, sorted by name, and their findings: what reads the spec's stacks
    (the rest of the build reaches them through :class:`_StackIndex`)."""
    findings: list[Finding] = []
    stacks = tuple(sorted((_stack(name, s, catalog, findings) for name, s in body.stacks.items()), key=lambda s: s.name))
    return stacks, findings


def build_beside(spec: m.FleetSpec, catalog: Catalog, beside: Built) -> tuple[ir.Fleet, list[Finding]] | None:
    """``build_fleet(spec)`` from another revision's build when the two specs differ only in
    what their stacks pin (a tuple bump, the usual pull request): the same stack names, every
    other key equal, and every stack the build looked into (``beside.opened``) the same, so
    the rest of the build had the same input. None when they differ elsewhere."""
    other = beside.spec
    if any(getattr(spec, key) != getattr(other, key) for key in type(spec).model_fields if key != "spec"):
        return None
    if list(spec.spec.stacks) != list(other.spec.stacks):
        return None
    if any(getattr(spec.spec, key) != getattr(other.spec, key) for key in type(spec.spec).model_fields if key != "stacks"):
        return None
    stacks, findings = build_stacks(spec.spec, catalog)
    if any(s != beside.fleet.stack(s.name) for s in stacks if s.name in beside.opened):
        return None
    return dataclasses.replace(beside.fleet, stacks=stacks), findings + list(beside.findings)


def build_fleet(spec: m.FleetSpec, catalog: Catalog) -> tuple[ir.Fleet, list[Finding]]:
    fleet, findings, _ = build_kept(spec, catalog)
    return fleet, findings


def build_kept(spec: m.FleetSpec, catalog: Catalog) -> tuple[ir.Fleet, list[Finding], Built]:
    """:func:`build_fleet`, and what :func:`build_beside` needs to build another revision beside it."""
    body = spec.spec
    stacks, findings = build_stacks(body, catalog)
    stack_findings = len(findings)
    stack_index = _StackIndex(stacks)

    nodes: list[ir.Node] = []
    cpu_nodes: list[ir.CpuNode] = []
    racks: list[ir.Rack] = []
    first_seen: dict[str, tuple[str | int, ...]] = {}
    leaves: list[str] = []
    dropped_hosts: set[str] = set()
    budget = _HostBudget()
    for r_i, rack in enumerate(body.racks):
        rack_path = ("spec", "racks", r_i)
        if rack.leaf and rack.leaf not in leaves:
            leaves.append(rack.leaf)
        rack_nodes: list[str] = []
        for g_i, group in enumerate(rack.nodes):
            group_path = rack_path + ("nodes", g_i)
            hosts = _expand(group.hosts, group_path + ("hosts",), findings, budget)
            gpu = catalog.gpu(group.gpu.model)
            if gpu is None:
                hint = catalog.suggest_gpu(group.gpu.model)
                did = f" Did you mean '{hint[0]}'?" if hint else ""
                findings.append(Finding(
                    "unknown-gpu-model", Severity.ERROR,
                    f"GPU model '{group.gpu.model}' is not in the catalog.{did} "
                    "Run 'fleetspec catalog' to list the known models",
                    group_path + ("gpu", "model"),
                ))
            else:
                findings.extend(_board_findings(catalog, gpu, group.gpu.model, group.gpu.count, group_path))
            if group.stack not in stack_index:
                known = ", ".join(sorted(stack_index)) or "(none defined)"
                close = difflib.get_close_matches(group.stack, list(stack_index), n=1)
                did = f" Did you mean '{close[0]}'?" if close else ""
                findings.append(Finding(
                    "unknown-stack", Severity.ERROR,
                    f"stack '{group.stack}' is not defined under spec.stacks.{did} Define it, or use one of: {known}",
                    group_path + ("stack",),
                ))
            if hosts is None or gpu is None or group.stack not in stack_index:
                dropped_hosts.update(hosts or ())  # reported already; do not cascade
                continue
            gpu_spec = gpu_spec_of(gpu, group.gpu.count, group.gpu)
            other_gpus = _other_gpus(group, gpu, body, catalog, group_path, findings)
            mig, mig_config = mig_geometry.resolve(group, gpu, group_path, findings,
                                                   slinky=body.slurm is not None and body.slurm.mode == "slinky",
                                                   driver=(stack_index[group.stack].driver
                                                           if group.gpu.mig is not None else None))
            replicas = mig_geometry.time_slicing(group, gpu, group_path, findings,
                                                 dra_gpus=bool(body.kubernetes and body.kubernetes.dra
                                                               and body.kubernetes.dra.gpus))
            if group.other_gres and (group.scheduler != "slurm" or (body.slurm and body.slurm.mode != "native")):
                findings.append(Finding("schema", Severity.ERROR, "other_gres are Slurm GRES of host-mode nodes: "
                                        "remove them, or schedule the group with native Slurm",
                                        group_path + ("other_gres",), "key"))
            if "mps" in group.other_gres and gpu.vendor != "nvidia":
                findings.append(Finding("schema", Severity.ERROR, "mps is CUDA's Multi-Process Service, NVIDIA only: "
                                        "use shard to share AMD GPUs", group_path + ("other_gres", "mps"), "key"))
            on_kubernetes = group.scheduler == "kubernetes" or (body.slurm is not None and body.slurm.mode != "native")
            upper = [h for h in hosts if on_kubernetes and not is_kubernetes_name(h)]
            if upper:
                findings.append(Finding(
                    "bad-hostlist", Severity.ERROR,
                    f"'{upper[0]}' has upper-case letters: Kubernetes node names are lower-case DNS labels, and "
                    "these nodes run under Kubernetes. Write the hostnames in lower case (DNS ignores case)",
                    group_path + ("hosts",)))
            for host in hosts:
                if not _claim(host, group_path, first_seen, findings):
                    continue
                rack_nodes.append(host)
                nodes.append(ir.Node(
                    hostname=host,
                    rack=rack.name,
                    leaf=rack.leaf,
                    nvlink_domain=rack.name if rack.nvlink_domain == "rack" else None,
                    gpu=gpu_spec,
                    stack=group.stack,
                    scheduler=group.scheduler,
                    partition=group.partition or "",  # filled in by build_partitions
                    cpus=group.cpus,
                    sockets=group.sockets,
                    cores_per_socket=group.cores_per_socket,
                    threads_per_core=group.threads_per_core,
                    memory_gb=group.memory_gb,
                    features=tuple(group.features),
                    path=group_path,
                    real_memory_mb=group.real_memory_mb,
                    other_gres=tuple(sorted(group.other_gres.items())),
                    other_gpus=other_gpus,
                    mig=mig,
                    mig_config=mig_config,
                    time_slicing=replicas,
                ))
        for g_i, cpu_group in enumerate(rack.cpu_nodes):
            group_path = rack_path + ("cpu_nodes", g_i)
            for s_i, item in enumerate(cpu_group.site_gres):
                known = catalog.gpu(item.split(":")[1])
                if known is not None:  # a GPU fleetspec models is a GPU node group, stack and all
                    findings.append(Finding(
                        "schema", Severity.ERROR,
                        f"site_gres {item} names the catalog's {known.id}: declare these nodes as a GPU node group "
                        f"(nodes: with gpu: {{model: {known.id}}}) so fleetspec installs and verifies their stack",
                        group_path + ("site_gres", s_i)))
            for host in _expand(cpu_group.hosts, group_path + ("hosts",), findings, budget) or ():
                if not _claim(host, group_path, first_seen, findings):
                    continue
                cpu_nodes.append(ir.CpuNode(
                    host, rack.name, cpu_group.cpus, cpu_group.sockets, cpu_group.cores_per_socket,
                    cpu_group.threads_per_core, cpu_group.memory_gb, cpu_group.real_memory_mb,
                    tuple(cpu_group.features), group_path, tuple(cpu_group.site_gres)))
        racks.append(ir.Rack(rack.name, rack.leaf, rack.nvlink_domain == "rack", tuple(rack_nodes), rack_path))

    site_types = {ref.gres for r in body.racks for g in r.nodes for ref in (g.gpu, *g.other_gpus) if ref.gres}
    slurm = _slurm(body.slurm, findings, catalog, budget, site_types)
    if cpu_nodes and (body.slurm is None or body.slurm.mode != "native"):
        findings.append(Finding(
            "schema", Severity.ERROR,
            "cpu_nodes are Slurm nodes on hosts fleetspec configures: they need spec.slurm with mode: native "
            "(Slinky and Kubernetes schedule only GPU node groups)", cpu_nodes[0].path))
    kubernetes = _kubernetes(body.kubernetes, catalog)
    if body.kubernetes is not None:
        _check_tenant_namespaces(body.kubernetes, findings)
    nodes_t, partitions = build_partitions(tuple(nodes), slurm, findings, dropped_hosts,
                                           {n.hostname for n in cpu_nodes})
    mig_geometry.check_partitions(nodes_t, partitions, findings)
    kubernetes = _default_dra_driver(kubernetes, body.kubernetes, nodes_t, catalog)
    partitions = tuple(dataclasses.replace(p, device_names=_device_names(p.gpu_models, catalog))
                       for p in partitions)
    fabric = (
        ir.Fabric(body.fabric.type, tuple(body.fabric.spines), tuple(leaves), ("spec", "fabric"))
        if body.fabric else None
    )
    fleet = ir.Fleet(
        name=spec.metadata.name,
        os=body.os,
        stacks=stacks,
        fabric=fabric,
        racks=tuple(racks),
        nodes=nodes_t,
        partitions=partitions,
        slurm=slurm,
        kubernetes=kubernetes,
        suppress=tuple(body.suppress),
        secrets=_needed_secrets(body, findings),
        package_mirror=_mirror(body, findings),
        registry_mirror=body.packages.registry_mirror,
        chart_repository=body.packages.chart_repository,
        health=_health(body.health),
        baremetal=build_baremetal(body, nodes_t, partitions, findings),
        cpu_nodes=tuple(cpu_nodes),
        site_gpu_names=tuple((gpu_id, catalog.gpus[gpu_id].name) for gpu_id in sorted(catalog.site_models)),
    )
    return fleet, findings, Built(spec, fleet, tuple(findings[stack_findings:]), frozenset(stack_index.opened))


def _health(health: m.Health | None) -> ir.HealthPolicy | None:
    if health is None:
        return None
    actions = {**default_actions(), **health.actions}
    return ir.HealthPolicy(health.interval, tuple(dict.fromkeys(health.checks)), tuple(sorted(actions.items())),
                           tuple(dict.fromkeys(health.slurm_node_state)), dcgm_level=health.dcgm_level,
                           min_healthy=str(health.min_healthy),
                           path=("spec", "health"))


def _device_names(models: Iterable[str], catalog: Catalog) -> tuple[str, ...]:
    names = set()
    for model in models:
        gpu = catalog.gpu(model)
        if gpu is not None:
            names.update(gpu.smi_names)
    return tuple(sorted(names))


def _default_dra_driver(cfg: ir.KubernetesConfig | None, k: m.Kubernetes | None,
                        nodes: tuple[ir.Node, ...], catalog: Catalog) -> ir.KubernetesConfig | None:
    """Kubernetes-owned NVLink-domain racks (GB200 NVL72) get NVIDIA's DRA driver, pinned by
    the catalog, unless the spec says otherwise (``dra: {}`` opts out): without its
    ComputeDomains pods get no multi-node NVLink. Only where DRA exists (1.34+)."""
    if cfg is None or k is None or k.dra is not None or not parse_version(cfg.version):
        return cfg
    if not at_least(cfg.version, catalog.kubernetes_feature("dra_ga")["since"]):
        return cfg
    if any(n.scheduler == "kubernetes" and n.nvlink_domain and n.gpu.vendor == "nvidia" for n in nodes):
        return dataclasses.replace(cfg, dra_nvidia_version=str(catalog.component("nvidia_dra_driver")["latest"]))
    return cfg


def _mirror(body: m.FleetBody, findings: list[Finding]) -> ir.PackageSource | None:
    mirror = body.packages.mirror
    if mirror is None:
        return None
    path = ("spec", "packages", "mirror")
    if mirror.trusted and not mirror.uri.startswith("file:"):
        findings.append(Finding("schema", Severity.ERROR,
                                f"mirror {mirror.uri} is marked trusted (no signature check), which only a file: "
                                "repository on the node may be. Give key_url instead", path + ("trusted",)))
    elif not mirror.trusted and mirror.key_url is None:
        findings.append(Finding("schema", Severity.ERROR,
                                f"mirror {mirror.uri} has no key_url: apt must check its signature. Add key_url "
                                "(its signing key), or trusted: true for a file: repository", path))
    return ir.PackageSource(mirror.uri, mirror.suite, mirror.components, mirror.key_url, mirror.trusted, path)


def _needed_secrets(body: m.FleetBody, findings: list[Finding]) -> tuple[tuple[str, str], ...]:
    """The secret references this fleet uses (a Slurm-only fleet needs no Pulumi passphrase);
    a warning for each reference in the deprecated ``vault:`` spelling."""
    s = body.secrets
    for name in type(s).model_fields:
        ref = getattr(s, name)
        if isinstance(ref, str) and ref.startswith("vault:"):
            findings.append(Finding("schema", Severity.WARNING,
                                    f"'vault:' is the old spelling of 'ansible-vault:' (an Ansible Vault file); "
                                    f"write 'ansible-vault:{ref[len('vault:'):]}' (HashiCorp Vault is "
                                    f"'hashicorp-vault:MOUNT/PATH#KEY')", ("spec", "secrets", name)))
    needed: list[tuple[str, str | None]] = []
    if body.slurm is not None and body.slurm.mode == "native":
        needed.append(("munge_key", s.munge_key))
    if body.slurm is not None and body.slurm.accounting is not None:
        needed.append(("slurmdbd_password", s.slurmdbd_password))
    if body.kubernetes is not None:
        needed.append(("pulumi_passphrase", s.pulumi_passphrase))
        needed.append(("registry_password", s.registry_password))
    return tuple((k, v) for k, v in needed if v is not None)


class _HostBudget:
    """What is left of the fleet-wide bound on expanded hostnames (`MAX_HOSTS`)."""

    def __init__(self) -> None:
        self.left = MAX_HOSTS


def _expand(hostlist: str, path: tuple[str | int, ...], findings: list[Finding],
            budget: _HostBudget) -> list[str] | None:
    try:
        hosts = expand(hostlist, limit=budget.left)
    except HostlistError as exc:
        findings.append(Finding("bad-hostlist", Severity.ERROR, str(exc), path))
        if isinstance(exc, HostlistTooLarge):
            budget.left = 0  # over the fleet's bound: expand nothing more
        return None
    budget.left -= len(hosts)
    return hosts


def _stack(name: str, s: m.Stack, catalog: Catalog, findings: list[Finding]) -> ir.StackTuple:
    path = ("spec", "stacks", name)
    given = {k for k, v in s if v is not None}  # (not model_dump: no serializer built at start)
    vendor = "amd" if given & AMD_KEYS and not given & NVIDIA_KEYS else "nvidia"
    if given & AMD_KEYS and given & NVIDIA_KEYS:
        findings.append(Finding(
            "stack-vendor-mismatch", Severity.ERROR,
            f"stack '{name}' mixes NVIDIA keys ({', '.join(sorted(given & NVIDIA_KEYS))}) and AMD keys "
            f"({', '.join(sorted(given & AMD_KEYS))}). A tuple is one vendor's: split it into two stacks",
            path,
        ))
    missing = [k for k in (("driver", "cuda", "nccl") if vendor == "nvidia" else ("rocm",)) if k not in given]
    if missing:
        findings.append(Finding(
            "schema", Severity.ERROR,
            f"stack '{name}' has no {', '.join(missing)}. An {'NVIDIA' if vendor == 'nvidia' else 'AMD'} tuple "
            f"pins {'driver, cuda and nccl (cudnn optional)' if vendor == 'nvidia' else 'rocm (rccl and amdgpu optional)'}: add them",
            path,
        ))
    resolved: list[str] = []
    rccl, amdgpu = s.rccl, s.amdgpu
    release = catalog.rocm_release(s.rocm) if vendor == "amd" and s.rocm else None
    if release is not None and rccl is None and release.facts.get("rccl"):
        rccl = str(release.facts["rccl"])  # the RCCL this ROCm release bundles
        resolved.append("rccl")
    return ir.StackTuple(
        name=name, vendor=vendor,  # type: ignore[arg-type]
        driver=s.driver, cuda=s.cuda, cudnn=s.cudnn, nccl=s.nccl,
        amdgpu=amdgpu, rocm=s.rocm, rccl=rccl, resolved=tuple(resolved),
        firmware=tuple((k, v) for k, v in s.firmware if v is not None) if s.firmware else (), path=path, dcgm=s.dcgm,
        mok_certificate=s.secure_boot.mok_certificate if s.secure_boot else None,
        mok_signing_key=s.secure_boot.mok_signing_key if s.secure_boot else None,
    )


def _slurm(s: m.Slurm | None, findings: list[Finding], catalog: Catalog,
           budget: _HostBudget, site_types: set[str] | frozenset[str] = frozenset()) -> ir.SlurmConfig | None:
    if s is None:
        return None
    path = ("spec", "slurm")
    controllers = _expand(s.controllers, path + ("controllers",), findings, budget) or []
    settings = tuple(
        ir.SlurmPartitionSettings(
            name=name, nodes=p.nodes, default=p.default, max_time=p.max_time, state=p.state,
            allow_mixed_generations=p.allow_mixed_generations, path=path + ("partitions", name),
        )
        for name, p in sorted(s.partitions.items())
    )
    if s.containers == "pyxis" and s.pyxis is None and s.mode == "native":
        findings.append(Finding(
            "schema", Severity.ERROR,
            "containers: pyxis needs the Enroot and Pyxis releases to pin. Add slurm.pyxis: "
            '{enroot: "3.5.0", pyxis: "0.20.0"} (the versions your package repository carries)',
            path + ("containers",),
        ))
    gres_types = {g.gres for g in catalog.gpus.values()} | site_types
    for gres_type in sorted(set(s.gpu_billing_weights) - gres_types):
        findings.append(Finding(
            "schema", Severity.ERROR,
            f"gpu_billing_weights names '{gres_type}', which is no GPU's GRES type. Use the types Slurm "
            f"sees (gres.conf Type=): {', '.join(sorted(gres_types))}",
            path + ("gpu_billing_weights", gres_type), "key"))
    if s.converge is not None and s.mode != "native":
        findings.append(Finding(
            "schema", Severity.ERROR,
            "converge: nodes converge themselves before slurmd starts, which needs slurmd on the host "
            "(mode: native); on Slinky the GPU Operator rolls the driver. Remove slurm.converge",
            path + ("converge",), "key"))
    slinky_version = None
    if s.mode == "slinky":
        slinky_version = s.slinky.version if s.slinky else str(catalog.component("slinky")["latest"])
    return ir.SlurmConfig(
        version=s.version, mode=s.mode, controllers=tuple(controllers),
        accounting_host=s.accounting.host if s.accounting else None,
        containers=s.containers, partition_settings=settings, slinky_version=slinky_version,
        slinky_database_clients=tuple(s.slinky.database_clients) if s.slinky else (),
        enroot_version=s.pyxis.enroot if s.pyxis else None, pyxis_version=s.pyxis.pyxis if s.pyxis else None,
        state_save_location=s.state_save_location, gres_autodetect=s.gres_autodetect, cluster_name=s.cluster_name,
        gpu_billing_weights=tuple(sorted(s.gpu_billing_weights.items())),
        slurm_ids=(s.users.slurm.uid, s.users.slurm.gid), munge_ids=(s.users.munge.uid, s.users.munge.gid),
        tenants=tuple(
            ir.SlurmTenant(t.name, tuple(t.users), tuple(t.groups), tuple(sorted(t.quota.items())), t.fairshare,
                           path + ("tenants", i))
            for i, t in enumerate(s.tenants)),
        converge=ir.SlurmConverge(s.converge.bundles.rstrip("/"), s.converge.public_key,
                                  s.converge.results.rstrip("/") or "/", path + ("converge",))
        if s.converge is not None and s.mode == "native" else None,
        path=path,
    )


def _check_tenant_namespaces(k: m.Kubernetes, findings: list[Finding]) -> None:
    """A tenant namespace is its own: not Kubernetes' or an operator's, and one tenant's only."""
    owner: dict[str, tuple[str, tuple[str | int, ...]]] = {}
    names: dict[str, int] = {}
    for i, tenant in enumerate(k.tenants):
        path = ("spec", "kubernetes", "tenants", i)
        if tenant.name in names:
            findings.append(Finding("schema", Severity.ERROR, f"tenant name '{tenant.name}' is used twice (first "
                                    f"at tenants[{names[tenant.name]}]). Give each tenant its own name",
                                    path + ("name",)))
        names.setdefault(tenant.name, i)
        for j, ns in enumerate(tenant.namespaces):
            where = path + ("namespaces", j)
            if ns in m.RESERVED_NAMESPACES or ns.startswith("kube-"):
                findings.append(Finding("schema", Severity.ERROR, f"namespace '{ns}' belongs to Kubernetes or to "
                                        "an operator fleetspec installs: a tenant's queues and quota must not reach "
                                        "it. Give the tenant a namespace of its own", where))
            elif ns in owner:
                first, first_path = owner[ns]
                who = "this tenant" if first == tenant.name else f"tenant '{first}'"
                findings.append(Finding("schema", Severity.ERROR, f"namespace '{ns}' is already {who}'s (at "
                                        f"{dotted(first_path)}): two LocalQueues of one name would compete in it. "
                                        "List each namespace once, under one tenant", where))
            else:
                owner[ns] = (tenant.name, where)


def _kubernetes(k: m.Kubernetes | None, catalog: Catalog) -> ir.KubernetesConfig | None:
    if k is None:
        return None
    path = ("spec", "kubernetes")
    gang = k.gang or (k.queueing if k.queueing in ("volcano", "kai") else "kueue")
    owners: Iterable[str] = k.quota_owners if k.quota_owners is not None else (
        [k.queueing] if k.queueing != "none" else []
    )
    tenants = tuple(
        ir.Tenant(t.name, tuple(t.namespaces), tuple(sorted(t.quota.items())), t.over_quota_weight,
                  tuple(sorted(t.limit.items())), path + ("tenants", i))
        for i, t in enumerate(k.tenants)
    )
    return ir.KubernetesConfig(
        version=k.version,
        gpu_operator=ir.GpuOperatorConfig(k.gpu_operator.version, k.gpu_operator.driver, path + ("gpu_operator",))
        if k.gpu_operator else None,
        amd_gpu_operator_version=k.amd_gpu_operator.version if k.amd_gpu_operator else None,
        queueing=k.queueing,
        gang=gang,
        quota_owners=tuple(sorted(set(owners))),
        tenants=tenants,
        kueue_version=k.kueue.version if k.kueue else (
            str(catalog.component("kueue")["latest"]) if k.queueing == "kueue" else None),
        volcano_version=k.volcano.version if k.volcano else (
            str(catalog.component("volcano")["latest"]) if k.queueing == "volcano" or gang == "volcano" else None),
        gang_timeout=k.gang_policy.timeout,
        gang_recovery_timeout=k.gang_policy.recovery_timeout,
        gang_requeue_limit=k.gang_policy.requeue_limit,
        kai_version=k.kai.version if k.kai else (
            str(catalog.component("kai")["latest"]) if "kai" in (k.queueing, gang) else None),
        ray_version=k.ray.version if k.ray else None,
        dra_nvidia_version=k.dra.nvidia.version if k.dra and k.dra.nvidia else None,
        dra_gpus=bool(k.dra and k.dra.gpus),
        integrations=tuple(sorted(set(k.integrations))),
        quota_owners_explicit=k.quota_owners is not None,
        amd_driver=k.amd_gpu_operator.driver if k.amd_gpu_operator else "operator",
        amd_driver_image=k.amd_gpu_operator.driver_image if k.amd_gpu_operator else None,
        amd_registry_secret=k.amd_gpu_operator.registry_secret if k.amd_gpu_operator else None,
        network_operator_enabled=k.network_operator.enabled,
        network_operator_version=k.network_operator.version,
        network_rdma=k.network_operator.rdma,
        path=path,
    )


def _other_gpus(group: m.NodeGroup, primary: GpuModel, body: m.FleetBody, catalog: Catalog,
                path: SpecPath, findings: list[Finding]) -> tuple[ir.GpuSpec, ...]:
    """A node group's further GPU models (``other_gpus``). One vendor per node: NCCL and
    RCCL cannot share its stack tuple. Another generation is a warning: the node stays in
    its primary model's partition and the tuple rules check that model only."""
    out: list[ir.GpuSpec] = []
    seen = {primary.id}
    for i, ref in enumerate(group.other_gpus):
        where = path + ("other_gpus", i, "model")
        gpu = catalog.gpu(ref.model)
        if gpu is None:
            hint = catalog.suggest_gpu(ref.model)
            findings.append(Finding("unknown-gpu-model", Severity.ERROR, f"GPU model '{ref.model}' is not in the "
                                    f"catalog.{f' Did you mean {hint[0]!r}?' if hint else ''} Run 'fleetspec "
                                    "catalog' to list the known models, or declare it in spec.gpu_models", where))
            continue
        if gpu.id in seen:
            findings.append(Finding("schema", Severity.ERROR, f"{gpu.id} is listed twice for these nodes: give "
                                    "each model once, with its whole count", where))
            continue
        seen.add(gpu.id)
        if gpu.vendor != primary.vendor:
            findings.append(Finding("schema", Severity.ERROR, f"{gpu.id} is {gpu.vendor}, the nodes' gpu "
                                    f"{primary.id} is {primary.vendor}: a node has one stack tuple, and NCCL and "
                                    "RCCL cannot share one. Move these GPUs to nodes of their own", where))
            continue
        spec = gpu_spec_of(gpu, ref.count, ref)
        if not spec.gres_type or not group.gpu.typed:
            findings.append(Finding("schema", Severity.ERROR, "other_gpus are typed GRES: Slurm tells the models "
                                    "of one node apart only by type. Type every GPU (gres:, or the model's)", where))
            continue
        if spec.gres_type in {ref_type(group.gpu, primary), *(o.gres_type for o in out)}:
            findings.append(Finding("schema", Severity.ERROR, f"{gpu.id} has the GRES type '{spec.gres_type}' of "
                                    "another model of these nodes: Slurm could not tell them apart", where))
            continue
        if gpu.generation != primary.generation:
            findings.append(Finding("schema", Severity.WARNING, f"{ref.count}x {gpu.id} ({gpu.generation}) beside "
                                    f"{group.gpu.count}x {primary.id} ({primary.generation}): the nodes stay in "
                                    f"the {primary.generation} partition; jobs get the {gpu.id}s by asking for "
                                    f"gpu:{gpu.gres}, an untyped gpu:N may mix the two, and the stack rules check "
                                    f"{primary.id} only", where))
        out.append(spec)
    if out and (group.scheduler != "slurm" or (body.slurm and body.slurm.mode != "native")):
        findings.append(Finding("schema", Severity.ERROR, "other_gpus are typed Slurm GRES of host-mode nodes: "
                                "Kubernetes device plugins give one resource per vendor. Schedule the group with "
                                "native Slurm, or split the GPUs", path + ("other_gpus",), "key"))
    if out and group.other_gres:
        findings.append(Finding("schema", Severity.ERROR, "other_gres (mps, shard) with other_gpus: gres.conf "
                                "would have to split them per model; give one of the two",
                                path + ("other_gres",), "key"))
    return tuple(out)


def ref_type(ref: m.GpuRef, gpu: GpuModel) -> str:
    """The Slurm GRES type a node group's ``gpu`` reference gives ("" for untyped)."""
    return gpu_spec_of(gpu, ref.count, ref).gres_type


def gpu_spec_of(gpu: GpuModel, count: int, ref: m.GpuRef | None = None) -> ir.GpuSpec:
    """A node group's ``count`` GPUs of catalog model ``gpu``, as the IR carries them. The
    Slurm GRES type is the model's, or the site's (``ref.gres``: an adopted cluster's
    ``volta``), or "" for untyped GRES (``typed: false``)."""
    gres = gpu.gres if ref is None else ("" if not ref.typed else ref.gres or gpu.gres)
    return ir.GpuSpec(model=gpu.id, count=count, vendor=gpu.vendor,  # type: ignore[arg-type]
                      generation=gpu.generation, gres_type=gres, memory_gb=gpu.memory_gb, cpu_arch=gpu.cpu_arch)


def _board_findings(catalog: Catalog, gpu: GpuModel, spelled: str, count: int,
                    path: tuple[str | int, ...]) -> list[Finding]:
    """What the GPU's form factor says of the node group (#28 item 7): more GPUs than one
    node's baseboard carries; an alias that names other form factors too (h100-80gb: SXM5
    and PCIe), which decides NVSwitch, the fabric manager and the GRES type."""
    out = []
    cite = f" (source: {catalog.source_urls(gpu.sources[-1:])[0]})" if gpu.sources else ""
    if gpu.max_gpus_per_node is not None and count > gpu.max_gpus_per_node:
        make = Severity.ERROR if gpu.confirmed("max_gpus_per_node") else Severity.WARNING
        out.append(Finding(
            "gpu-count", make,
            f"count {count}: a node carries at most {gpu.max_gpus_per_node} {gpu.name} GPUs (one baseboard){cite}. "
            f"Give the GPUs of one node (<= {gpu.max_gpus_per_node})", path + ("gpu", "count"),
        ))
    wanted = spelled.strip().lower()
    for alias, others in gpu.ambiguous_aliases:
        if alias == wanted:
            names = [gpu.id, *others]
            out.append(Finding(
                "ambiguous-gpu-model", Severity.WARNING,
                f"GPU model '{spelled}' names more than one form factor: {' or '.join(names)}; fleetspec reads it as "
                f"{gpu.id} ({gpu.name}: {'NVSwitch, fabric manager' if gpu.nvswitch else gpu.interconnect}). "
                f"Write the one the nodes have: {', '.join(names)}", path + ("gpu", "model"),
            ))
    return out
