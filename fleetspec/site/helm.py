"""Site Helm values: ``kubernetes.values.<release>``, deep-merged over what fleetspec
renders for that release, for the rendered ``kubernetes/helm/`` tree and the Pulumi
program alike (both read ``kubernetes_resources``).

Merge rules are Helm's own for ``--values`` files: mappings merge key by key, any other
value (a list too) replaces, and ``null`` removes the key. Paths fleetspec coordinates
(the driver version it pins per stack, the one NFD it runs for both GPU operators, the
gang and quota settings of Kueue and Volcano, everything the Slinky cluster is built
from) are refused with the spec field that sets them, since an overlay there would
silently undo what the spec promises.

Kueue's chart takes its whole Configuration as one YAML string
(``managerConfig.controllerManagerConfigYaml``); an overlay may give a mapping there,
which is merged into that Configuration (e.g. ``fairSharing: {enable: true}``).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from fleetspec.findings import Finding, Severity, SpecPath
from fleetspec.site.slurm import owner_text

RULE = "site-settings"
KUEUE_CONFIG = ("managerConfig", "controllerManagerConfigYaml")

_TENANTS = "tenant quota (kubernetes.tenants): Kueue gates every workload of the tenants' namespaces"
_AUTH = ("Slurm's authentication keys and identities are created by the release fleetspec renders "
         "(spec.secrets); a site key there would change who can talk to slurmctld")
_ROOT = ("it runs programs or opens logins as root in the Slurm pods, outside what the plan reviews; "
         "build such programs into the site's slurmd image instead")
_CONTROLLER = "spec.slurm.controllers (fleetspec runs slurmctld in the release)"
_NODE_LINES = "spec.racks[].nodes (NodeName parameters: slurm_settings on a node group)"
_NFD = "fleetspec runs one node-feature-discovery for both GPU operators (kubernetes.gpu_operator)"
OWNED: dict[str, dict[tuple[str, ...], str]] = {
    "gpu-operator": {
        ("driver", "enabled"): "kubernetes.gpu_operator.driver",
        ("driver", "version"): "spec.stacks.<stack>.driver",
        ("driver", "nvidiaDriverCRD"): "spec.stacks (one NVIDIADriver per stack)",
        ("nfd", "enabled"): _NFD,
        ("node-feature-discovery", "worker", "tolerations"): _NFD,
    },
    "amd-gpu-operator": {
        ("node-feature-discovery", "enabled"): _NFD,
        ("crds", "defaultCR", "install"): "spec.stacks (one DeviceConfig per stack)",
    },
    "kueue": {
        KUEUE_CONFIG + ("waitForPodsReady",): "kubernetes.gang and kubernetes.gang_policy",
        # Tenant quota: every workload of a tenant namespace goes through Kueue, with or
        # without a queue name; an overlay switching either off lets jobs take GPUs outside
        # quota (https://kueue.sigs.k8s.io/docs/reference/kueue-config.v1beta2/).
        KUEUE_CONFIG + ("manageJobsWithoutQueueName",): _TENANTS,
        KUEUE_CONFIG + ("managedJobsNamespaceSelector",): _TENANTS,
        KUEUE_CONFIG + ("resources", "excludeResourcePrefixes"): "GPU-only quota (kubernetes.tenants)",
        KUEUE_CONFIG + ("apiVersion",): "the Kueue release (kubernetes.kueue.version)",
        KUEUE_CONFIG + ("kind",): "the Kueue release (kubernetes.kueue.version)",
    },
    "volcano": {
        ("custom", "scheduler_config_override"): "kubernetes.gang and kubernetes.quota_owners",
    },
    # Slinky's `slurm` chart at the pinned tag (slurm-operator v1.2.1 helm/slurm/values.yaml,
    # tests/data/crds/slurm-operator/slurm-chart-values.yaml): every path that changes
    # authentication, privilege, what runs as root, or the Slurm configuration fleetspec
    # writes. `extraConf` (a raw string) takes precedence over the `extraConfMap` fleetspec
    # fills, so it is owned with it; `external` points the cluster at another slurmctld or
    # slurmdbd; `extraObjects` creates any Kubernetes object in the release's name.
    "slurm": {
        ("clusterName",): "metadata.name",
        ("nodesets",): "spec.racks (one NodeSet per generated partition)",
        ("nodesetDefaults", "extraConf"): _NODE_LINES,
        ("nodesetDefaults", "extraConfMap"): _NODE_LINES,
        ("nodesetDefaults", "partition"): "spec.slurm.partitions",
        ("nodesetDefaults", "ssh"): _ROOT,
        ("nodesetDefaults", "slurmd", "args"): _ROOT,
        ("partitions",): "spec.slurm.partitions",
        ("configFiles",): "spec.slurm (cgroup.conf, gres.conf, plugstack.conf)",
        ("controller", "extraConf"): "spec.slurm.settings",
        ("controller", "extraConfMap"): "spec.slurm.settings",
        ("controller", "external"): _CONTROLLER,
        ("controller", "externalConfig"): _CONTROLLER,
        ("controller", "slurmctld", "args"): _ROOT,
        ("accounting",): "spec.slurm.accounting",
        ("slurmKey",): _AUTH,
        ("jwtKey",): _AUTH,
        ("jwksKeys",): _AUTH,
        ("sssd",): _AUTH,
        ("prologScripts",): _ROOT,
        ("epilogScripts",): _ROOT,
        ("prologSlurmctldScripts",): _ROOT,
        ("epilogSlurmctldScripts",): _ROOT,
        ("loginsets",): _ROOT,
        ("loginsetDefaults", "rootSshAuthorizedKeys"): _ROOT,
        ("loginsetDefaults", "extraSshdConfig"): _ROOT,
        ("extraObjects",): "fleetspec renders every Kubernetes object of the fleet (kubernetes_resources); "
                           "add objects as a site release or a separate manifest, not through the slurm chart",
    },
    "slurm-operator": {
        ("crds", "enabled"): "fleetspec installs the CRDs as their own release (slurm-operator-crds)",
    },
}


def check_values(values: Mapping[str, Mapping[str, Any]], releases: Iterable[str], path: SpecPath,
                 findings: list[Finding]) -> tuple[tuple[str, str], ...]:
    """(release, overlay as canonical JSON) for each valid overlay; findings for the rest."""
    import json  # here: a spec without site Helm values never needs it (startup time)

    known = sorted(releases)
    out = []
    for release, overlay in sorted(values.items()):
        where = path + (release,)
        if release not in known:
            hint = difflib.get_close_matches(release, known, n=1, cutoff=0.6)
            did = f" Did you mean '{hint[0]}'?" if hint else ""
            findings.append(Finding(RULE, Severity.ERROR,
                                    f"fleetspec renders no Helm release '{release}' for this fleet.{did} "
                                    f"Its releases: {', '.join(known) or 'none'}", where, "key"))
            continue
        problems = list(_owned_problems(release, overlay, (), where)) + list(_literal_secrets(release, overlay, (), where))
        if release == "kueue":
            problems += _kueue_config_problems(overlay, where)
        findings.extend(problems)
        if not problems:
            out.append((release, json.dumps(overlay, sort_keys=True, separators=(",", ":"))))
    return tuple(out)


def _owned_problems(release: str, value: Any, at: tuple[str, ...], where: SpecPath):
    owned = OWNED.get(release, {})
    for path, field in owned.items():
        inside = at[:len(path)] == path  # the owned path itself, or something under it
        replaces = 0 < len(at) < len(path) and path[:len(at)] == at and not isinstance(value, Mapping)
        if inside or replaces:
            dotted = ".".join(path)
            yield Finding(RULE, Severity.ERROR,
                          f"{release} value {dotted} is fleetspec's: {owner_text(field)}. Remove it from "
                          f"kubernetes.values.{release}", where)
            return
    if isinstance(value, Mapping):
        for key, sub in value.items():
            yield from _owned_problems(release, sub, at + (str(key),), where + (key,))


# Keys that name a Kubernetes Secret (or list them) rather than hold secret material: the
# way charts take credentials without putting them in values (existingSecret, secretName,
# imagePullSecrets, a secretKeyRef).
_NAMES_A_SECRET = re.compile(r"(?i)(secretname|secretref|secretkeyref|existingsecret[a-z]*|pullsecrets?|secrets)$")


def _literal_secrets(release: str, value: Any, at: tuple[str, ...], where: SpecPath):
    """A value under a key named like a secret (password, token, ...) that holds a literal:
    it would land in the rendered values, the state and saved plans (#27 item 8). The
    value itself is never echoed."""
    from fleetspec.spec.loader import is_secret_name

    items = value.items() if isinstance(value, Mapping) else enumerate(value) if isinstance(value, list) else ()
    for key, sub in items:
        name = str(key)
        if (isinstance(key, str) and is_secret_name(name) and not _NAMES_A_SECRET.search(name)
                and isinstance(sub, (str, int, float)) and not isinstance(sub, bool) and sub != ""):
            dotted = ".".join(at + (name,))
            yield Finding(RULE, Severity.ERROR,
                          f"{release} value {dotted} reads as a secret and holds a literal value: it would be written "
                          "to the rendered Helm values, the state and saved plans. Put it in a Kubernetes Secret and "
                          "give the chart that Secret's name (charts take it as existingSecret, secretName or a "
                          "secretKeyRef), created outside the spec (docs/security.md)", where + (key,), "key")
        elif isinstance(sub, (Mapping, list)):
            yield from _literal_secrets(release, sub, at + (name,), where + (key,))


def _kueue_config_problems(overlay: Mapping[str, Any], where: SpecPath) -> list[Finding]:
    node: Any = overlay
    for key in KUEUE_CONFIG:
        if not isinstance(node, Mapping) or key not in node:
            return []
        node = node[key]
    if isinstance(node, Mapping):
        return []
    return [Finding(RULE, Severity.ERROR,
                    "kueue value managerConfig.controllerManagerConfigYaml is the Configuration fleetspec renders "
                    "(gang admission, GPU-only quota); give a mapping there, which is merged into it, not a "
                    "replacement text", where + KUEUE_CONFIG)]


def merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    """Helm's merge of a values file over defaults: mappings merge, other values replace,
    ``None`` removes the key."""
    out = dict(base)
    for key, value in overlay.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def overlaid(release_name: str, values: Mapping[str, Any], overlay_json: str) -> dict[str, Any]:
    """The release's values with the site overlay merged in."""
    import json

    overlay = json.loads(overlay_json)
    if release_name == "kueue":
        overlay = _merge_kueue_config(values, overlay)
    return merge(values, overlay)


def _merge_kueue_config(values: Mapping[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    site = overlay.get(KUEUE_CONFIG[0], {}).get(KUEUE_CONFIG[1])
    rendered = values.get(KUEUE_CONFIG[0], {}).get(KUEUE_CONFIG[1])
    if not isinstance(site, Mapping) or not isinstance(rendered, str):
        return overlay
    config = merge(yaml.safe_load(rendered), site)
    text = yaml.safe_dump(config, sort_keys=False, default_flow_style=False, width=100)
    return merge(overlay, {KUEUE_CONFIG[0]: {KUEUE_CONFIG[1]: text}})


def apply_overlays(releases: Iterable[Any], overlays: Iterable[tuple[str, str]]) -> tuple[Any, ...]:
    """``HelmRelease`` objects with the site overlays merged into their values."""
    by_name = dict(overlays)
    return tuple(
        dataclasses.replace(r, values=overlaid(r.name, r.values, by_name[r.name])) if r.name in by_name else r
        for r in releases
    )
