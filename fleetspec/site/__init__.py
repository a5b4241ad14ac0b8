"""The site's escape hatches: settings fleetspec does not model, validated and planned
like the rest of the spec (docs/site-settings.md).

``site_settings`` reads the hatches of a validated spec into the IR's ``SiteSettings``
and says what is wrong with each, at its key: Slurm parameters (``site.slurm``), Helm
values overlays (``site.helm``), Ansible variables and hook playbooks
(``site.ansible``). Renderers, the Pulumi program, plan and apply read only the IR.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from fleetspec.compile import ir
from fleetspec.findings import Finding, Severity

if TYPE_CHECKING:
    from fleetspec.spec import model as m


def site_settings(spec: m.FleetSpec, fleet: ir.Fleet, spec_dir: Path | None,
                  release_names: Callable[[ir.Fleet], list[str]]) -> tuple[ir.SiteSettings | None, list[Finding]]:
    """The checked hatches of ``spec`` (None when it uses none) and the findings.
    ``release_names(fleet)`` names the Helm releases the fleet installs, which ``kubernetes.values``
    may overlay: the caller passes the Kubernetes renderer's, so this layer never imports render.

    Each hatch's module is imported only when that hatch has content: most specs use
    none, and ``validate`` then loads none of them (startup time)."""
    body = spec.spec
    findings: list[Finding] = []
    slurm_conf: ir.Pairs = ()
    cgroup: ir.Pairs = ()
    slurmdbd: ir.Pairs = ()
    partitions: list[tuple[str, ir.Pairs]] = []
    nodes: list[tuple[str, ir.Pairs]] = []
    s = body.slurm
    if s is not None and _has_slurm_settings(s, body):
        from fleetspec.node_side.hostlist import HostlistError, expand
        from fleetspec.site import slurm as site_slurm

        base = ("spec", "slurm")
        slurm_conf = site_slurm.check_settings("slurm.conf", s.settings, s.version, base + ("settings",), findings)
        cgroup = site_slurm.check_settings("cgroup.conf", s.cgroup_settings, s.version, base + ("cgroup_settings",),
                                           findings)
        slurmdbd = site_slurm.check_settings("slurmdbd.conf", s.slurmdbd_settings, s.version,
                                             base + ("slurmdbd_settings",), findings)
        prolog = dict(slurm_conf).get("PrologFlags")
        if s.containers == "pyxis" and prolog is not None and "contain" not in prolog.lower().split(","):
            findings.append(Finding(site_slurm.RULE, Severity.ERROR,
                                    f"PrologFlags={prolog} drops Contain, which containers: pyxis needs (Enroot "
                                    "joins the job's cgroup through it); write Contain,{prolog}".replace(
                                        "{prolog}", prolog), base + ("settings", _key(s.settings, "PrologFlags"))))
        for name, p in sorted(s.partitions.items()):
            pairs = site_slurm.check_settings("partition", p.settings, s.version,
                                              base + ("partitions", name, "settings"), findings)
            if pairs:
                partitions.append((name, pairs))
        for r_i, rack in enumerate(body.racks):
            groups = [("nodes", g_i, g) for g_i, g in enumerate(rack.nodes)]
            groups += [("cpu_nodes", g_i, g) for g_i, g in enumerate(rack.cpu_nodes)]
            for field, g_i, group in groups:
                if not group.slurm_settings and group.slurm_state is None:
                    continue
                where = ("spec", "racks", r_i, field, g_i, "slurm_settings")
                pairs = site_slurm.check_settings("node", group.slurm_settings, s.version, where, findings)
                if group.slurm_state is not None and s.mode == "slinky":
                    findings.append(Finding(site_slurm.RULE, Severity.ERROR, "slurm_state is written on native "
                                            "Slurm's NodeName lines; a Slinky NodeSet's nodes are dynamic (slurmd "
                                            "--conf): drain them with scontrol, or remove slurm_state",
                                            ("spec", "racks", r_i, field, g_i, "slurm_state")))
                else:
                    pairs += site_slurm.state_pairs(group.slurm_state)
                try:
                    hosts = expand(group.hosts)
                except HostlistError:
                    continue  # reported by the compiler
                nodes.extend((h, pairs) for h in hosts if pairs)
    helm: tuple[tuple[str, str], ...] = ()
    if body.kubernetes is not None and body.kubernetes.values:
        from fleetspec.site import helm as site_helm

        releases = release_names(fleet)
        helm = site_helm.check_values(body.kubernetes.values, releases, ("spec", "kubernetes", "values"), findings)
    ansible_vars, hooks = "{}", ()
    if body.ansible is not None:
        from fleetspec.site import ansible as site_ansible

        path = ("spec", "ansible")
        ansible_vars = site_ansible.check_vars(body.ansible.vars, path + ("vars",), findings)
        hooks = site_ansible.check_hooks(body.ansible.hooks, [p.name for p in fleet.partitions], spec_dir,
                                         path + ("hooks",), findings)
    adoption = None
    if s is not None and s.adopted is not None:
        from fleetspec.site.adopted import check_adopted

        adoption = check_adopted(s.adopted, s.version, findings)
    site = ir.SiteSettings(slurm_conf, tuple(partitions), tuple(nodes), cgroup, slurmdbd, helm, ansible_vars, hooks,
                           adoption)
    return (None if site == ir.SiteSettings() else site), findings


def _has_slurm_settings(s: m.Slurm, body: m.FleetBody) -> bool:
    """Whether any Slurm hatch has content (slurm.conf, cgroup.conf, slurmdbd.conf, a
    partition's or a node group's settings)."""
    return bool(s.settings or s.cgroup_settings or s.slurmdbd_settings
                or any(p.settings for p in s.partitions.values())
                or any(group.slurm_settings or group.slurm_state is not None
                       for rack in body.racks for group in (*rack.nodes, *rack.cpu_nodes)))


def _key(settings: dict, canonical: str) -> str:
    """The key as the site wrote it (Slurm keys ignore case)."""
    return next((k for k in settings if k.lower() == canonical.lower()), canonical)


__all__ = ["site_settings"]
