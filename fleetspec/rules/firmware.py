"""Firmware in the tuple: each pin a stack makes (``stacks.<name>.firmware``) is checked
against the catalog's release facts. Only ConnectX/BlueField firmware has sourced facts
(what each DOCA-Host release bundles); a pin none of them names, and every VBIOS, NVSwitch,
BMC and BIOS pin (their facts are in NVIDIA's HGX bundle notes, not in the catalog), is a
warning: unconfirmed, still attested by verify and ``fleetspec baremetal plan``."""

from __future__ import annotations

from collections.abc import Iterator

from fleetspec.catalog import Catalog
from fleetspec.compile.ir import Fleet
from fleetspec.findings import Finding
from fleetspec.rules.base import warning

RULE = "firmware-unconfirmed"
WHERE = {"vbios": "nvidia-smi's vbios_version on each node (verify)",
         "connectx": "each ConnectX/BlueField device's fw_ver in sysfs (verify)",
         "nvswitch": "the BMC's firmware inventory (fleetspec baremetal plan), where it lists the NVSwitches",
         "bmc": "the BMC's firmware inventory (fleetspec baremetal plan)",
         "bios": "the system's BiosVersion over Redfish (fleetspec baremetal plan)"}


def check_firmware(fleet: Fleet, catalog: Catalog) -> Iterator[Finding]:
    for stack in fleet.stacks:
        for component, version in stack.firmware:
            path = (*stack.path, "firmware", component)
            if component == "connectx":
                bundles = catalog.nic_firmware(version)
                if bundles:
                    continue
                yield warning(RULE, f"connectx firmware {version} is not what any DOCA-Host release in the catalog "
                              "bundles; check it against NVIDIA's firmware release notes for your adapter, or "
                              f"suppress {RULE}. It is still compared with {WHERE[component]}", path)
            else:
                yield warning(RULE, f"{component} firmware {version}: the catalog holds no release fact for it (the "
                              "HGX firmware bundle notes are not public); check it against your vendor's bundle, "
                              f"or suppress {RULE}. It is still compared with {WHERE[component]}", path)
