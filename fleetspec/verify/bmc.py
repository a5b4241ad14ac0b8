"""The firmware a node's BMC reports, attested against the stack's pins. Pure.

``fleetspec verify`` reads GPU VBIOS and ConnectX firmware on the node itself (nvidia-smi,
sysfs: `fleetspec.verify.compare.firmware_checks`); the BMC, BIOS and NVSwitch firmware only
the BMC reports (the Manager's and the Bios's running images, the System's ``BiosVersion``, the
inventory items of each GPU, read by the Redfish standard in `fleetspec.baremetal.standard`).
`bmc_firmware_checks` turns that reading into one ``<component>-firmware`` check per pinned
component, every running image of it (the reading ``baremetal plan`` and ``apply`` use; backup,
staging and pending images are never among them) compared with the pin. Node facts win: a component the node's own facts attest is not checked again from the
BMC; the BMC's reading stands in only where the node reports nothing for it (a node without
a GPU driver yet, an unreachable node). `with_bmc` adds the checks, or a ``bmc`` drift naming
why the BMC could not be read, to each node of a report.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from fleetspec.baremetal.redfish import Observed
from fleetspec.compile.ir import Fleet, StackTuple
from fleetspec.verify.compare import Check, NodeReport, Status, VerifyReport

SOURCE = "BMC, Redfish FirmwareInventory"
FIX = "`fleetspec baremetal apply` updates it (Redfish UpdateService)"
# What updating a component costs, as `fleetspec.baremetal.drift` plans it: the BMC's own
# firmware applies as the BMC resets (the host keeps its work), the rest at the node's reboot.
DISRUPTION = {"bmc": "rolling"}
DISRUPTION_DEFAULT = "drain-reboot"


def bmc_firmware_checks(stack: StackTuple, firmware: Mapping[str, Mapping[str, str]], attested: Collection[str] = (),
                        notes: Collection[str] = ()) -> list[Check]:
    """One check per firmware pin of ``stack`` not in ``attested`` (components the node's own
    facts already attest), from ``firmware`` (`Observed.firmware`: component -> where -> version).
    ``notes``: what the BMC reading could not get (`Observed.notes`), said where a pin goes
    unattested."""
    checks = []
    for component, pinned in sorted(stack.firmware):
        if component in attested:
            continue
        found = dict(sorted((firmware.get(component) or {}).items()))
        name = f"{component}-firmware"
        if not found:
            why = f" ({'; '.join(notes)})" if notes else ""
            checks.append(Check(name, Status.NOT_APPLICABLE, pinned, None,
                                f"the BMC reports no {component} firmware{why}: the pin {pinned} is not "
                                f"attested ({SOURCE})"))
            continue
        shown = ", ".join(f"{key}: {version}" for key, version in found.items())
        wrong = {key: version for key, version in found.items() if version != pinned}
        if wrong:
            versions = ", ".join(sorted(set(wrong.values())))
            checks.append(Check(name, Status.DRIFT, pinned, versions,
                                f"the BMC reports {component} firmware {versions} ({shown}), the stack pins "
                                f"{pinned}: {FIX} ({SOURCE})",
                                disruption=DISRUPTION.get(component, DISRUPTION_DEFAULT)))
        else:
            checks.append(Check(name, Status.OK, pinned, pinned,
                                f"the BMC reports {component} firmware {pinned} ({shown}) ({SOURCE})"))
    return checks


def unreadable_check(why: str) -> Check:
    """A node whose BMC could not be read: its firmware is not attested, which fails it."""
    return Check("bmc", Status.DRIFT, "the BMC read over Redfish", "unreachable",
                 f"the BMC could not be read, so its firmware is not attested: {why}")


def with_bmc(fleet: Fleet, report: VerifyReport, seen: Mapping[str, Observed],
             unreachable: Mapping[str, str]) -> VerifyReport:
    """``report`` with each node's BMC firmware checks (``seen``: what each BMC reported;
    ``unreachable``: why a BMC could not be read). Nodes in neither are left as they are."""

    def grown(node: NodeReport) -> NodeReport:
        stack = fleet.stack(node.stack)
        if node.hostname in unreachable:
            return replace(node, checks=node.checks + (unreadable_check(unreachable[node.hostname]),))
        observed = seen.get(node.hostname)
        if observed is None or stack is None:
            return node
        # node facts win: a component they attest stays theirs; one they found nothing for
        # (not-applicable) gives way to the BMC's reading when the BMC has one
        attested = {c.component.removesuffix("-firmware") for c in node.checks
                    if c.component.endswith("-firmware") and c.status is not Status.NOT_APPLICABLE}
        added = bmc_firmware_checks(stack, observed.firmware, attested, observed.notes)
        replaced = {c.component for c in added if c.status is not Status.NOT_APPLICABLE}
        kept = tuple(c for c in node.checks if c.component not in replaced)
        added = [c for c in added if not (c.status is Status.NOT_APPLICABLE
                                          and any(k.component == c.component for k in kept))]
        return replace(node, checks=kept + tuple(added))

    partitions = tuple(replace(p, nodes=tuple(grown(n) for n in p.nodes)) for p in report.partitions)
    return replace(report, partitions=partitions, nodes=tuple(grown(n) for n in report.nodes))
