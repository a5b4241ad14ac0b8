"""What a BMC's Redfish documents say about one node, read by the Redfish standard (DMTF
DSP0268 schemas), never by guessing from vendors' names for things.

Every function reads through ``get(path) -> document or None`` (None: the BMC serves no such
resource), so the reading is the same against a live BMC and a captured tree. What the four
captured servers in NVIDIA/libredfish ``tests/mockups/`` (commit c094c9e) (Supermicro, Dell iDRAC9, Lenovo XCC, NVIDIA
DGX; docs/bare-metal.md, "Vendors") taught, and this module follows:

- sockets are the System's ``Processors`` members with ``ProcessorType: CPU``, their cores and
  threads in ``TotalCores``/``TotalThreads`` (ComputerSystem ``ProcessorSummary.Count`` is
  "the number of processors", which BMCs fill with logical processors);
- GPUs are the ``ProcessorType: GPU`` members of every System that serves the node: its own, the
  Systems its chassis hold (``Chassis.Links.Contains``/``ComputerSystems``), and, on a service
  whose only System with CPUs is this one, the others (the DGX's ``HGX_Baseboard_0``); where
  none list GPU processors, the PCIe devices whose functions are display controllers or
  processing accelerators (``PCIeFunction.DeviceClass``);
- the running firmware: the BMC's from its Manager (the one in the System's
  ``Links.ManagedBy``, or whose ``Links.ManagerForServers`` names the System: the iDRAC), the
  image its ``Links.ActiveSoftwareImage`` names (its ``Version``), else ``FirmwareVersion``;
  the BIOS's from ``BiosVersion``, its image from the Bios resource's
  ``Links.ActiveSoftwareImage``; a GPU's or NVSwitch's from the FirmwareInventory items whose
  ``RelatedItem`` points at the device or under it (``.../Processors/GPU1``,
  ``/Chassis/1/PCIeDevices/GPU1``) with ``Status.State`` Enabled, else the device's own
  ``FirmwareVersion``. Backup, golden, staging, pending and recovery images are other
  inventory items: never the version, never a target;
- an update targets exactly the running images (``Updateable``) of the pinned component; where
  the BMC's documents cannot tell them, `Component.why` says what could not be told.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

Get = Callable[[str], "dict[str, Any] | None"]
# PCIeFunction.DeviceClass values that are GPUs (DMTF PCIeFunction schema, DeviceClass enum).
GPU_DEVICE_CLASSES = {"DisplayController", "ProcessingAccelerators"}
CHASSIS_DEPTH = 4  # how deep Chassis Links.Contains is followed from the node's own chassis


@dataclass(frozen=True)
class Component:
    """One firmware component of a node as the BMC reports it: ``versions`` (where -> version:
    the inventory item's Id, or the resource whose property reported it), ``images`` (the
    running images an update targets) and, where there are none, ``why``."""

    versions: dict[str, str] = field(default_factory=dict)
    images: tuple[str, ...] = ()
    why: str | None = None


@dataclass(frozen=True)
class Hardware:
    sockets: int | None  # CPU Processors members; None: the BMC lists no processors
    cores: int | None  # TotalCores of all sockets
    threads: int | None  # TotalThreads of all sockets
    gpus: tuple[str, ...] | None  # one model per GPU; None: the BMC lists no GPU anywhere


def _id(doc: dict[str, Any] | Any) -> str:
    return str(doc.get("@odata.id", "")).rstrip("/") if isinstance(doc, dict) else ""


def _links(value: Any) -> list[str]:
    """The ``@odata.id`` of a link or of each link in a list."""
    items = value if isinstance(value, list) else [value]
    return [_id(v) for v in items if _id(v)]


def members(get: Get, path: str | None) -> list[tuple[str, dict[str, Any]]]:
    """A collection's members (path, document), the ones the BMC serves."""
    if not path:
        return []
    collection = get(path) or {}
    out = []
    for link in _links(collection.get("Members") or []):
        doc = get(link)
        if isinstance(doc, dict):
            out.append((link, doc))
    return out


def _enabled(doc: dict[str, Any]) -> bool:
    state = (doc.get("Status") or {}).get("State") if isinstance(doc.get("Status"), dict) else None
    return state in (None, "Enabled")


def node_systems(get: Get, system_path: str, system: dict[str, Any]) -> list[str]:
    """The Systems that serve this node: its own, those its chassis hold (following
    ``Links.Contains``) that have no CPU of their own (a GPU baseboard's; another host in the
    same enclosure is another node), and, where this is the service's only System with CPU
    processors, the service's other Systems (the DGX H100's ``HGX_Baseboard_0``, which no
    chassis link reaches from the host's)."""
    found = [system_path]
    seen_chassis: set[str] = set()
    frontier = _links((system.get("Links") or {}).get("Chassis") or [])
    for _ in range(CHASSIS_DEPTH):
        nxt = []
        for path in frontier:
            if path in seen_chassis:
                continue
            seen_chassis.add(path)
            chassis = get(path) or {}
            links = chassis.get("Links") or {}
            found += [s for s in _links(links.get("ComputerSystems") or [])
                      if s not in found and not _cpus(get, get(s) or {})]
            nxt += _links(links.get("Contains") or [])
        frontier = nxt
    others = [p for p, _ in members(get, "/redfish/v1/Systems") if p not in found]
    if others and not any(_cpus(get, (get(p) or {})) for p in others):
        found += others
    return found


def _processors(get: Get, system: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return members(get, _id(system.get("Processors")))


def _cpus(get: Get, system: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for _, d in _processors(get, system) if d.get("ProcessorType") == "CPU"
            and (d.get("Status") or {}).get("State") != "Absent"]


def gpu_devices(get: Get, system_path: str, system: dict[str, Any]) -> list[tuple[str, str]]:
    """(path, model) of each GPU of the node: GPU Processors of its Systems, else GPU PCIe devices."""
    gpus = []
    for path in node_systems(get, system_path, system):
        doc = system if path == system_path else (get(path) or {})
        for proc_path, proc in _processors(get, doc):
            if proc.get("ProcessorType") == "GPU" and (proc.get("Status") or {}).get("State") != "Absent":
                gpus.append((proc_path, str(proc.get("Model") or proc.get("Name") or proc.get("Id") or "GPU")))
    if gpus:
        return gpus
    for path, device in pcie_devices(get, system):
        functions = members(get, _id(device.get("PCIeFunctions")))
        if any(f.get("DeviceClass") in GPU_DEVICE_CLASSES for _, f in functions):
            gpus.append((path, str(device.get("Model") or device.get("Name") or device.get("Id"))))
    return gpus


def pcie_devices(get: Get, system: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The System's PCIe devices (a list of links, or a collection) and its chassis's."""
    out: dict[str, dict[str, Any]] = {}
    listed = system.get("PCIeDevices")
    paths = _links(listed) if isinstance(listed, list) else [p for p, _ in members(get, _id(listed))]
    for chassis in _links((system.get("Links") or {}).get("Chassis") or []):
        paths += [p for p, _ in members(get, _id((get(chassis) or {}).get("PCIeDevices")))]
    for path in paths:
        if path not in out:
            doc = get(path)
            if isinstance(doc, dict):
                out[path] = doc
    return sorted(out.items())


def hardware(get: Get, system_path: str, system: dict[str, Any]) -> Hardware:
    cpus = _cpus(get, system)
    listed = bool(_processors(get, system))

    def total(key: str) -> int | None:
        values = [_count(c.get(key)) for c in cpus]
        return sum(v for v in values if v is not None) if cpus and None not in values else None

    gpus = gpu_devices(get, system_path, system)
    return Hardware(sockets=len(cpus) if listed else None, cores=total("TotalCores"), threads=total("TotalThreads"),
                    gpus=tuple(sorted(m for _, m in gpus)) if gpus else None)


def _count(value: Any) -> int | None:
    """An integer property; sushy-emulator writes TotalCores/TotalThreads as strings of digits
    (its templates/processor.json: ``processor['cores']|string``)."""
    if type(value) is int:
        return value
    return int(value) if isinstance(value, str) and value.isdigit() else None


def manager_of(get: Get, system_path: str, system: dict[str, Any]) -> tuple[str, dict[str, Any]] | tuple[None, str]:
    """The node's BMC: the Manager in the System's ``Links.ManagedBy``, else the Manager whose
    ``Links.ManagerForServers`` names the System. (None, why) where there is not exactly one."""
    paths = _links((system.get("Links") or {}).get("ManagedBy") or [])
    if not paths:
        paths = [p for p, m in members(get, "/redfish/v1/Managers")
                 if system_path in _links((m.get("Links") or {}).get("ManagerForServers") or [])]
    if len(paths) != 1:
        return None, (f"the System lists {len(paths)} Managers (Links.ManagedBy, or a Manager's "
                      "Links.ManagerForServers), not one BMC")
    doc = get(paths[0])
    if not isinstance(doc, dict):
        return None, f"the System's Manager {paths[0]} cannot be read"
    return paths[0], doc


def _active(get: Get, doc: dict[str, Any], what: str) -> tuple[str | None, dict[str, Any] | None, str | None]:
    """The running image a Manager or Bios names (``Links.ActiveSoftwareImage``): path, item, or why not."""
    path = next(iter(_links((doc.get("Links") or {}).get("ActiveSoftwareImage") or [])), None)
    if path is None:
        return None, None, f"the {what} names no Links.ActiveSoftwareImage, so the running image cannot be told"
    item = get(path)
    if not isinstance(item, dict):
        return path, None, f"the {what}'s Links.ActiveSoftwareImage {path} cannot be read"
    if item.get("Updateable") is False:
        return path, item, f"the {what}'s running image {path} is not Updateable"
    return path, item, None


def _under(related: Iterable[str], device: str) -> bool:
    return any(r == device or r.startswith(device + "/") or r.startswith(device + "#") for r in related)


def _devices_firmware(get: Get, devices: list[tuple[str, dict[str, Any] | None]],
                      inventory: list[tuple[str, dict[str, Any]]], what: str) -> Component:
    """A component made of devices (GPUs, NVSwitches): the Enabled inventory items pointing at
    or under each device, else the device's FirmwareVersion."""
    if not devices:
        return Component(why=f"the BMC lists no {what}")
    versions: dict[str, str] = {}
    images: list[str] = []
    fixed: list[str] = []  # running items the BMC says it cannot update
    untold = []
    for device, doc in devices:
        items = [(p, i) for p, i in inventory if _enabled(i) and i.get("Version")
                 and _under(_links(i.get("RelatedItem") or []), device)]
        for path, item in items:
            versions[str(item.get("Id") or path.rsplit("/", 1)[-1])] = str(item["Version"])
            (fixed if item.get("Updateable") is False else images).append(path)
        if not items:
            untold.append(device)
            own = (doc or get(device) or {}).get("FirmwareVersion")
            if own:
                versions[device.rsplit("/", 1)[-1]] = str(own)
    why = None
    if untold:
        why = (f"no FirmwareInventory item points at {untold[0]}"
               + (f" (nor at {len(untold) - 1} more {what})" if len(untold) > 1 else "")
               + " (RelatedItem), so its running image cannot be told")
    elif fixed:  # all or none: an update of some leaves the component split
        why = (f"the FirmwareInventory items of the {what} are not Updateable" if not images else
               f"{len(fixed)} of the {what}' FirmwareInventory items are not Updateable ({fixed[0]}, ...)")
    return Component(versions, tuple(sorted(images)) if not why else (), why)


def firmware(get: Get, system_path: str, system: dict[str, Any], inventory_path: str | None,
             shared: bool = False) -> dict[str, Component]:
    """The node's running firmware per stack component: ``bios``, ``bmc``, ``vbios``,
    ``nvswitch`` (a component the BMC reports nothing for is absent). ``shared``: the service
    serves several Systems, so a fabric switch its inventory names may be another node's and
    ``nvswitch`` is not read."""
    inventory = members(get, inventory_path)
    out: dict[str, Component] = {}
    if system.get("BiosVersion"):
        bios_doc = get(_id(system.get("Bios"))) if _id(system.get("Bios")) else None
        path, _, why = _active(get, bios_doc or {}, "Bios resource")
        out["bios"] = Component({"BiosVersion": str(system["BiosVersion"])}, (path,) if path and not why else (), why)
    manager_path, manager = manager_of(get, system_path, system)
    if manager_path is not None and isinstance(manager, dict):
        path, item, why = _active(get, manager, f"Manager {manager_path}")
        name = manager_path.rsplit("/", 1)[-1]
        if item is not None and item.get("Version"):
            out["bmc"] = Component({str(item.get("Id") or name): str(item["Version"])},
                                   (path,) if path and not why else (), why)
        elif manager.get("FirmwareVersion"):
            out["bmc"] = Component({f"Manager {name}": str(manager["FirmwareVersion"])}, (), why)
    gpus = gpu_devices(get, system_path, system)
    if gpus:
        out["vbios"] = _devices_firmware(get, [(p, None) for p, _ in gpus], inventory, "GPUs")
    switches = _switches(inventory)
    if switches and shared:
        out["nvswitch"] = Component(why="the service serves several Systems, so the fabric switches its inventory "
                                        "names cannot be told to be this node's")
    elif switches:
        out["nvswitch"] = _devices_firmware(get, switches, inventory, "NVSwitches")
    return out


def _switches(inventory: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, dict[str, Any] | None]]:
    """The fabric switches (``/redfish/v1/Fabrics/<f>/Switches/<s>``) the inventory's items
    point at: an NVSwitch baseboard's switches are a Fabric's Switches (DMTF Switch schema)."""
    found: dict[str, None] = {}
    for _, item in inventory:
        for related in _links(item.get("RelatedItem") or []):
            parts = related.split("/")
            if len(parts) >= 7 and parts[3] == "Fabrics" and parts[5] == "Switches":
                found["/".join(parts[:7])] = None
    return [(p, None) for p in sorted(found)]
