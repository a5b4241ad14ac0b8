"""Run OpenStack's sushy-emulator (the Redfish BMC Ironic's CI uses) with its fake driver,
extended with what a GPU node's BMC reports and the fake driver leaves out: BIOS attributes
(served against the emulator's own attribute registry), BIOS and firmware versions, memory
and processors. Power changes take effect at once instead of after the fake driver's random
1-11 s, and a BIOS change waits for the next power-on or restart, as on a real BMC.

Everything on the wire is the emulator's: its Flask routes, templates, registry and HTTP
basic authentication; only the systems' storage is this driver's. Run as
``python bmc_emulator.py --config FILE --interface 127.0.0.1 --port N``.
"""

import sys

import flask
from sushy_tools.emulator import main
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

if __name__ == "__main__":
    sys.exit(main.main())
