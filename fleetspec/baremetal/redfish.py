"""One node's BMC over Redfish, through OpenStack Ironic's client library ``sushy``.

`read` returns what the BMC reports as plain data (`Observed`): the system's model, memory,
NICs, power state, boot source override, BIOS attributes with the attribute registry's
rules, and, read by the Redfish standard (`fleetspec.baremetal.standard`), its sockets, cores
and threads, GPUs, and the running firmware of each component with the images an update
targets. `Session` also acts:
power, boot-once PXE, BIOS attributes, and firmware updates: where the UpdateService
advertises ``MultipartHttpPushUri`` the image is fetched from the site's image store, bounded
and checked against the SHA-256 the spec pins, and pushed (DSP0266 "Multipart HTTP push
updates"), else the BMC is told to fetch it (``UpdateService.SimpleUpdate``); either way the
task monitor is followed to the end, and after a BMC (Manager) update the BMC's own reset is
waited out. The credential is resolved from its secret reference
only here, never logged: errors name the BMC and what failed, and every message goes through
a `Redactor` that knows the password.

Trust: the endpoint was checked at compile time (https, or http to loopback). All traffic,
sushy's included, goes through `fleetspec.baremetal.transport`: only to the endpoint's own
origin (credentials and images never leave it), each request within a total deadline (and
the BMC within ``deadline_s`` where given), each answer at most
`transport.MAX_ANSWER_BYTES`, TLS verified against ``ca_file`` (and ``server_name``) or a
pinned certificate fingerprint, never off. A BMC that breaks one of those rules is an error
for its node, even where the request was for something optional. sushy's server-side
retries are bounded.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, Any
from urllib.parse import urlsplit

from fleetspec.baremetal import standard
from fleetspec.compile.ir import NodeBmc
from fleetspec.secrets import Redactor, SecretError, SecretRef, file_path, resolve

CONNECT_TIMEOUT_S = 10
READ_TIMEOUT_S = 60  # the total time of one request, answer included (transport.py)
# All of one BMC's requests while it is read (plan, verify --bmc): the four real BMCs' trees
# in NVIDIA/libredfish tests/mockups take tens of requests to read, each answered in well under a second.
READ_DEADLINE_S = 300
RETRIES = 2  # sushy's retries on a BMC's 5xx (BMCs answer 503 while busy)
# Power states a plan may ask for, and the Redfish ResetType that reaches each.
RESET_FOR = {"On": "On", "Off": "ForceOff", "restart": "ForceRestart"}
FIRMWARE_TASK_TIMEOUT_S = 3600  # a BMC or GPU baseboard image flashes in minutes, sometimes tens of them
MAX_POLL_S = 30  # a task monitor's Retry-After is followed up to this
# Task endings that mean the update is in (Redfish TaskState / TaskStatus, DSP0268 Task schema).
TASK_DONE = {"Completed"}
TASK_OK = {"OK", "Warning", None}
# A pushed image: fleetspec's own bound on what it downloads and sends (the BMC's
# UpdateService.MaxImageSizeBytes, "the maximum size in bytes of the software update image
# that this service supports" (DMTF UpdateService schema), lowers it where given), and how
# long the upload may take.
IMAGE_MAX_BYTES = 4 << 30
IMAGE_FETCH_TIMEOUT_S = 60  # between two reads from the image store
PUSH_TIMEOUT_S = 1800
# @Redfish.OperationApplyTime in a push's UpdateParameters (DMTF UpdateService schema,
# UpdateParameters; values from the Settings schema's OperationApplyTime): the BMC's own
# firmware applies at once (the BMC resets itself, the host keeps running); everything
# on the host side is staged and applies at the reboot of the node's wave.
APPLY_TIME = {"bmc": "Immediate"}
APPLY_TIME_DEFAULT = "OnReset"
# After its own update a BMC resets: how long it may take to go away, then to answer again.
BMC_GONE_S = 60
BMC_BACK_S = 600
BMC_PROBE_S = 1.0


@dataclass(frozen=True)
class Updated:
    """How a firmware update went: the route, the apply time asked for, the task's end."""

    route: str  # "MultipartHttpPushUri" or "SimpleUpdate"
    apply_time: str | None  # what the push asked for; None: SimpleUpdate (the BMC's default)
    task: str  # "task Completed/OK"
    pushed: int | None = None  # bytes sent (a push)

    @property
    def staged(self) -> bool:
        """Applies at the node's next reset."""
        return self.apply_time == "OnReset"

    def line(self) -> str:
        how = (f"pushed {self.pushed} bytes (sha256 checked), {self.apply_time}" if self.route != "SimpleUpdate"
               else "fetched by the BMC")
        return f"{self.task} ({self.route}: {how})"


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
    sockets: int | None  # CPU Processors members (fleetspec.baremetal.standard)
    nics: tuple[str, ...]  # MAC addresses
    gpus: tuple[str, ...] | None  # one model per GPU; None: the BMC lists no GPU
    bios: dict[str, Any]
    registry: dict[str, Attribute] | None  # None: the BMC publishes no attribute registry
    # component (bios, bmc, vbios, nvswitch) -> the running firmware: where -> version
    firmware: dict[str, dict[str, str]]
    notes: tuple[str, ...] = field(default=())  # what could not be read, in words
    push: bool = False  # the UpdateService takes pushed images (MultipartHttpPushUri)
    cores: int | None = None  # TotalCores of all sockets
    threads: int | None = None  # TotalThreads of all sockets
    targets: dict[str, tuple[str, ...]] = field(default_factory=dict)  # component -> its running images
    untargetable: dict[str, str] = field(default_factory=dict)  # component -> why no running image is known

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "system": self.system, "manufacturer": self.manufacturer, "model": self.model,
                "power": self.power, "boot": {"target": self.boot_target, "enabled": self.boot_enabled},
                "memory_gib": self.memory_gib, "sockets": self.sockets, "cores": self.cores, "threads": self.threads,
                "nics": list(self.nics), "gpus": None if self.gpus is None else list(self.gpus), "bios": self.bios,
                "firmware": self.firmware, "targets": {c: list(t) for c, t in self.targets.items()},
                "untargetable": self.untargetable, "notes": list(self.notes), "push": self.push}


def _value(enum_or_text: Any) -> str | None:
    if enum_or_text is None:
        return None
    return str(getattr(enum_or_text, "value", enum_or_text))


class Session:
    """A Redfish session with one node's BMC: ``with Session(bmc, base_dir) as s: s.read()``."""

    def __init__(self, bmc: NodeBmc, base_dir: Path, redactor: Redactor | None = None,
                 deadline_s: float | None = None) -> None:
        self.bmc = bmc
        self.base_dir = base_dir
        self.redactor = redactor or Redactor()
        self.deadline_s = deadline_s  # all of this session's requests; None: each request's own deadline only
        self._conn: Any = None
        self._system: Any = None
        self._transport: Any = None  # fleetspec.baremetal.transport.Transport
        self._tls: Any = None  # fleetspec.baremetal.transport.Tls, as the spec gives it
        self._shared = False  # the service serves several systems (a chassis manager, an emulator)

    def __enter__(self) -> Session:
        import sushy
        from sushy.connector import Connector

        from fleetspec.baremetal.transport import Tls, Transport

        try:
            password = resolve(SecretRef.parse(f"bmc password of {self.bmc.host}", self.bmc.password), self.base_dir)
        except SecretError as exc:
            raise BmcError(str(exc)) from None
        self.redactor.add(password)
        ca_file = None
        if self.bmc.ca_file:
            ca_file = str(file_path(SecretRef("ca_file", "file", self.bmc.ca_file), self.base_dir))
        self._tls = Tls(ca_file, self.bmc.server_name, tuple(self.bmc.fingerprints))
        self._transport = Transport(self.bmc.endpoint, self._tls, self.deadline_s)
        base = f"{self.bmc.endpoint}/redfish/v1"
        try:
            conn = Connector(base, verify=True, server_side_retries=RETRIES, server_side_retries_delay=1,
                             default_request_timeout=READ_TIMEOUT_S, connect_timeout=CONNECT_TIMEOUT_S)
            conn._session.close()
            # sushy's own requests session replaced before its first request: the login, every
            # link it follows, task monitors and registries all pass the transport's gate
            conn._session = self._transport.http()
            conn._session.headers["Connection"] = "close"  # as sushy's own (BMCs choke on kept-alive connections)
            self._conn = sushy.Sushy(base, username=self.bmc.username, password=password.decode(errors="replace"),
                                     connector=conn, public_connector=self._transport.http())
            self._system = self._find_system()
        except Exception as exc:  # sushy's errors, requests' errors: one message per node
            error = exc if isinstance(exc, BmcError) else self._error("cannot open a Redfish session", exc)
            self._close()
            raise error from None
        try:
            self._check()
        except BmcError:
            self._close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def _close(self) -> None:
        """End the Redfish session now (sushy would at garbage collection, perhaps at the
        interpreter's exit, where no request can run). A BMC that broke a transport rule gets
        no further request: its session times out on the BMC."""
        root, self._conn = self._conn, None
        if root is None:
            return
        auth, root._auth = getattr(root, "_auth", None), None  # sushy's __del__ closes it otherwise
        try:
            if auth is not None and not self._transport.problems:
                auth.close()
        except Exception:
            pass
        try:
            root._conn.close()
        except Exception:
            pass

    def _error(self, what: str, exc: BaseException) -> BmcError:
        if self._transport is not None and self._transport.problems:  # the rule the BMC broke, not its echo
            text = self.redactor(self._transport.problems[0])
        else:
            text = self.redactor(f"{type(exc).__name__}: {exc}")
        return BmcError(f"{self.bmc.host}: {what} at {self.bmc.endpoint}: {text[:800]}")

    def _check(self, what: str = "refused") -> None:
        """A transport rule broken anywhere in the session (even by a request whose failure
        was taken as "not reported") makes the node an error."""
        if self._transport is not None and self._transport.problems:
            raise BmcError(self.redactor(f"{self.bmc.host}: {what} at {self.bmc.endpoint}: "
                                         f"{self._transport.problems[0]}"[:800]))

    def _find_system(self) -> Any:
        collection = self._conn.get_system_collection()
        paths = list(collection.members_identities)
        self._shared = len(paths) > 1
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
            seen = self._read()
        except BmcError:
            raise
        except Exception as exc:
            raise self._error("cannot read the system", exc) from None
        self._check("cannot read the system")
        return seen

    def _read(self) -> Observed:
        # afresh each time: a second refresh(force=True) of a sushy System whose PCIeDevices
        # could not be read fails inside sushy (its half-built collection stays cached)
        s = self._system = self._find_system()
        notes: list[str] = []
        get = self._getter()
        doc = get(s.path) or {}
        hardware = standard.hardware(get, s.path.rstrip("/"), doc)
        if hardware.sockets is None:
            notes.append("no Processors: sockets not checked over Redfish")
        if hardware.gpus is None:
            notes.append("no GPU Processors or GPU PCIe devices: GPU count and model not checked over Redfish")
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
        components = self._firmware(get, doc, notes)
        notes += [f"{c}: {k.why}" for c, k in components.items() if k.why and not k.versions]
        return Observed(
            host=self.bmc.host, system=s.identity, manufacturer=s.manufacturer, model=s.model,
            power=_value(s.power_state) or "unknown", boot_target=_value(s.boot.target),
            boot_enabled=_value(s.boot.enabled),
            memory_gib=s.memory_summary.size_gib if s.memory_summary is not None else None,
            sockets=hardware.sockets, cores=hardware.cores, threads=hardware.threads, nics=tuple(nics),
            gpus=hardware.gpus, bios=bios, registry=registry,
            firmware={c: dict(k.versions) for c, k in components.items() if k.versions},
            targets={c: k.images for c, k in components.items() if k.images},
            untargetable={c: k.why for c, k in components.items() if k.why},
            notes=tuple(notes), push=self._push_uri() is not None)

    def _getter(self) -> standard.Get:
        """``get(path)``: a Redfish document of this BMC, once per read; None where the BMC
        serves no such resource (404, or 405/501: not implemented, as sushy-emulator's fake
        driver answers for what it lacks). Other failures end the read."""
        from sushy import exceptions

        cache: dict[str, dict[str, Any] | None] = {}

        def get(path: str) -> dict[str, Any] | None:
            path = path.split("#", 1)[0].rstrip("/")
            if path not in cache:
                try:
                    doc = self._conn._conn.get(path=path).json()
                except exceptions.ResourceNotFoundError:
                    doc = None
                except exceptions.HTTPError as exc:
                    if exc.status_code not in (405, 501):
                        raise
                    doc = None
                except ValueError:  # not JSON
                    doc = None
                cache[path] = doc if isinstance(doc, dict) else None
            return cache[path]

        return get

    def _registry(self, notes: list[str]) -> dict[str, Attribute] | None:
        try:
            reg = self._system.bios.get_attribute_registry()
            if reg is None:
                reg = self._registry_by_version(self._system.bios)
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

    @staticmethod
    def _registry_by_version(bios: Any) -> Any:
        """The attribute registry the Bios names, where its name and the registry's Id write
        the version differently: Supermicro's Bios names ``BiosAttributeRegistry.v1_0_0``, its
        registry's Id is ``BiosAttributeRegistry.1_0_0`` (the captured Supermicro HGX H100,
        NVIDIA/libredfish tests/mockups/supermicro-hgx-h100). Both forms name one registry."""
        wanted = _registry_key(str(bios._attribute_registry or ""))
        for key, registry in (bios._registries or {}).items():
            if registry is not None and wanted in (_registry_key(key), _registry_key(str(registry.identity))):
                return registry
        return None

    def _firmware(self, get: standard.Get, doc: dict[str, Any], notes: list[str]) -> dict[str, standard.Component]:
        inventory = None
        try:
            inventory = self._conn.get_update_service().json.get("FirmwareInventory")
        except Exception:
            notes.append("no UpdateService/FirmwareInventory")
        path = str(inventory.get("@odata.id")) if isinstance(inventory, dict) and inventory.get("@odata.id") else None
        return standard.firmware(get, self._system.path.rstrip("/"), doc, path, self._shared)

    def _push_uri(self) -> str | None:
        try:
            uri = self._conn.get_update_service().json.get("MultipartHttpPushUri")
        except Exception:
            return None
        return str(uri) if uri else None

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

    def update_firmware(self, component: str, image: str, sha256: str | None = None,
                        timeout_s: float = FIRMWARE_TASK_TIMEOUT_S, max_bytes: int = IMAGE_MAX_BYTES,
                        planned: list[str] | None = None) -> Updated:
        """Update ``component`` with ``image`` and follow the task monitor until the task ends.

        Where the UpdateService advertises ``MultipartHttpPushUri`` (preferred), fleetspec
        fetches the image from the site's image store (at most ``max_bytes``, and the BMC's
        ``MaxImageSizeBytes``), refuses it unless its SHA-256 is ``sha256``, and pushes it with
        ``UpdateParameters`` naming the ``Targets`` and ``@Redfish.OperationApplyTime``
        (Immediate for the BMC's own firmware, OnReset for the rest: staged for the wave's
        reboot). Otherwise ``UpdateService.SimpleUpdate`` has the BMC fetch ``image``. The
        targets are the component's running images as the BMC reports them now, never
        guessed; ``planned`` (the plan's targets) must be those, else nothing is sent. A task
        that ends in anything but ``Completed`` (or outlives ``timeout_s``) is a `BmcError`
        with the BMC's messages.
        The new version is read back by the caller (after the reboot, or the BMC's reset)."""
        from sushy import UpdateTransferProtocolType

        try:
            service = self._conn.get_update_service()
            push_uri = service.json.get("MultipartHttpPushUri")
            targets = self._update_targets(component, planned)
        except BmcError:
            raise
        except Exception as exc:
            raise self._error(f"cannot read the UpdateService for the {component} firmware update", exc) from None
        if push_uri:
            apply_time = APPLY_TIME.get(component, APPLY_TIME_DEFAULT)
            advertised = service.json.get("MaxImageSizeBytes")
            limit = min(max_bytes, advertised) if type(advertised) is int and advertised > 0 else max_bytes
            monitor, size = self._push(component, str(push_uri), image, sha256, targets, apply_time, limit, service)
            return Updated("MultipartHttpPushUri", apply_time, self._follow(component, monitor, timeout_s), size)
        protocol = UpdateTransferProtocolType.HTTPS if image.startswith("https://") else UpdateTransferProtocolType.HTTP
        try:
            monitor = service.simple_update(image, targets=targets, transfer_protocol=protocol)
        except Exception as exc:
            raise self._error(f"the BMC refused the {component} firmware update (UpdateService.SimpleUpdate)",
                              exc) from None
        return Updated("SimpleUpdate", None, self._follow(component, monitor, timeout_s))

    def _push(self, component: str, push_uri: str, image: str, sha256: str | None, targets: list[str],
              apply_time: str, limit: int, service: Any) -> tuple[Any, int]:
        """Fetch, check and push the image (DSP0266 "Multipart HTTP push updates": a
        multipart/form-data POST to MultipartHttpPushUri with an ``UpdateParameters`` part,
        application/json, and an ``UpdateFile`` part, application/octet-stream); the task
        monitor the BMC answers with, and the bytes sent."""
        import requests
        from sushy import exceptions, taskmonitor

        if not sha256:
            raise BmcError(f"{self.bmc.host}: the BMC takes pushed images (UpdateService.MultipartHttpPushUri), so "
                           f"fleetspec sends the {component} image itself and checks it first: give its sha256 in "
                           f"baremetal.firmware_images.{component} ({{url: ..., sha256: ...}})")
        url = push_uri if urlsplit(push_uri).netloc else f"{self.bmc.endpoint}{push_uri}"
        try:  # before the image is fetched: a push URI off the BMC's origin gets nothing
            self._transport.check_origin(url, f"the {component} image (MultipartHttpPushUri)")
        except requests.RequestException:
            raise self._error(f"the {component} firmware update was refused", RuntimeError()) from None
        with tempfile.TemporaryFile() as held:
            size = self._fetch_image(component, image, sha256, limit, held)
            held.seek(0)
            params = {"Targets": targets, "@Redfish.OperationApplyTime": apply_time}
            name = PurePosixPath(urlsplit(image).path).name or f"{component}.bin"
            conn = service._conn  # sushy's connector: its session (the transport's) carries the BMC's authentication
            try:
                # one attempt: a retry would resend a half-read file
                answer = conn._session.request(
                    "POST", url, headers={"OData-Version": "4.0"},
                    timeout=(CONNECT_TIMEOUT_S, PUSH_TIMEOUT_S),
                    files={"UpdateParameters": (None, json.dumps(params), "application/json"),
                           "UpdateFile": (name, held, "application/octet-stream")})
                if answer.status_code == 413:
                    raise BmcError(self.redactor(
                        f"{self.bmc.host}: the BMC refused the {component} image as too large (HTTP 413, {size} "
                        f"bytes): {_messages(answer) or 'no message'}"[:600]))
                exceptions.raise_for_response("POST", url, answer)
                monitor = taskmonitor.TaskMonitor.from_response(conn, answer, push_uri,
                                                                redfish_version=service.redfish_version,
                                                                registries=service.registries)
            except BmcError:
                raise
            except (requests.RequestException, exceptions.SushyError) as exc:
                raise self._error(f"the BMC refused the pushed {component} image (MultipartHttpPushUri)",
                                  exc) from None
        return monitor, size

    def _fetch_image(self, component: str, image: str, sha256: str, limit: int, into: IO[bytes]) -> int:
        """Download ``image`` from the site's image store into ``into``: at most ``limit``
        bytes, and its SHA-256 must be ``sha256``; nothing reaches the BMC otherwise."""
        import requests

        digest = hashlib.sha256()
        size = 0
        what = f"{self.bmc.host}: the {component} image {image}"
        try:
            with requests.get(image, stream=True, timeout=(CONNECT_TIMEOUT_S, IMAGE_FETCH_TIMEOUT_S),
                              allow_redirects=False) as answer:
                if answer.status_code != 200:
                    raise BmcError(f"{what} could not be fetched: HTTP {answer.status_code}. Nothing was sent to "
                                   "the BMC")
                declared = answer.headers.get("Content-Length")
                if declared and declared.isdigit() and int(declared) > limit:
                    raise BmcError(f"{what} is {declared} bytes, over the {limit} bytes a push may carry. Nothing "
                                   "was sent to the BMC")
                for chunk in answer.iter_content(1 << 20):
                    size += len(chunk)
                    if size > limit:
                        raise BmcError(f"{what} is over the {limit} bytes a push may carry. Nothing was sent to "
                                       "the BMC")
                    digest.update(chunk)
                    into.write(chunk)
        except requests.RequestException as exc:
            raise BmcError(self.redactor(f"{what} could not be fetched: {type(exc).__name__}: {exc}"[:600])) from None
        if digest.hexdigest() != sha256:
            raise BmcError(f"{what} has sha256 {digest.hexdigest()}; the spec pins {sha256}. Refused: nothing was "
                           "sent to the BMC")
        return size

    def _follow(self, component: str, monitor: Any, timeout_s: float) -> str:
        """Follow the task monitor to the task's end. A BMC updating its own firmware may
        reset before it reports the end (its task monitor gone with it): that is said, and
        the version read back after the reset decides."""
        from sushy import exceptions

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
        except (exceptions.ConnectionError, exceptions.ResourceNotFoundError) as exc:  # gone, or back without it
            if component != "bmc" or self._transport.problems:  # a refusal is not a reset
                raise self._error(f"following the {component} firmware update task failed", exc) from None
            return "task lost: the BMC reset before reporting its end"
        except Exception as exc:
            raise self._error(f"following the {component} firmware update task failed", exc) from None
        if state not in TASK_DONE or status not in TASK_OK:
            detail = "; ".join(messages) or "the BMC gave no message"
            raise BmcError(self.redactor(f"{self.bmc.host}: the {component} firmware update ended {state}/{status}: "
                                         f"{detail}"[:600]))
        return f"task {state}/{status or 'no status'}"

    def wait_reset(self, gone_within_s: float = BMC_GONE_S, back_within_s: float = BMC_BACK_S) -> float:
        """After the BMC's own firmware update: wait for it to reset (stop answering, within
        ``gone_within_s``; one that never does is taken as having applied it without a reset)
        and to answer again (within ``back_within_s``, else a `BmcError`). Returns the seconds
        it was away. The probe is an unauthenticated GET of the service root."""
        start = time.monotonic()
        while self._answers():
            if time.monotonic() - start > gone_within_s:
                return 0.0
            time.sleep(BMC_PROBE_S)
        gone = time.monotonic()
        while not self._answers():
            if time.monotonic() - gone > back_within_s:
                raise BmcError(f"{self.bmc.host}: the BMC at {self.bmc.endpoint} did not answer again within "
                               f"{back_within_s:g} s of resetting after its firmware update: look at it (its "
                               "console, its power) before anything else")
            time.sleep(BMC_PROBE_S)
        away = time.monotonic() - gone
        try:  # what sushy cached of the system came from the BMC before its reset: read it afresh
            self._system = self._find_system()
        except BmcError:
            raise
        except Exception as exc:
            raise self._error("cannot read the system after the BMC's reset", exc) from None
        return away

    def _answers(self) -> bool:
        """The unauthenticated probe, through a transport of its own (its certificate trusted
        as the session's; a probe that times out is "not answering", not a broken rule)."""
        import requests

        from fleetspec.baremetal.transport import Transport

        try:
            with Transport(self.bmc.endpoint, self._tls).http() as http:
                answer = http.get(f"{self.bmc.endpoint}/redfish/v1/", timeout=(2, 5), allow_redirects=False)
        except requests.RequestException:
            return False
        return answer.status_code < 500

    def _update_targets(self, component: str, planned: list[str] | None = None) -> list[str]:
        """What the update's ``Targets`` names: exactly the running images of ``component``
        as the BMC reports them (`fleetspec.baremetal.standard`): the Manager's and the Bios's
        ``Links.ActiveSoftwareImage``, the inventory items of each GPU or NVSwitch. Where the
        BMC cannot tell them, a `BmcError` says what it could not tell: fleetspec never guesses
        a target (a backup, staging or security chip's image is not the component's)."""
        seen = self.read()
        if seen.targets.get(component):
            now = list(seen.targets[component])
            if planned is not None and sorted(planned) != sorted(now):
                raise BmcError(f"{self.bmc.host}: the {component} firmware's running images are now "
                               f"{', '.join(now)}; the plan targeted {', '.join(planned) or 'none'}. Nothing was "
                               "sent: plan again")
            return now
        why = seen.untargetable.get(component) or f"the BMC reports no {component} firmware"
        raise BmcError(f"{self.bmc.host}: no update target for the {component} firmware: {why}. fleetspec does not "
                       "guess an update target: update it with the vendor's tool")

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


def _registry_key(name: str) -> str:
    """A registry name with its version written one way: ``BiosAttributeRegistry.v1_0_0`` and
    ``BiosAttributeRegistry.1_0_0`` (and ``.1.0.0``) are one key."""
    base, dot, version = name.partition(".")
    version = version.lower().removeprefix("v").replace("_", ".")
    return f"{base}{dot}{version}"


def _messages(answer: Any) -> str:
    """The Redfish error messages in an HTTP answer's body."""
    try:
        doc = answer.json()
    except ValueError:
        return answer.text[:300]
    error = doc.get("error", {}) if isinstance(doc, dict) else {}
    found = [str(m.get("Message")) for m in error.get("@Message.ExtendedInfo") or [] if isinstance(m, dict)]
    return "; ".join(found) or str(error.get("message") or "")
