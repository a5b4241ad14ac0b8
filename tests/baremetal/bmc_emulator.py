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
reason when the download or the emulator's update failed. Run as
``python bmc_emulator.py --config FILE --interface 127.0.0.1 --port N``.
"""

import hashlib
import itertools
import json
import sys
import threading
import urllib.request

import flask
from sushy_tools.emulator import main
from sushy_tools.emulator.controllers import update_service
from sushy_tools.emulator.resources.systems import fakedriver


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
        system = self._get(identity)
        return [{"id": f"CPU{i}", "Id": f"CPU{i}", "socket": f"CPU {i}", "model": system.get("cpu_model", "N/A"),
                 "vendor": "N/A", "cores": "1", "threads": "1"} for i in range(system.get("sockets", 0))]

    def set_boot_device(self, identity, boot_source):
        boot = (flask.request.get_json(silent=True) or {}).get("Boot") or {} if flask.has_request_context() else {}
        self._update(identity, boot_device=boot_source, boot_once=boot.get("BootSourceOverrideEnabled") == "Once")

    def set_power_state(self, identity, state):
        system = self._get(identity)
        if state in ("On", "ForceOn", "ForceRestart", "GracefulRestart", "PowerCycle"):
            pending = system.get("bios_pending") or {}
            boots = system.get("boots", [])
            target = system.get("boot_device", "Hdd")
            self._update(system, power_state="On", bios={**system.get("bios", {}), **pending}, bios_pending={},
                         boots=[*boots, target])
            if system.get("boot_once"):
                self._update(system, boot_device="Hdd", boot_once=False)
        elif state in ("ForceOff", "GracefulShutdown"):
            self._update(system, power_state="Off")
        else:
            raise fakedriver.error.NotSupportedError(f"Power state {state} is not supported")


fakedriver.FakeDriver = GpuNodeFakeDriver

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
            if task["failure"] is None:  # the emulator's own SimpleUpdate does the update
                with flask.current_app.test_request_context(json=task["body"]):
                    answer = update_service.update_service_simple_update()
                if answer.status_code >= 400:
                    task["failure"] = f"the update failed: {answer.get_data(as_text=True)[:300]}"
            task["done"] = (_task(task_id, "Exception", "Critical", task["failure"]) if task["failure"]
                            else _task(task_id, "Completed", "OK"))
        return flask.Response(task["done"], status=200, content_type="application/json")


main.app.view_functions["UpdateService.update_service_simple_update"] = simple_update
main.app.add_url_rule("/redfish/v1/TaskService/TaskMonitors/<task_id>", "firmware_task_monitor", task_monitor)

if __name__ == "__main__":
    sys.exit(main.main())
