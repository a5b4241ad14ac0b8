"""Every rule fleetspec applies, in one explicit tuple.

No import-time self-registration: adding a rule means adding it here, with a doc in
``rules/docs/<id>.md`` and pass/fail fixtures in ``tests/rules/fixtures/<id>/`` (the
meta-tests enforce all three).
"""

from __future__ import annotations

from fleetspec.catalog import Catalog
from fleetspec.compile.ir import Fleet
from fleetspec.findings import Finding, Severity
from fleetspec.rules import adoption, firmware, packaging, scheduling, stack_versions, topology, workload_plane
from fleetspec.rules.base import Rule

E, W = Severity.ERROR, Severity.WARNING

RULES: tuple[Rule, ...] = (
    # Reported while loading and compiling (they decide whether an IR exists at all).
    Rule("invalid-yaml", E, "the file is not readable YAML, is empty, too large or hostile", stage="compile"),
    Rule("schema", E, "unknown key, wrong type or value, missing key, unquoted version", stage="compile", warns=True),
    Rule("bad-hostlist", E, "a hostlist expression that does not expand", stage="compile"),
    Rule("duplicate-host", E, "a host listed in two node groups", stage="compile"),
    Rule("unknown-gpu-model", E, "a GPU model the catalog does not know", stage="compile"),
    Rule("gpu-count", E, "more GPUs in a node than its GPU's baseboard carries", stage="compile", warns=True),
    Rule("mig-geometry", E, "a MIG geometry the GPU model cannot hold (unknown profile, too many instances, "
         "instances that cannot be placed together, a combination the driver refuses)",
         stage="compile"),
    Rule("ambiguous-gpu-model", W, "a GPU alias that names more than one form factor (h100-80gb: SXM5 or PCIe)",
         stage="compile", warns=True),
    Rule("unknown-stack", E, "a node group names a stack that is not defined", stage="compile"),
    Rule("unknown-partition", E, "Slurm settings for a partition that does not exist", stage="compile"),
    Rule("unknown-host", E, "an extra partition names hosts no node group defines", stage="compile"),
    Rule("baremetal", E, "a BMC, spare pool, ticket webhook or boot chain fleetspec cannot use safely", stage="compile",
         warns=True),
    Rule("site-settings", E, "a site setting (Slurm key, Helm values path, Ansible variable or hook) fleetspec "
         "cannot write safely", stage="compile", warns=True),
    # Over the compiled fleet.
    Rule("firmware-unconfirmed", W, "a stack's firmware pin no release fact in the catalog confirms",
         firmware.check_firmware, warns=True),
    Rule("stack-vendor-mismatch", E, "a node group uses the other vendor's tuple", stack_versions.check_stack_vendor),
    Rule("driver-too-old-for-cuda", E, "the driver cannot run (or fully run) the tuple's CUDA",
         stack_versions.check_driver_for_cuda, warns=True),
    Rule("driver-unsupported-gpu", E, "the driver is below the GPU's first driver or above its last branch",
         stack_versions.check_driver_for_gpu, warns=True),
    Rule("cuda-unsupported-gpu", E, "CUDA too old for the GPU, or too new (Volta has no CUDA 13)",
         stack_versions.check_cuda_for_gpu, warns=True),
    Rule("nccl-cuda-mismatch", E, "NCCL has no build for the tuple's CUDA major", stack_versions.check_nccl_for_cuda),
    Rule("nccl-unsupported-gpu", E, "NCCL predates the GPU (Blackwell needs 2.25.1+)", stack_versions.check_nccl_for_gpu),
    Rule("cudnn-cuda-mismatch", E, "cuDNN is not built for the tuple's CUDA", stack_versions.check_cudnn_for_cuda,
         warns=True),
    Rule("rocm-unsupported-gpu", E, "ROCm too old for the AMD GPU", stack_versions.check_rocm_for_gpu),
    Rule("rccl-rocm-mismatch", E, "RCCL or amdgpu that the ROCm release does not ship or support",
         stack_versions.check_rccl_for_rocm, warns=True),
    Rule("amdgpu-unpinned", W, "an AMD tuple without the amdgpu kernel driver pinned (hosts or Kubernetes)",
         stack_versions.check_amdgpu_pinned, warns=True),
    Rule("unknown-version", E, "a version the catalog does not know (warning), or one never released (error)",
         stack_versions.check_unknown_versions, warns=True),
    Rule("mixed-vendor-partition", E, "a partition mixes NVIDIA and AMD GPUs", topology.check_mixed_vendor),
    Rule("mixed-generation-partition", E, "a partition mixes GPU generations", topology.check_mixed_generation,
         warns=True),
    Rule("mixed-stack-partition", E, "a partition's nodes run different tuples", topology.check_mixed_stack),
    Rule("double-allocation-owner", E, "two schedulers could grant the same GPU", stage="compile"),
    Rule("quota-owner-ambiguous", E, "two of Kueue, Volcano and KAI hold quota or admit the same pods",
         scheduling.check_quota_owner),
    Rule("quota-engine-coverage", E, "quota the owning engine cannot count (KAI on AMD, DRA GPUs)",
         workload_plane.check_quota_engine_coverage),
    Rule("dra-needs-k8s-1.34", E, "kubernetes.dra below Kubernetes 1.34 (DRA GA)", workload_plane.check_dra_k8s_version),
    Rule("nvlink-domain-needs-dra", W, "a Kubernetes-owned NVL72 rack without NVIDIA's DRA driver (ComputeDomains)",
         workload_plane.check_nvlink_domain_dra),
    Rule("kuberay-needs-k8s-1.23", E, "kubernetes.ray below KubeRay's Kubernetes floor",
         workload_plane.check_kuberay_k8s_version),
    Rule("kueue-pods-ready-timeout", W, "Kueue's waitForPodsReady shorter than a model server's start",
         scheduling.check_pods_ready_timeout),
    Rule("gang-needs-k8s-1.37", E, "gang: workload-api below Kubernetes 1.37", scheduling.check_gang_k8s_version),
    Rule("slurm-security-release", W, "a Slurm release below its security fix release",
         scheduling.check_slurm_security),
    Rule("slurm-topology", E, "the Slurm version cannot express the fabric's topology (block, topology.yaml)",
         scheduling.check_slurm_topology),
    Rule("slinky-mapping", E, "a Slurm setting that Slinky's NodeSets cannot represent",
         scheduling.check_slinky_mapping, warns=True),
    Rule("controller-on-gpu-node", W, "a Slurm controller that is also a GPU node", scheduling.check_controller_overlap),
    Rule("slurm-state-not-shared", E, "HA controllers with a local StateSaveLocation",
         scheduling.check_state_save_shared),
    Rule("site-gpu-model", W, "a GPU model the site declared, with no sourced facts", topology.check_site_gpu_models),
    Rule("node-shape", E, "cpus disagrees with sockets x cores x threads", topology.check_node_shape),
    Rule("tcp-fallback-risk", W, "multi-node GPU partitions on plain ethernet", topology.check_tcp_fallback),
    Rule("nvlink-domain-model", E, "an NVLink-domain rack whose GPUs have no rack-scale NVLink",
         topology.check_nvlink_domain),
    Rule("package-pin", E, "a tuple the node layer cannot pin (error), or pins only by pattern (warning)",
         packaging.check_package_pins, warns=True),
    Rule("slurm-tenants", E, "a Slurm tenant that cannot become an account (no accounting, quota on no GPU type)",
         scheduling.check_slurm_tenants),
    Rule("tenant-quota", E, "tenant quota on a missing partition, or beyond the fleet", scheduling.check_tenant_quota,
         warns=True),
    Rule("adopted-site-value", W, "an adopted cluster keeps its own value of a slurm.conf key fleetspec would set",
         adoption.check_adopted_values),
    Rule("adopted-declines-default", W, "an adopted cluster declines one of fleetspec's defaults (DefaultTime, "
         "billing, per-GPU defaults, generated partitions, node features)", adoption.check_declined_defaults),
    Rule("adopted-site-file", W, "an adopted cluster keeps its own gres.conf, topology.conf, cgroup.conf or "
         "slurmdbd.conf",
         adoption.check_site_files),
    Rule("gpu-operator-unsupported", E, "NVIDIA and AMD GPU Operator releases vs Kubernetes version and drivers",
         scheduling.check_gpu_operator, warns=True),
)

RULES_BY_ID: dict[str, Rule] = {rule.id: rule for rule in RULES}



def run_rules(fleet: Fleet, catalog: Catalog) -> list[Finding]:
    """Run every fleet-stage rule. A rule that raises becomes an internal-error finding."""
    findings: list[Finding] = []
    for rule in RULES:
        if rule.check is None:
            continue
        try:
            findings.extend(rule.check(fleet, catalog))
        except Exception as exc:
            findings.append(Finding(
                "internal-error", Severity.ERROR,
                f"rule '{rule.id}' failed: {type(exc).__name__}: {exc}. This is a fleetspec bug: please report it",
            ))
    return findings


__all__ = ["RULES", "RULES_BY_ID", "Rule", "run_rules"]
