"""Run OpenStack's sushy-emulator (the Redfish BMC Ironic's CI uses) with its fake driver,
extended with what a GPU node's BMC reports and the fake driver leaves out: BIOS attributes
(served against the emulator's own attribute registry), BIOS and firmware versions, memory
and processors. Power changes take effect at once instead of after the fake driver's random
1-11 s, and a BIOS change waits for the next power-on or restart, as on a real BMC.

Everything on the wire is the emulator's: its Flask routes, templates, registry and HTTP
basic authentication; only the systems' storage is this driver's, plus what the emulator's
UpdateService leaves out. Its ``SimpleUpdate`` neither fetches the ``ImageURI`` nor runs a
task (it raises the System's BiosVersion minor number at once and answers 204 with a fixed,
completed task), so this harness answers the action as a BMC does: it downloads the image
(recording its URI, size and SHA-256 in the system's state), answers 202 with a task monitor
that reports ``Running`` for two polls, then runs the emulator's own SimpleUpdate (the
version bump) and reports ``Completed``/``OK``, or ``Exception``/``Critical`` with the
reason when the download or the emulator's update failed.

With ``FLEETSPEC_PUSH = True`` in the emulator's config it is also a BMC that takes pushed
images, which sushy-emulator does not model at all (its UpdateService names no
``MultipartHttpPushUri`` and it serves no FirmwareInventory):

- the UpdateService advertises ``MultipartHttpPushUri`` ("the URI used to perform a Redfish
  Specification-defined Multipart HTTP or HTTPS push update to the Update Service", DMTF
  UpdateService schema) and serves ``FirmwareInventory``: per system with an ``inventory``,
  one SoftwareInventory member per component (``BMC_<tail>``, ``GPU_SXM_<i>_<tail>``,
  ``NVSwitch_<i>_<tail>``), each with ``RelatedItem`` naming the Manager (the BMC) or the
  System it belongs to, as a service serving several systems must;
- the push (DSP0266 "Multipart HTTP push updates": a multipart/form-data POST with an
  ``UpdateParameters`` part, JSON with ``Targets`` and ``@Redfish.OperationApplyTime``, and an
  ``UpdateFile`` part) answers 202 and a task monitor, as SimpleUpdate's does. What is awkward
  on real BMCs is here too: a body over ``FLEETSPEC_PUSH_MAX_BYTES`` is answered 413 before it
  is read, without the service advertising ``MaxImageSizeBytes`` (Lenovo XCC3's REST API
  documents "returns code 413 when file size is too large" for its MultipartHttpPushUri); an
  image for another component than its target ends the task ``Exception``/``Critical`` with the
  reason; a target the service does not list is a 400;
- an image carries its version (its first line ``FIRMWARE <component> <version>``, as a
  vendor image carries its own) and that is what the component reports afterwards, never a
  version the client names;
- ``OnReset`` stages the image: the component reports its old version until the System is
  next restarted or powered on, then the new one. ``Immediate`` applies at the task's end;
- the BMC's own firmware (a Manager target) applies ``Immediate`` only, and the BMC then
  resets: the process re-executes itself, so its port refuses connections for
  ``FLEETSPEC_BMC_RESET_S`` seconds plus its start, as a BMC rebooting into new firmware is
  unreachable (its state, in the driver's sqlite, survives). With
  ``FLEETSPEC_BMC_RESET_EARLY`` it resets before answering the task monitor's last poll, so
  the client never sees the task's end, as a BMC that reboots into its new image at once does.

With ``FLEETSPEC_MACHINES = {name: argv}`` a system is a real virtual machine, as a
libvirt domain is behind sushy-emulator's libvirt driver in Ironic's CI: powering it on (or
restarting it) starts ``argv`` (a QEMU command line) with ``-boot n`` when the system's boot
source is ``Pxe`` and ``-boot c`` otherwise, as the firmware's boot order would; powering it
off ends that process. Its pid and kernel start time are kept in the system's state
(``machine``), so a BMC reset (the re-exec) does not lose it and the tests end exactly it;
the harness ends its machines when it is itself terminated.

Run as ``python bmc_emulator.py --config FILE --interface 127.0.0.1 --port N``.
"""

import hashlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import flask
from sushy_tools.emulator import main
from sushy_tools.emulator.controllers import update_service
from sushy_tools.emulator.resources.systems import fakedriver

from fleetspec.lab.slurm import process_start_time


class GpuNodeFakeDriver(fakedriver.FakeDriver):
    def get_bios(self, identity):
        return dict(self._get(identity).get("bios", {}))

    def set_bios(self, identity, attributes):
        system = self._get(identity)
        self._update(system, bios_pending={**system.get("bios_pending", {}), **attributes})

    def reset_bios(self, identity):
        self._update(identity, bios={}, bios_pending={})

    def get_versions(self, identity):
        return dict(self._get(identity).get("versions", {}))

    def set_versions(self, identity, firmware_versions):
        system = self._get(identity)
        self._update(system, versions={**system.get("versions", {}), **firmware_versions})

    def record_image(self, identity, image):
        system = self._get(identity)
        self._update(system, firmware_images=[*system.get("firmware_images", []), image])

    def get_total_memory(self, identity):
        return self._get(identity).get("memory_gib")

    def get_total_cpus(self, identity):
        return self._get(identity).get("cpus")

    def get_processors(self, identity):
        """The sockets, with cores and threads as real BMCs report them (each socket's
        TotalCores and TotalThreads: two threads a core, as on the four captured servers in
        shared/redfish/mockups), and a GPU Processor per GPU in the inventory (rendered by
        `processor` below: the emulator's template knows only CPUs)."""
        system = self._get(identity)
        sockets = system.get("sockets", 0)
        threads = (system.get("cpus") or 2 * sockets) // max(sockets, 1)
        cpus = [{"id": f"CPU{i}", "Id": f"CPU{i}", "socket": f"CPU {i}", "model": system.get("cpu_model", "N/A"),
                 "vendor": "N/A", "cores": str(max(threads // 2, 1)), "threads": str(threads)} for i in range(sockets)]
        gpus = [{"id": key, "Id": key, "socket": key, "model": "H100 80GB HBM3", "vendor": "NVIDIA", "cores": "0",
                 "threads": "0"} for key in sorted(system.get("inventory", {})) if key.startswith("GPU_")]
        return cpus + gpus

    def set_boot_device(self, identity, boot_source):
        boot = (flask.request.get_json(silent=True) or {}).get("Boot") or {} if flask.has_request_context() else {}
        self._update(identity, boot_device=boot_source, boot_once=boot.get("BootSourceOverrideEnabled") == "Once")

    def set_inventory(self, identity, key, version):
        system = self._get(identity)
        if key == "BIOS":
            self._update(system, versions={**system.get("versions", {}), "BiosVersion": version})
        else:
            self._update(system, inventory={**system.get("inventory", {}), key: version})

    def stage(self, identity, key, version):
        system = self._get(identity)
        self._update(system, staged={**system.get("staged", {}), key: version})

    def set_power_state(self, identity, state):
        system = self._get(identity)
        if state in ("On", "ForceOn", "ForceRestart", "GracefulRestart", "PowerCycle"):
            pending = system.get("bios_pending") or {}
            boots = system.get("boots", [])
            target = system.get("boot_device", "Hdd")
            staged = system.get("staged") or {}  # OnReset images take effect as the system starts
            versions = {**system.get("versions", {}), **({"BiosVersion": staged["BIOS"]} if "BIOS" in staged else {})}
            inventory = {**system.get("inventory", {}), **{k: v for k, v in staged.items() if k != "BIOS"}}
            self._update(system, power_state="On", bios={**system.get("bios", {}), **pending}, bios_pending={},
                         boots=[*boots, target], staged={}, versions=versions,
                         **({"inventory": inventory} if "inventory" in system else {}))
            machine = _start_machine(system, target)
            if machine is not None:
                self._update(system, machine=machine)
            if system.get("boot_once"):
                self._update(system, boot_device="Hdd", boot_once=False)
        elif state in ("ForceOff", "GracefulShutdown"):
            _stop_machine(system)
            self._update(system, power_state="Off", machine=None)
        else:
            raise fakedriver.error.NotSupportedError(f"Power state {state} is not supported")


fakedriver.FakeDriver = GpuNodeFakeDriver


def _stop_machine(system):
    """End the system's machine, if it is still the process this harness started."""
    machine = system.get("machine")
    if not machine or process_start_time(machine["pid"]) != machine["start"]:
        return
    os.kill(machine["pid"], signal.SIGTERM)
    for _ in range(100):
        if process_start_time(machine["pid"]) != machine["start"]:
            return
        try:
            os.waitpid(machine["pid"], os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    os.kill(machine["pid"], signal.SIGKILL)


def _start_machine(system, target):
    """Power the system's virtual machine on (again), booting from ``target``."""
    argv = (main.app.config.get("FLEETSPEC_MACHINES") or {}).get(system["name"])
    if not argv:
        return None
    _stop_machine(system)
    log = open(f"machine-{system['name']}.log", "ab")
    process = subprocess.Popen([*argv, "-boot", "n" if target == "Pxe" else "c"], stdin=subprocess.DEVNULL,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    return {"pid": process.pid, "start": process_start_time(process.pid), "boot": target}


def _end_machines(signum, frame):
    driver = getattr(main.app, "systems", None)
    if driver is not None:
        for uuid in list(getattr(driver, "systems", [])):
            try:
                _stop_machine(driver._get(uuid))
            except Exception:
                pass
    sys.exit(0)

RUNNING_POLLS = 2
_TASKS: dict[str, dict] = {}
_LOCK = threading.Lock()
_IDS = itertools.count(100)


def _task(task_id, state, status, message=None):
    doc = {"@odata.type": "#Task.v1_4_3.Task", "@odata.id": f"/redfish/v1/TaskService/TaskMonitors/{task_id}",
           "Id": task_id, "Name": f"Firmware update {task_id}", "TaskState": state, "TaskStatus": status,
           "PercentComplete": 100 if state != "Running" else 50}
    if message:
        doc["Messages"] = [{"MessageId": "Update.1.0.UpdateFailed", "Message": message, "Severity": "Critical"}]
    return json.dumps(doc)


def simple_update():
    body = flask.request.get_json(silent=True) or {}
    uri = body.get("ImageURI")
    task_id = str(next(_IDS))
    failure = None
    if not uri:
        return flask.render_template("error.json", message="Missing ImageURI."), 400
    # the running BIOS image (Bios Links.ActiveSoftwareImage) is the target a client names;
    # the emulator's own SimpleUpdate, which does the update, knows its System
    translated = []
    for target in body.get("Targets") or []:
        kind, _, ident = str(target).rstrip("/").rpartition("/")
        found = _find_member(ident) if kind == INVENTORY else None
        if found is not None and found[1] != "BIOS":
            return _error(f"SimpleUpdate on this BMC updates the BIOS only, not {target}", 400)
        translated.append(f"/redfish/v1/Systems/{found[0]}" if found is not None else target)
    body = {**body, "Targets": translated}
    try:
        with urllib.request.urlopen(uri, timeout=10) as answer:
            data = answer.read()
    except Exception as exc:
        failure = f"image download from {uri} failed: {exc}"
    else:
        for target in body.get("Targets") or []:
            name = target.rstrip("/").rsplit("/", 1)[-1]
            try:
                flask.current_app.systems.record_image(flask.current_app.systems.uuid(name), {
                    "uri": uri, "size": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                    "protocol": body.get("TransferProtocol")})
            except Exception:
                pass  # the emulator's own update names an unknown target
    with _LOCK:
        _TASKS[task_id] = {"polls": 0, "body": body, "failure": failure}
    return flask.Response(_task(task_id, "Running", "OK"), status=202, content_type="application/json",
                          headers={"Location": f"/redfish/v1/TaskService/TaskMonitors/{task_id}"})


def task_monitor(task_id):
    with _LOCK:
        task = _TASKS.get(task_id)
        if task is None:
            return flask.render_template("error.json", message="no such task"), 404
        task["polls"] += 1
        if task["polls"] <= RUNNING_POLLS:
            return flask.Response(_task(task_id, "Running", "OK"), status=202, content_type="application/json",
                                  headers={"Location": f"/redfish/v1/TaskService/TaskMonitors/{task_id}"})
        if "done" not in task:
            if task["failure"] is None and "finish" in task:  # a push: apply or stage it now
                task["failure"] = task["finish"]()
                if task["failure"] is None and task["resets_bmc"] and main.app.config.get("FLEETSPEC_BMC_RESET_EARLY"):
                    _reset_bmc()  # before answering: the task monitor goes with the BMC
            elif task["failure"] is None:  # the emulator's own SimpleUpdate does the update
                with flask.current_app.test_request_context(json=task["body"]):
                    answer = update_service.update_service_simple_update()
                if answer.status_code >= 400:
                    task["failure"] = f"the update failed: {answer.get_data(as_text=True)[:300]}"
            task["done"] = (_task(task_id, "Exception", "Critical", task["failure"]) if task["failure"]
                            else _task(task_id, "Completed", "OK"))
            if task["failure"] is None and task.get("resets_bmc"):
                threading.Timer(0.3, _reset_bmc).start()  # after this answer has gone out
        return flask.Response(task["done"], status=200, content_type="application/json")


# --- MultipartHttpPushUri, FirmwareInventory, the BMC's reset ------------------------------

PUSH_URI = "/redfish/v1/UpdateService/upload"
INVENTORY = "/redfish/v1/UpdateService/FirmwareInventory"
IMAGE_HEADER = re.compile(rb"FIRMWARE (\S+) (\S+)")
# inventory key prefix -> the stack component an image for it names
COMPONENT_OF = {"BMC": "bmc", "GPU": "vbios", "NVSwitch": "nvswitch", "BIOS": "bios"}


def _push_enabled():
    return bool(main.app.config.get("FLEETSPEC_PUSH"))


def _error(message, status):
    return flask.Response(json.dumps({"error": {"code": "Base.1.0.GeneralError", "message": message,
                                                "@Message.ExtendedInfo": [{"MessageId": "Base.1.0.GeneralError",
                                                                           "Message": message}]}}),
                          status=status, content_type="application/json")


def _member_id(key, uuid):
    return f"{key}_{uuid[-4:]}"


def update_service_resource():
    doc = json.loads(original_update_service().get_data(as_text=True))
    if _push_enabled():
        doc["MultipartHttpPushUri"] = PUSH_URI
        doc.pop("MaxImageSizeBytes", None)  # a BMC that says nothing of its limit, and answers 413
    return flask.Response(json.dumps(doc), content_type="application/json")


# Images beside the running ones, as real inventories list them (the Supermicro capture's
# Golden_BIOS, Enabled and Updateable, an older version; Lenovo's BMC-Backup, StandbySpare):
# never the version, never a target.
OTHER_IMAGES = {"BIOS_Golden": ("1.0.0", "Enabled"), "BMC_Backup": ("1.00", "StandbySpare")}


def _images(system):
    """A system's firmware images (key -> version): its BIOS (BiosVersion) and a golden BIOS
    beside it, and its ``inventory``'s BMC (a backup BMC image beside it), GPUs and NVSwitches."""
    inventory = system.get("inventory", {})
    others = {k: v for k, (v, _) in OTHER_IMAGES.items() if k.startswith("BIOS") or "BMC" in inventory}
    return {"BIOS": system.get("versions", {}).get("BiosVersion", "unknown"), **inventory, **others}


def _related(uuid, key):
    """What an image's RelatedItem points at, as real BMCs point (the captures in
    shared/redfish/mockups: ``/Managers/1``, ``/Systems/1/Bios``, ``.../Processors/GPU1``):
    the Manager, the System's BIOS resource, the GPU Processor, the fabric switch."""
    if key.startswith("BMC"):
        return f"/redfish/v1/Managers/{uuid}"
    if key.startswith("BIOS"):
        return f"/redfish/v1/Systems/{uuid}/BIOS"
    if key.startswith("GPU_"):
        return f"/redfish/v1/Systems/{uuid}/Processors/{key}"
    return f"/redfish/v1/Fabrics/NVLink_{uuid[-4:]}/Switches/{key}"


def inventory_collection():
    members = [{"@odata.id": f"{INVENTORY}/{_member_id(key, uuid)}"}
               for uuid, system in _all_systems() for key in sorted(_images(system))]
    return flask.Response(json.dumps({
        "@odata.type": "#SoftwareInventoryCollection.SoftwareInventoryCollection", "@odata.id": INVENTORY,
        "Name": "Firmware Inventory Collection", "Members@odata.count": len(members), "Members": members}),
        content_type="application/json")


def _all_systems():
    driver = flask.current_app.systems
    for uuid in driver.systems:
        yield uuid, driver._get(uuid)


def _find_member(member_id):
    for uuid, system in _all_systems():
        for key, version in _images(system).items():
            if _member_id(key, uuid) == member_id:
                return uuid, key, version
    return None


def inventory_member(member_id):
    found = _find_member(member_id)
    if found is None:
        return _error(f"no firmware inventory member {member_id}", 404)
    uuid, key, version = found
    related = _related(uuid, key)
    return flask.Response(json.dumps({
        "@odata.type": "#SoftwareInventory.v1_10_0.SoftwareInventory", "@odata.id": f"{INVENTORY}/{member_id}",
        "Id": member_id, "Name": f"{key} firmware", "Version": version, "Updateable": True,
        "RelatedItem": [{"@odata.id": related}],
        "Status": {"State": OTHER_IMAGES.get(key, (None, "Enabled"))[1], "Health": "OK"}}),
        content_type="application/json")


def manager_resource(identity):
    """The emulator's Manager, with what real BMCs add: the running firmware's version and
    ``Links.ActiveSoftwareImage`` (DMTF Manager schema; all four captured BMCs give it)."""
    answer = original_views["manager"](identity)
    doc = json.loads(answer.get_data(as_text=True))
    system = flask.current_app.systems._get(doc.get("UUID") or identity)
    if "BMC" in system.get("inventory", {}):
        doc["FirmwareVersion"] = system["inventory"]["BMC"]
        doc.setdefault("Links", {})["ActiveSoftwareImage"] = {
            "@odata.id": f"{INVENTORY}/{_member_id('BMC', flask.current_app.systems.uuid(identity))}"}
    return flask.Response(json.dumps(doc), status=answer.status_code, content_type="application/json")


def bios_resource(identity):
    """The emulator's Bios, with ``Links.ActiveSoftwareImage`` naming the running BIOS image
    (DMTF Bios schema, as the Supermicro, Dell and Lenovo captures give it)."""
    answer = original_views["bios"](identity)
    doc = json.loads(answer.get_data(as_text=True))
    uuid = flask.current_app.systems.uuid(identity)
    doc.setdefault("Links", {})["ActiveSoftwareImage"] = {"@odata.id": f"{INVENTORY}/{_member_id('BIOS', uuid)}"}
    return flask.Response(json.dumps(doc), status=answer.status_code, content_type="application/json")


def system_resource(identity):
    """The emulator's System, with the boot override's ``BootSourceOverrideEnabled`` as asked:
    ``Once`` until the next boot, as the captured BMCs allow it (their
    ``BootSourceOverrideEnabled@Redfish.AllowableValues``); the emulator's template always
    says ``Continuous``. PATCH is the emulator's own."""
    answer = original_views["system"](identity)
    if flask.request.method != "GET" or answer.status_code != 200:
        return answer
    doc = json.loads(answer.get_data(as_text=True))
    if flask.current_app.systems._get(flask.current_app.systems.uuid(identity)).get("boot_once"):
        doc.setdefault("Boot", {})["BootSourceOverrideEnabled"] = "Once"
    return flask.Response(json.dumps(doc), status=answer.status_code, content_type="application/json")


def processor_resource(identity, processor_id):
    """A GPU Processor as the Lenovo and DGX captures serve one (``ProcessorType: GPU``);
    the CPUs as the emulator renders them."""
    if not processor_id.startswith("GPU_"):
        return original_views["processor"](identity, processor_id)
    uuid = flask.current_app.systems.uuid(identity)
    if processor_id not in flask.current_app.systems._get(uuid).get("inventory", {}):
        return _error(f"no processor {processor_id}", 404)
    return flask.Response(json.dumps({
        "@odata.type": "#Processor.v1_10_0.Processor", "@odata.id": f"/redfish/v1/Systems/{uuid}/Processors/"
        f"{processor_id}", "Id": processor_id, "Name": processor_id, "ProcessorType": "GPU",
        "Model": "H100 80GB HBM3", "Manufacturer": "NVIDIA", "Status": {"State": "Enabled", "Health": "OK"}}),
        content_type="application/json")


def _target(path):
    """A push target -> (system uuid, inventory key), or None when the service lists no such resource."""
    kind, _, ident = path.rstrip("/").rpartition("/")
    driver = flask.current_app.systems
    try:
        if kind.endswith("/Systems"):
            return driver.uuid(ident), "BIOS"
        if kind.endswith("/Managers"):
            uuid = driver.uuid(ident)
            return (uuid, "BMC") if "BMC" in driver._get(uuid).get("inventory", {}) else None
    except Exception:
        return None
    found = _find_member(ident) if kind == INVENTORY else None
    return None if found is None else (found[0], found[1])


def push_update():
    limit = int(main.app.config.get("FLEETSPEC_PUSH_MAX_BYTES", 1 << 30))
    if (flask.request.content_length or 0) > limit:  # refused before the body is read
        return _error(f"The request body is {flask.request.content_length} bytes; this service takes images of at "
                      f"most {limit} bytes", 413)
    try:
        params = json.loads(flask.request.form["UpdateParameters"])
        upload = flask.request.files["UpdateFile"]
    except (KeyError, ValueError):
        return _error("a multipart push needs an UpdateParameters part (JSON) and an UpdateFile part", 400)
    data = upload.read()
    apply_time = params.get("@Redfish.OperationApplyTime", "Immediate")
    if apply_time not in ("Immediate", "OnReset"):
        return _error(f"@Redfish.OperationApplyTime {apply_time} is not supported by this service", 400)
    targets = []
    for path in params.get("Targets") or []:
        target = _target(str(path))
        if target is None:
            return _error(f"the target {path} is not a resource of this service", 400)
        if target[1] == "BMC" and apply_time != "Immediate":
            return _error("this BMC applies its own firmware Immediate only", 400)
        targets.append(target)
    if not targets:
        return _error("this service needs Targets", 400)
    header = IMAGE_HEADER.search(data[:256])
    failure = None
    if header is None:
        failure = "the image is not one this BMC can install (no FIRMWARE header)"
    else:
        component, version = header.group(1).decode(), header.group(2).decode()
        wrong = [key for _, key in targets if COMPONENT_OF[key.split("_")[0]] != component]
        if wrong:
            failure = f"the image is a {component} image; the target {wrong[0]} takes another component's image"
    driver = flask.current_app.systems
    for uuid, _ in targets:
        driver.record_image(uuid, {"uri": f"push:{upload.filename}", "size": len(data),
                                   "sha256": hashlib.sha256(data).hexdigest(), "protocol": "MultipartHttpPush",
                                   "apply_time": apply_time})

    def finish():
        for uuid, key in targets:
            (driver.set_inventory if apply_time == "Immediate" else driver.stage)(uuid, key, version)
        return None

    task_id = str(next(_IDS))
    with _LOCK:
        _TASKS[task_id] = {"polls": 0, "failure": failure, "finish": finish,
                           "resets_bmc": any(key == "BMC" for _, key in targets)}
    return flask.Response(_task(task_id, "Running", "OK"), status=202, content_type="application/json",
                          headers={"Location": f"/redfish/v1/TaskService/TaskMonitors/{task_id}"})


def _reset_bmc():
    """The BMC reboots into its new firmware: this process re-executes itself and waits
    FLEETSPEC_BMC_RESET_S before it listens again (its listening socket closes on exec)."""
    sys.stdout.flush()
    sys.stderr.flush()
    down = str(main.app.config.get("FLEETSPEC_BMC_RESET_S", 3))
    # werkzeug leaves its listening socket inheritable (for its reloader): close every
    # descriptor but stdio so that the port really closes
    for fd in sorted(int(name) for name in os.listdir("/proc/self/fd")):
        if fd > 2:
            try:
                os.close(fd)
            except OSError:
                pass
    env = {k: v for k, v in os.environ.items() if k != "WERKZEUG_SERVER_FD"}
    os.execve(sys.executable, [sys.executable, *sys.argv], {**env, "FLEETSPEC_BMC_DOWN_S": down})


original_update_service = main.app.view_functions["UpdateService.update_service_resource"]
original_views = {"manager": main.app.view_functions["manager_resource"], "bios": main.app.view_functions["bios"],
                  "processor": main.app.view_functions["processor"],
                  "system": main.app.view_functions["system_resource"]}
main.app.view_functions["system_resource"] = system_resource
main.app.view_functions["manager_resource"] = manager_resource
main.app.view_functions["bios"] = bios_resource
main.app.view_functions["processor"] = processor_resource
main.app.view_functions["UpdateService.update_service_resource"] = update_service_resource
main.app.view_functions["UpdateService.update_service_simple_update"] = simple_update
main.app.add_url_rule("/redfish/v1/TaskService/TaskMonitors/<task_id>", "firmware_task_monitor", task_monitor)
main.app.add_url_rule(INVENTORY, "firmware_inventory", inventory_collection)
main.app.add_url_rule(f"{INVENTORY}/<member_id>", "firmware_inventory_member", inventory_member)
main.app.add_url_rule(PUSH_URI, "multipart_push", push_update, methods=["POST"])

if __name__ == "__main__":
    signal.signal(signal.SIGTERM, _end_machines)
    down = os.environ.pop("FLEETSPEC_BMC_DOWN_S", None)
    if down:
        print(f"BMC reset: away for {down} s", flush=True)
        time.sleep(float(down))
    sys.exit(main.main())
