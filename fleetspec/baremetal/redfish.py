"""One node's BMC over Redfish, through OpenStack Ironic's client library ``sushy``.

`read` returns what the BMC reports as plain data (`Observed`): the system's model, memory,
processors, NICs, GPUs (PCIe devices, where the BMC exposes them), power state, boot source
override, BIOS attributes with the attribute registry's rules, and the firmware inventory
(UpdateService/FirmwareInventory, plus the system's BiosVersion). `Session` also acts:
power, boot-once PXE, BIOS attributes, and firmware updates (``UpdateService.SimpleUpdate``
with the image's URI, its task monitor followed to the end). The credential is resolved from its secret reference
only here, never logged: errors name the BMC and what failed, and every message goes through
a `Redactor` that knows the password.

Trust: the endpoint was checked at compile time (https, or http to loopback); TLS
certificates are verified (against ``ca_file`` when the spec names one); every request has
a connect and a read timeout, and sushy's server-side retries are bounded.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fleetspec.compile.ir import NodeBmc
from fleetspec.secrets import Redactor, SecretError, SecretRef, file_path, resolve

CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60
RETRIES = 2  # sushy's retries on a BMC's 5xx (BMCs answer 503 while busy)
# Power states a plan may ask for, and the Redfish ResetType that reaches each.
RESET_FOR = {"On": "On", "Off": "ForceOff", "restart": "ForceRestart"}
FIRMWARE_TASK_TIMEOUT_S = 3600  # a BMC or GPU baseboard image flashes in minutes, sometimes tens of them
MAX_POLL_S = 30  # a task monitor's Retry-After is followed up to this
# Task endings that mean the update is in (Redfish TaskState / TaskStatus, DSP0268 Task schema).
TASK_DONE = {"Completed"}
TASK_OK = {"OK", "Warning", None}
# Where the stack's firmware pin is read from in the BMC's report: ``bios`` is the system's
# BiosVersion; a FirmwareInventory member whose Id names the component carries the others.
INVENTORY_KEYS = {"bios": ("bios",), "bmc": ("bmc",), "vbios": ("gpu", "vbios"), "nvswitch": ("nvswitch",),
                  "connectx": ("connectx", "nic", "cx")}


class BmcError(RuntimeError):
    """A BMC could not be reached or refused a request; the message names the node, never a secret."""


@dataclass(frozen=True)
class Attribute:
    """One BIOS attribute as the BMC's attribute registry describes it."""

    name: str
    type: str | None  # Enumeration, String, Integer, Boolean, Password
    values: tuple[str, ...] = ()  # an Enumeration's allowed ValueNames
    read_only: bool = False
    lower: int | None = None
    upper: int | None = None


@dataclass(frozen=True)
class Observed:
    """What one node's BMC reports."""

    host: str
    system: str  # the Redfish System's Id
    manufacturer: str | None
    model: str | None
    power: str  # On, Off, PoweringOn, ...
    boot_target: str | None  # Pxe, Hdd, None, ...
    boot_enabled: str | None  # Once, Continuous, Disabled
    memory_gib: int | None
    processors: int | None
    nics: tuple[str, ...]  # MAC addresses
    gpus: tuple[str, ...] | None  # GPU PCIe device models; None: the BMC exposes no PCIe devices
    bios: dict[str, Any]
    registry: dict[str, Attribute] | None  # None: the BMC publishes no attribute registry
    firmware: dict[str, str]  # component -> version (FirmwareInventory, BiosVersion as "bios")
    notes: tuple[str, ...] = field(default=())  # what could not be read, in words

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "system": self.system, "manufacturer": self.manufacturer, "model": self.model,
                "power": self.power, "boot": {"target": self.boot_target, "enabled": self.boot_enabled},
                "memory_gib": self.memory_gib, "processors": self.processors, "nics": list(self.nics),
                "gpus": None if self.gpus is None else list(self.gpus), "bios": self.bios,
                "firmware": self.firmware, "notes": list(self.notes)}


def _value(enum_or_text: Any) -> str | None:
    if enum_or_text is None:
        return None
    return str(getattr(enum_or_text, "value", enum_or_text))


class Session:
    """A Redfish session with one node's BMC: ``with Session(bmc, base_dir) as s: s.read()``."""

    def __init__(self, bmc: NodeBmc, base_dir: Path, redactor: Redactor | None = None) -> None:
        self.bmc = bmc
        self.base_dir = base_dir
        self.redactor = redactor or Redactor()
        self._conn: Any = None
        self._system: Any = None

    def __enter__(self) -> Session:
        import sushy

        try:
            password = resolve(SecretRef.parse(f"bmc password of {self.bmc.host}", self.bmc.password), self.base_dir)
        except SecretError as exc:
            raise BmcError(str(exc)) from None
        self.redactor.add(password)
        verify: bool | str = True
        if self.bmc.ca_file:
            verify = str(file_path(SecretRef("ca_file", "file", self.bmc.ca_file), self.base_dir))
        try:
            self._conn = sushy.Sushy(f"{self.bmc.endpoint}/redfish/v1", username=self.bmc.username,
                                     password=password.decode(errors="replace"), verify=verify,
                                     read_timeout=READ_TIMEOUT_S, connect_timeout=CONNECT_TIMEOUT_S,
                                     server_side_retries=RETRIES, server_side_retries_delay=1)
            self._system = self._find_system()
        except BmcError:
            raise
        except Exception as exc:  # sushy's errors, requests' errors: one message per node
            raise self._error("cannot open a Redfish session", exc) from None
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            if self._conn is not None:
                self._conn.close()
        except Exception:
            pass

    def _error(self, what: str, exc: BaseException) -> BmcError:
        text = self.redactor(f"{type(exc).__name__}: {exc}")
        return BmcError(f"{self.bmc.host}: {what} at {self.bmc.endpoint}: {text[:400]}")

    def _find_system(self) -> Any:
        collection = self._conn.get_system_collection()
        paths = list(collection.members_identities)
        wanted = self.bmc.system
        if wanted is None:
            if len(paths) != 1:
                raise BmcError(f"{self.bmc.host}: the BMC at {self.bmc.endpoint} serves {len(paths)} systems; name "
                               "the node's in bmc.system (its Id or Name)")
            return self._conn.get_system(paths[0])
        for path in paths:
            system = self._conn.get_system(path)
            if wanted in (system.identity, system.name, path.rstrip("/").rsplit("/", 1)[-1]):
                return system
        raise BmcError(f"{self.bmc.host}: the BMC at {self.bmc.endpoint} has no system '{wanted}' "
                       f"({len(paths)} systems there); check bmc.system")

    # --- reading -----------------------------------------------------------------------

    def read(self) -> Observed:
        try:
            return self._read()
        except BmcError:
            raise
        except Exception as exc:
            raise self._error("cannot read the system", exc) from None

    def _read(self) -> Observed:
        s = self._system
        s.refresh(force=True)
        notes: list[str] = []
        processors = None
        try:
            processors = s.processors.summary.count if s.processors is not None else None
        except Exception:
            notes.append("no processor summary")
        nics: list[str] = []
        try:
            nics = sorted(str(e.mac_address).lower() for e in s.ethernet_interfaces.get_members() if e.mac_address)
        except Exception:
            notes.append("no EthernetInterfaces")
        bios: dict[str, Any] = {}
        registry: dict[str, Attribute] | None = None
        try:
            bios = dict(s.bios.attributes or {})
        except Exception:
            notes.append("no BIOS resource")
        else:
            registry = self._registry(notes)
        return Observed(
            host=self.bmc.host, system=s.identity, manufacturer=s.manufacturer, model=s.model,
            power=_value(s.power_state) or "unknown", boot_target=_value(s.boot.target),
            boot_enabled=_value(s.boot.enabled),
            memory_gib=s.memory_summary.size_gib if s.memory_summary is not None else None,
            processors=processors, nics=tuple(nics), gpus=self._gpus(notes), bios=bios, registry=registry,
            firmware=self._firmware(notes), notes=tuple(notes))

    def _registry(self, notes: list[str]) -> dict[str, Attribute] | None:
        try:
            reg = self._system.bios.get_attribute_registry()
        except Exception:
            reg = None
        if reg is None:
            notes.append("no BIOS attribute registry")
            return None
        out = {}
        for a in reg.registry_entries.attributes or []:
            values = tuple(str(v.get("ValueName")) for v in (a.allowable_values or []) if isinstance(v, dict))
            out[a.name] = Attribute(a.name, a.attribute_type, values, bool(a.read_only or a.immutable),
                                    a.lower_bound, a.upper_bound)
        return out

    def _gpus(self, notes: list[str]) -> tuple[str, ...] | None:
        try:
            devices = self._system.pcie_devices.get_members()
        except Exception:
            devices = []
        if not devices:  # a GPU server has PCIe devices: none listed means none reported
            notes.append("no PCIeDevices: GPU count and model not checked over Redfish")
            return None
        gpus = []
        for device in devices:
            kind = _value(getattr(device, "device_type", None)) or ""
            name = f"{device.manufacturer or ''} {device.model or device.name or ''}".strip()
            if "GPU" in kind.upper() or "NVIDIA" in name.upper() or "AMD INSTINCT" in name.upper():
                gpus.append(name)
        return tuple(sorted(gpus))

    def _firmware(self, notes: list[str]) -> dict[str, str]:
        firmware: dict[str, str] = {}
        if self._system.bios_version:
            firmware["bios"] = str(self._system.bios_version)
        try:
            inventory = self._conn.get_update_service().firmware_inventory.get_members()
        except Exception:
            notes.append("no UpdateService/FirmwareInventory")
            return firmware
        for item in inventory:
            if item.version:
                firmware[str(item.identity)] = str(item.version)
        return firmware

    # --- acting ------------------------------------------------------------------------

    def power(self, state: str) -> None:
        """``On``, ``Off`` or ``restart`` (ForceRestart)."""
        from sushy import ResetType

        try:
            self._system.reset_system(ResetType(RESET_FOR[state]))
        except Exception as exc:
            raise self._error(f"power {state} failed", exc) from None

    def boot_pxe_once(self) -> None:
        """Boot from the network at the next start only, then from disk again."""
        from sushy import BootSource, BootSourceOverrideEnabled

        try:
            self._system.set_system_boot_options(BootSource.PXE, enabled=BootSourceOverrideEnabled.ONCE)
        except Exception as exc:
            raise self._error("setting boot-once PXE failed", exc) from None

    def set_bios(self, attributes: dict[str, Any]) -> None:
        """Stage BIOS attributes; the BMC applies them at the next reboot."""
        try:
            self._system.bios.set_attributes(attributes)
        except Exception as exc:
            raise self._error("setting BIOS attributes failed", exc) from None

    def update_firmware(self, component: str, image: str, timeout_s: float = FIRMWARE_TASK_TIMEOUT_S) -> str:
        """Have the BMC fetch ``image`` and update ``component`` with it (Redfish
        ``UpdateService.SimpleUpdate``), following the task monitor until the task ends.
        Returns the task's end in words; a task that ends in anything but ``Completed`` (or
        outlives ``timeout_s``) is a `BmcError` with the BMC's messages. The new version is
        read back by the caller after the reboot the update needs."""
        from sushy import UpdateTransferProtocolType

        protocol = UpdateTransferProtocolType.HTTPS if image.startswith("https://") else UpdateTransferProtocolType.HTTP
        try:
            service = self._conn.get_update_service()
            monitor = service.simple_update(image, targets=self._update_targets(component, service),
                                            transfer_protocol=protocol)
        except BmcError:
            raise
        except Exception as exc:
            raise self._error(f"the BMC refused the {component} firmware update (UpdateService.SimpleUpdate)",
                              exc) from None
        deadline = time.monotonic() + timeout_s
        try:
            while monitor.is_processing:
                if time.monotonic() > deadline:
                    raise BmcError(f"{self.bmc.host}: the {component} firmware update task "
                                   f"{monitor.task_monitor_uri} was still running after {timeout_s:g} s: "
                                   "look at the BMC before rebooting the node")
                time.sleep(min(float(monitor.sleep_for), MAX_POLL_S))
                monitor.refresh()
            state, status, messages = self._task_end(monitor)
        except BmcError:
            raise
        except Exception as exc:
            raise self._error(f"following the {component} firmware update task failed", exc) from None
        if state not in TASK_DONE or status not in TASK_OK:
            detail = "; ".join(messages) or "the BMC gave no message"
            raise BmcError(self.redactor(f"{self.bmc.host}: the {component} firmware update ended {state}/{status}: "
                                         f"{detail}"[:600]))
        return f"task {state}/{status or 'no status'}"

    def _update_targets(self, component: str, service: Any) -> list[str] | None:
        """What SimpleUpdate's ``Targets`` names: the System for the BIOS, the node's Manager
        for the BMC; for the others the FirmwareInventory member that reports the component
        (``None``, the BMC picks by the image, where it lists none)."""
        if component == "bios":
            return [self._system.path]
        if component == "bmc":
            managers = self._system.managers
            if not managers:
                raise BmcError(f"{self.bmc.host}: the system lists no Manager to update the BMC firmware of")
            return [managers[0].path]
        try:
            members = service.firmware_inventory.get_members()
        except Exception:
            return None
        words = INVENTORY_KEYS[component]
        paths = [m.path for m in members
                 if any(str(m.identity).lower().startswith(w) or f"_{w}" in str(m.identity).lower() for w in words)]
        return paths or None

    @staticmethod
    def _task_end(monitor: Any) -> tuple[str | None, str | None, list[str]]:
        """The finished task's state, status and messages: from the monitor's last answer
        where it carries the Task, else from the Task resource it names."""
        doc: dict[str, Any] = {}
        try:
            doc = monitor.response.json() if monitor.response.content else {}
        except ValueError:
            doc = {}
        if "TaskState" not in doc:
            task = monitor.get_task()
            return (_value(task.task_state), _value(task.task_status),
                    [str(m.message) for m in (task.messages or []) if m.message])
        return (doc.get("TaskState"), doc.get("TaskStatus"),
                [str(m.get("Message")) for m in doc.get("Messages") or [] if isinstance(m, dict) and m.get("Message")])
