"""fleetspec.baremetal.standard on small Redfish trees, modelled on the captured ones in
shared/redfish/mockups (Lenovo's numeric Ids and GPU Processors, Dell's iDRAC known only
through ManagerForServers, Supermicro's backup and staging images): the cases the four
captures do not each show. Pure: no server."""

from __future__ import annotations

from fleetspec.baremetal import standard

INV = "/redfish/v1/UpdateService/FirmwareInventory"
SYS = "/redfish/v1/Systems/1"


def tree(gpu_items: dict[str, dict], managed_by: bool = True, extra: dict | None = None) -> dict:
    docs = {
        "/redfish/v1/Systems": {"Members": [{"@odata.id": SYS}]},
        SYS: {"BiosVersion": "1.4", "Processors": {"@odata.id": f"{SYS}/Processors"}, "Bios": {"@odata.id": f"{SYS}/Bios"},
              "Links": {"ManagedBy": [{"@odata.id": "/redfish/v1/Managers/1"}]} if managed_by else {}},
        f"{SYS}/Processors": {"Members": [{"@odata.id": f"{SYS}/Processors/{i}"} for i in
                                          ("1", "2", "GPU1", "GPU10")]},
        f"{SYS}/Processors/1": {"ProcessorType": "CPU", "TotalCores": 32, "TotalThreads": 64},
        f"{SYS}/Processors/2": {"ProcessorType": "CPU", "TotalCores": 32, "TotalThreads": 64},
        f"{SYS}/Processors/GPU1": {"ProcessorType": "GPU", "Model": "L40"},
        f"{SYS}/Processors/GPU10": {"ProcessorType": "GPU", "Model": "L40"},
        f"{SYS}/Bios": {"Links": {"ActiveSoftwareImage": {"@odata.id": f"{INV}/BIOS"}}},
        "/redfish/v1/Managers": {"Members": [{"@odata.id": "/redfish/v1/Managers/1"}]},
        "/redfish/v1/Managers/1": {"FirmwareVersion": "TGBT42S 2.83", "Links": {
            "ActiveSoftwareImage": {"@odata.id": f"{INV}/BMC-Primary"},
            "ManagerForServers": [{"@odata.id": SYS}]}},
        INV: {"Members": [{"@odata.id": f"{INV}/{i}"} for i in ("BMC-Primary", "BMC-Backup", "BIOS", "Golden_BIOS",
                                                                   *gpu_items)]},
        f"{INV}/BMC-Primary": {"Id": "BMC-Primary", "Version": "42S-2.83", "Updateable": True,
                               "RelatedItem": [{"@odata.id": "/redfish/v1/Managers/1"}]},
        f"{INV}/BMC-Backup": {"Id": "BMC-Backup", "Version": "42S-2.80", "Status": {"State": "StandbySpare"},
                              "RelatedItem": [{"@odata.id": "/redfish/v1/Managers/1"}]},
        f"{INV}/BIOS": {"Id": "BIOS", "Version": "BIOS Date: 08/04/2023 Ver 1.4", "Updateable": True,
                        "RelatedItem": [{"@odata.id": f"{SYS}/Bios"}]},
        f"{INV}/Golden_BIOS": {"Id": "Golden_BIOS", "Version": "Ver 1.3", "Updateable": True,
                               "RelatedItem": [{"@odata.id": f"{SYS}/Bios"}]},
        **{f"{INV}/{i}": {"Id": i, **doc} for i, doc in gpu_items.items()},
        **(extra or {}),
    }
    return docs


def read(docs: dict) -> dict[str, standard.Component]:
    return standard.firmware(docs.get, SYS, docs[SYS], INV)


def gpu_item(device: str, version: str = "95.02", updateable: bool = True, state: str = "Enabled") -> dict:
    return {"Version": version, "Updateable": updateable, "Status": {"State": state},
            "RelatedItem": [{"@odata.id": f"{SYS}/Processors/{device}"}]}


def test_the_running_images_never_a_backup_or_golden_one() -> None:
    got = read(tree({"G1": gpu_item("GPU1"), "G10": gpu_item("GPU10")}))
    assert got["bmc"] == standard.Component({"BMC-Primary": "42S-2.83"}, (f"{INV}/BMC-Primary",))
    assert got["bios"] == standard.Component({"BiosVersion": "1.4"}, (f"{INV}/BIOS",))
    # GPU1's items are not GPU10's: a RelatedItem is at or under a device, never a name prefix
    assert got["vbios"] == standard.Component({"G1": "95.02", "G10": "95.02"}, (f"{INV}/G1", f"{INV}/G10"))


def test_an_item_under_the_device_counts_and_a_pending_one_does_not() -> None:
    items = {"G1": {**gpu_item("GPU1"), "RelatedItem": [{"@odata.id": f"{SYS}/Processors/GPU1/SubProcessors/0"}]},
             "G1-Pending": gpu_item("GPU1", "96.00", state="Disabled"), "G10": gpu_item("GPU10")}
    assert read(tree(items))["vbios"].versions == {"G1": "95.02", "G10": "95.02"}


def test_some_gpus_not_updateable_is_no_target_at_all() -> None:
    got = read(tree({"G1": gpu_item("GPU1"), "G10": gpu_item("GPU10", updateable=False)}))["vbios"]
    assert got.images == () and got.why == ("1 of the GPUs' FirmwareInventory items are not Updateable "
                                            f"({INV}/G10, ...)")


def test_a_gpu_no_item_points_at_is_untold_and_its_own_version_stands_in() -> None:
    docs = tree({"G1": gpu_item("GPU1")})
    docs[f"{SYS}/Processors/GPU10"]["FirmwareVersion"] = "95.01"
    got = read(docs)["vbios"]
    assert got.versions == {"G1": "95.02", "GPU10": "95.01"} and got.images == ()
    assert got.why == f"no FirmwareInventory item points at {SYS}/Processors/GPU10 (RelatedItem), so its running image " \
                      "cannot be told"


def test_the_bmc_is_found_through_manager_for_servers_and_sockets_are_cpu_processors() -> None:
    docs = tree({}, managed_by=False)
    assert read(docs)["bmc"].versions == {"BMC-Primary": "42S-2.83"}
    hardware = standard.hardware(docs.get, SYS, docs[SYS])
    assert (hardware.sockets, hardware.cores, hardware.threads, hardware.gpus) == (2, 64, 128, ("L40", "L40"))


def test_a_system_another_chassis_holds_counts_only_without_cpus() -> None:
    """A GPU baseboard's System in the node's chassis is the node's; another host is not."""
    other = "/redfish/v1/Systems/2"
    extra = {"/redfish/v1/Chassis/1": {"Links": {"ComputerSystems": [{"@odata.id": SYS}, {"@odata.id": other}]}},
             other: {"Processors": {"@odata.id": f"{other}/Processors"}},
             f"{other}/Processors": {"Members": [{"@odata.id": f"{other}/Processors/GPU_SXM_1"}]},
             f"{other}/Processors/GPU_SXM_1": {"ProcessorType": "GPU", "Model": "H100 80GB HBM3"}}
    docs = tree({}, extra=extra)
    docs[SYS]["Links"]["Chassis"] = [{"@odata.id": "/redfish/v1/Chassis/1"}]
    docs["/redfish/v1/Systems"]["Members"].append({"@odata.id": other})
    assert standard.node_systems(docs.get, SYS, docs[SYS]) == [SYS, other]
    docs[f"{other}/Processors"]["Members"].append({"@odata.id": f"{other}/Processors/CPU0"})
    docs[f"{other}/Processors/CPU0"] = {"ProcessorType": "CPU"}
    assert standard.node_systems(docs.get, SYS, docs[SYS]) == [SYS]


def test_numeric_inventory_ids_are_read_by_the_same_rules() -> None:
    """Numbered FirmwareInventory members (the HPE-style ``1``..``48`` issue #40 names, as
    Lenovo numbers its Systems and Processors): nothing in an Id is read."""
    docs = tree({"7": gpu_item("GPU1"), "8": gpu_item("GPU10")})
    docs["/redfish/v1/Managers/1"]["Links"]["ActiveSoftwareImage"] = {"@odata.id": f"{INV}/1"}
    docs[INV]["Members"].append({"@odata.id": f"{INV}/1"})
    docs[f"{INV}/1"] = {"Id": "1", "Version": "3.04", "Updateable": True}
    got = read(docs)
    assert got["bmc"] == standard.Component({"1": "3.04"}, (f"{INV}/1",))
    assert got["vbios"].images == (f"{INV}/7", f"{INV}/8")
