"""What the BMCs report against what the spec says: plan changes and findings. Pure.

Changes are what apply can do over Redfish, each with its disruption class:

- a node that is off is powered on, booting once from the network (PXE: the golden image),
  with any BIOS attributes staged first; it runs no work, so this disrupts nothing (``none``);
- a BIOS attribute the site pins that differs is staged and takes effect at the next reboot:
  ``drain-reboot``, in the waves every drain-reboot change runs in;
- firmware that differs from the stack's pin, where ``baremetal.firmware_images`` gives the
  image for the pinned version, is updated through Redfish ``UpdateService`` (pushed where
  the BMC takes pushed images, else fetched by the BMC) and takes effect at the reboot:
  ``drain-reboot`` too (``none`` for a node that is off);
- the BMC's own firmware alone takes effect as the BMC resets itself: the host and its jobs
  keep running, only out-of-band management (power control, sensors, console) is gone for
  minutes, so it is ``rolling``: in waves after a canary, with no drain and no reboot.

Findings are what apply cannot do: a pinned attribute the BMC's attribute registry does not
know, is read-only or does not allow; inventory that disagrees with the spec (GPU count,
memory, sockets, cores, threads); firmware that differs from the stack's pins with no image to
update it from, or whose running image the BMC cannot tell (no update target is guessed); a
boot override held at PXE for every start (docs/bare-metal.md). Each is located at the node
group's ``bmc`` in the spec.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from fleetspec.baremetal.redfish import Attribute, Observed
from fleetspec.compile.ir import Fleet, Node, NodeBmc
from fleetspec.findings import Finding, Severity
from fleetspec.plan.model import Action, Change, Disruption

RULE = "baremetal"


def bmc_changes(fleet: Fleet, observed: Mapping[str, Observed]) -> tuple[list[Change], list[Finding]]:
    changes: list[Change] = []
    findings: list[Finding] = []
    assert fleet.baremetal is not None
    for bmc in fleet.baremetal.bmcs:
        seen = observed.get(bmc.host)
        node = fleet.node(bmc.host)
        if seen is None or node is None:
            continue
        where = {"partition": node.partition, "rack": node.rack}
        staged = _bios_changes(bmc, seen, findings)
        stack = fleet.stack(node.stack)
        updates = _firmware(fleet, bmc, dict(stack.firmware) if stack else {}, seen, findings)
        parts = []
        if staged:
            parts.append("BIOS " + ", ".join(f"{k} {seen.bios.get(k)!r} -> {v!r}" for k, v in staged.items()))
        if updates:
            parts.append("firmware " + ", ".join(f"{c} {firmware_reported(c, seen.firmware)} -> {u['version']} "
                                                 f"(Redfish UpdateService: {', '.join(u['targets'])})"
                                                 for c, u in updates.items()))
        before: dict[str, Any] = {}
        after: dict[str, Any] = {}
        if staged:
            before["bios"] = {k: seen.bios.get(k) for k in staged}
            after["bios"] = staged
        if updates:
            before["firmware"] = {c: firmware_reported(c, seen.firmware) for c in updates}
            after["firmware"] = updates
        if seen.power != "On":
            # off: it runs no work, and staged BIOS settings and firmware take effect as it starts
            text = "".join(f"; {p}" for p in parts)
            changes.append(Change(f"node:{bmc.host}", Action.UPDATE, Disruption.NONE,
                                  {"power": seen.power, **before}, {"power": "On", "boot": "Pxe once", **after},
                                  f"BMC: power {seen.power} -> On, booting once from the network (PXE){text}",
                                  **where))
        elif parts and not staged and set(updates) == {"bmc"}:
            changes.append(Change(f"node:{bmc.host}", Action.UPDATE, Disruption.ROLLING, before, after,
                                  f"BMC: {'; '.join(parts)} (the BMC resets itself: out-of-band management is away "
                                  "for minutes, the host keeps running its work; no drain, no reboot)", **where))
        elif parts:
            changes.append(Change(f"node:{bmc.host}", Action.UPDATE, Disruption.DRAIN_REBOOT, before, after,
                                  f"BMC: {'; '.join(parts)} (takes effect at the reboot)", **where))
        findings.extend(_inventory(bmc, node.gpu.count, node.memory_gb, node, seen))
        if seen.power == "On" and (seen.boot_target, seen.boot_enabled) == ("Pxe", "Continuous"):
            findings.append(Finding(RULE, Severity.ERROR, f"{bmc.host}: the BMC holds a continuous network boot "
                                    "(BootSourceOverrideTarget Pxe, BootSourceOverrideEnabled Continuous): the node "
                                    "boots the installer at every start. Clear the override in the BMC (fleetspec "
                                    "asks for Once), then plan again", bmc.path))
    return changes, findings


def _bios_changes(bmc: NodeBmc, seen: Observed, findings: list[Finding]) -> dict[str, Any]:
    staged: dict[str, Any] = {}
    for name, want in bmc.bios:
        if name in seen.bios and seen.bios[name] == want:
            # held already: nothing to stage. Checked before the registry, because a BMC may
            # report values its own registry does not list (Supermicro's Bios holds the
            # ValueDisplayName "Enabled" where its registry's ValueName is "1": the captured
            # SYS-821GE-TNHR, NVIDIA/libredfish tests/mockups/supermicro-hgx-h100)
            continue
        problem = _attribute_problem(name, want, seen.registry)
        if problem:
            findings.append(Finding(RULE, Severity.ERROR, f"{bmc.host}: {problem}", bmc.path + ("bios", name), "key"))
            continue
        if seen.bios.get(name) != want:
            staged[name] = want
    return staged


def _attribute_problem(name: str, want: Any, registry: Mapping[str, Attribute] | None) -> str | None:
    if registry is None:
        return (f"BIOS attribute {name}: the BMC publishes no attribute registry, so the value cannot be checked "
                "before it is staged. Remove the pin or ask the vendor for the registry")
    attr = registry.get(name)
    if attr is None:
        close = difflib.get_close_matches(name, list(registry), n=1)
        did = f" Did you mean '{close[0]}'?" if close else ""
        return (f"BIOS attribute {name} is not in the BMC's attribute registry ({len(registry)} attributes).{did} "
                "Vendors name attributes differently: use the name this BMC's registry gives")
    if attr.read_only:
        return f"BIOS attribute {name} is read-only on this BMC: it cannot be pinned"
    if attr.type == "Enumeration" and attr.values and want not in attr.values:
        return f"BIOS attribute {name} cannot be {want!r}; the registry allows {', '.join(attr.values)}"
    if attr.type == "Integer":
        if type(want) is not int:
            return f"BIOS attribute {name} is an integer; {want!r} is not"
        if (attr.lower is not None and want < attr.lower) or (attr.upper is not None and want > attr.upper):
            return f"BIOS attribute {name} must be within {attr.lower}..{attr.upper}; {want} is not"
    if attr.type == "Boolean" and type(want) is not bool:
        return f"BIOS attribute {name} is true or false; {want!r} is not"
    if attr.type == "Password":
        return f"BIOS attribute {name} is a password: fleetspec does not pin passwords in the spec"
    return None


def _inventory(bmc: NodeBmc, gpus: int, memory_gb: int | None, node: Node, seen: Observed) -> list[Finding]:
    """The spec's hardware against the BMC's (`fleetspec.baremetal.standard`): GPUs, memory,
    sockets (CPU Processors members, never ProcessorSummary's logical processors), and cores
    and threads per socket where the spec gives them."""
    out = []
    if seen.gpus is not None and len(seen.gpus) != gpus:
        out.append(f"the BMC reports {len(seen.gpus)} GPUs ({', '.join(seen.gpus) or 'none'}); the spec says {gpus}")
    if memory_gb is not None and seen.memory_gib is not None and seen.memory_gib < memory_gb:
        out.append(f"the BMC reports {seen.memory_gib} GiB of memory; the spec says memory_gb: {memory_gb}")
    sockets = node.sockets
    if sockets is not None and seen.sockets is not None and seen.sockets != sockets:
        out.append(f"the BMC reports {seen.sockets} CPU sockets; the spec says sockets: {sockets}")
    elif seen.sockets:
        cores = seen.cores // seen.sockets if seen.cores is not None else None
        if node.cores_per_socket is not None and cores is not None and cores != node.cores_per_socket:
            out.append(f"the BMC reports {cores} cores per socket (TotalCores); the spec says cores_per_socket: "
                       f"{node.cores_per_socket}")
        threads = seen.threads // seen.cores if seen.threads is not None and seen.cores else None
        if node.threads_per_core is not None and threads is not None and threads != node.threads_per_core:
            out.append(f"the BMC reports {threads} threads per core (TotalThreads); the spec says threads_per_core: "
                       f"{node.threads_per_core}")
    return [Finding(RULE, Severity.ERROR, f"{bmc.host}: {line}. Check the hardware or fix the spec", bmc.path)
            for line in out]


def firmware_reported(component: str, firmware: Mapping[str, Mapping[str, str]]) -> str | None:
    """The version the BMC reports for a stack's firmware ``component`` (its running images,
    `fleetspec.baremetal.standard`); where they disagree (one GPU of eight behind), their
    versions joined with ", ", which no pin equals: plan updates the component, and apply's
    read-back waits for every one."""
    versions: list[str] = []
    for _, version in sorted((firmware.get(component) or {}).items()):
        if version not in versions:
            versions.append(version)
    return ", ".join(versions) if versions else None


def _firmware(fleet: Fleet, bmc: NodeBmc, pinned: Mapping[str, str], seen: Observed,
              findings: list[Finding]) -> dict[str, dict[str, str]]:
    """The firmware updates apply makes (component -> {version, image}); a differing
    component without an image for its pinned version is a finding."""
    assert fleet.baremetal is not None
    updates = {}
    for component, want in sorted(pinned.items()):
        have = firmware_reported(component, seen.firmware)
        if have is None:
            if component in ("bios", "bmc"):
                findings.append(Finding(RULE, Severity.WARNING, f"{bmc.host}: the BMC reports no {component} firmware "
                                        f"version, so the pin {want} is not attested over Redfish", bmc.path))
        elif have != want:
            image = fleet.baremetal.firmware_image(component, want)
            targets = seen.targets.get(component)
            if not targets:
                why = seen.untargetable.get(component) or "the BMC lists no running image for it"
                findings.append(Finding(RULE, Severity.ERROR, f"{bmc.host}: {component} firmware is {have}; the stack "
                                        f"pins {want}, and no update can be aimed at its running image: {why}. "
                                        "fleetspec does not guess an update target (a backup, staging or security "
                                        "chip's image is not the component's): update it with the vendor's tool, "
                                        "then plan again", bmc.path))
            elif image is None:
                findings.append(Finding(RULE, Severity.ERROR, f"{bmc.host}: {component} firmware is {have}; the stack "
                                        f"pins {want}. Give the image in baremetal.firmware_images.{component} "
                                        f"(\"{want}\": URI) for apply to update it through Redfish, or update it "
                                        "with the vendor's tool, then plan again", bmc.path))
            elif seen.push and not fleet.baremetal.firmware_sha256(component, want):
                findings.append(Finding(RULE, Severity.ERROR, f"{bmc.host}: {component} firmware is {have}; the stack "
                                        f"pins {want}. This BMC takes pushed images (MultipartHttpPushUri): fleetspec "
                                        "fetches the image and checks it before sending it, so give its sha256 "
                                        f"(baremetal.firmware_images.{component}: {{\"{want}\": {{url: ..., sha256: "
                                        "...}})", bmc.path))
            else:
                sha256 = fleet.baremetal.firmware_sha256(component, want)
                updates[component] = {"version": want, "image": image, "targets": list(targets),
                                      **({"sha256": sha256} if sha256 else {})}
    return updates
