"""Parsers against the real H200 node's outputs, and against garbage."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fleetspec.node_side import collector as parsers
from tests.conftest import require_shared

FIXTURE = "fixtures/h200-node"


def fixture_text(name: str) -> str:
    return (require_shared(FIXTURE) / name).read_text()


def misc_section(title: str) -> str:
    """A '## title' section of misc.txt (the probe script's concatenated outputs)."""
    sections = re.split(r"^## ", fixture_text("misc.txt"), flags=re.MULTILINE)
    for section in sections:
        head, _, body = section.partition("\n")
        if head.strip() == title:
            return body
    raise AssertionError(f"misc.txt has no section {title!r}")


def test_proc_driver_version_reads_the_open_module() -> None:
    assert parsers.parse_proc_driver_version(misc_section("proc version")) == {
        "version": "580.159.04",
        "module": "open",
    }


def test_proc_driver_version_reads_the_proprietary_module() -> None:
    text = (
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    assert parsers.parse_proc_driver_version(text) == {"version": "550.54.15", "module": "proprietary"}


def test_nvidia_smi_xml_gives_driver_cuda_and_the_h200() -> None:
    facts = parsers.parse_nvidia_smi_xml(fixture_text("nvidia-smi-q.xml"))
    assert facts["driver_version"] == "580.159.04"
    assert facts["cuda_version"] == "13.0"
    assert len(facts["gpus"]) == 1
    gpu = facts["gpus"][0]
    assert gpu["index"] == 0
    assert gpu["name"] == "NVIDIA H200"
    assert gpu["architecture"] == "Hopper"
    assert gpu["uuid"] == "GPU-00000000-1111-2222-3333-444444444444"
    assert gpu["serial"] == "0000000000000"
    assert gpu["pci_bus_id"] == "00000000:00:06.0"
    assert gpu["memory_mib"] == 143771
    # nvidia-smi 580's XML carries no compute capability; the CSV query does.
    assert gpu["compute_capability"] is None
    assert gpu["mig_mode"] == {"current": "Disabled", "pending": "Disabled"}
    assert gpu["fabric"] == {"state": None, "status": None, "clique_id": None, "cluster_uuid": None}


def test_nvidia_smi_xml_reads_fabric_state_when_reported() -> None:
    text = (
        "<nvidia_smi_log><driver_version>580.95.05</driver_version><cuda_version>13.0</cuda_version>"
        "<gpu id='00000000:18:00.0'><product_name>NVIDIA GB200</product_name><uuid>GPU-1</uuid>"
        "<compute_cap>10.0</compute_cap>"
        "<fabric><state>Completed</state><status>Success</status><cliqueId>32766</cliqueId>"
        "<clusterUuid>c0ffee</clusterUuid></fabric></gpu></nvidia_smi_log>"
    )
    gpu = parsers.parse_nvidia_smi_xml(text)["gpus"][0]
    assert gpu["compute_capability"] == "10.0"
    assert gpu["fabric"] == {"state": "Completed", "status": "Success", "clique_id": "32766", "cluster_uuid": "c0ffee"}


def test_query_gpu_csv_with_header() -> None:
    rows = parsers.parse_query_gpu_csv(fixture_text("query-gpu.csv"))
    assert rows == [
        {
            "index": 0,
            "name": "NVIDIA H200",
            "uuid": "GPU-00000000-1111-2222-3333-444444444444",
            "driver_version": "580.159.04",
            "pci_bus_id": "00000000:00:06.0",
            "memory_mib": 143771,
            "compute_capability": "9.0",
            "serial": "0000000000000",
            "vbios_version": "96.00.A5.00.1A",
        }
    ]


def test_query_gpu_csv_without_header_takes_the_queried_fields() -> None:
    rows = parsers.parse_query_gpu_csv("1, GPU-x, 8.0\n", ["index", "uuid", "compute_cap"])
    assert rows == [{"index": 1, "uuid": "GPU-x", "compute_capability": "8.0"}]


def test_nvcc_version() -> None:
    assert parsers.parse_nvcc_version(misc_section("nvcc")) == {"release": "13.0", "version": "13.0.88"}


def test_cuda_version_json_keeps_sdk_and_component_versions() -> None:
    # The shape of /usr/local/cuda-13.0/version.json (trimmed) on the fixture node's toolkit.
    text = json.dumps(
        {
            "cuda": {"name": "CUDA SDK", "version": "13.0.2"},
            "cuda_cudart": {"name": "CUDA Runtime (cudart)", "version": "13.0.96"},
            "cuda_nvcc": {"name": "CUDA NVCC", "version": "13.0.88"},
        },
        indent=3,
    )
    assert parsers.parse_cuda_version_json(text) == {
        "version": "13.0.2",
        "components": {"cuda_cudart": "13.0.96", "cuda_nvcc": "13.0.88"},
    }


def test_cuda_version_txt_of_old_toolkits() -> None:
    assert parsers.parse_cuda_version_txt("CUDA Version 10.2.89\n") == "10.2.89"


def test_cudnn_header() -> None:
    text = "#define CUDNN_MAJOR 9\n#define CUDNN_MINOR 19\n#define CUDNN_PATCHLEVEL 0\n"
    assert parsers.parse_cudnn_version_header(text) == "9.19.0"


def test_ldconfig_maps_names_to_every_path() -> None:
    libs = parsers.parse_ldconfig(misc_section("ldconfig"))
    assert libs["libnccl.so.2"] == ["/lib/x86_64-linux-gnu/libnccl.so.2"]
    assert libs["libcudart.so.13"] == ["/usr/local/cuda/targets/x86_64-linux/lib/libcudart.so.13"]
    assert libs["libcudnn.so.9"] == ["/lib/x86_64-linux-gnu/libcudnn.so.9"]
    assert libs["libcuda.so.1"] == ["/usr/local/nvidia/lib64/libcuda.so.1", "/lib/libcuda.so.1"]


def python_probe_values(prefix: str) -> dict[str, int]:
    """``prefix PATH VALUE`` lines of python.txt (the ctypes calls made on the node)."""
    values = {}
    for line in fixture_text("python.txt").splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] == prefix:
            values[fields[1]] = int(fields[2])
    return values


def test_nccl_versions_the_node_reported_decode_to_two_builds() -> None:
    versions = {path: parsers.decode_nccl_version(v) for path, v in python_probe_values("ncclGetVersion").items()}
    assert versions["/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3"] == "2.28.3"
    assert versions["/opt/torch/.venv/lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2"] == "2.28.9"
    assert set(versions.values()) == {"2.28.3", "2.28.9"}


def test_cudart_versions_the_node_reported() -> None:
    values = python_probe_values("cudart")
    assert {parsers.decode_cudart_version(v) for v in values.values()} == {"13.0"}
    assert parsers.library_file_version("/usr/local/cuda-13.0/lib64/libcudart.so.13.0.96") == "13.0.96"
    assert parsers.library_file_version("/usr/local/cuda-13.0/lib64/libcudart.so.13") is None


def test_cudnn_version_torch_reported() -> None:
    match = re.search(r"cudnn (\d+)", fixture_text("python.txt"))
    assert match is not None
    assert parsers.decode_cudnn_version(int(match.group(1))) == "9.19.0"


@pytest.mark.parametrize(
    ("code", "expected"),
    [(22803, "2.28.3"), (22809, "2.28.9"), (20906, "2.9.6"), (2804, "2.8.4"), (2708, "2.7.8")],
)
def test_nccl_encodings_before_and_after_2_9(code: int, expected: str) -> None:
    assert parsers.decode_nccl_version(code) == expected


@pytest.mark.parametrize(("code", "expected"), [(91900, "9.19.0"), (90100, "9.1.0"), (8902, "8.9.2"), (8600, "8.6.0")])
def test_cudnn_encodings_of_8_and_9(code: int, expected: str) -> None:
    assert parsers.decode_cudnn_version(code) == expected


@pytest.mark.parametrize(("code", "expected"), [(13000, "13.0"), (12080, "12.8"), (11080, "11.8")])
def test_cudart_encoding(code: int, expected: str) -> None:
    assert parsers.decode_cudart_version(code) == expected


def test_dpkg_query_keeps_installed_packages_and_dpkg_holds() -> None:
    text = (
        "libnccl2\t2.28.3-1+cuda13.0\thi \n"
        "libnccl-dev\t2.28.3-1+cuda13.0\tii \n"
        "libcudnn9-cuda-13\t9.19.0.56-1\tii \n"
        "nvidia-driver-580-open\t580.159.04-0ubuntu1\tii \n"
        "libnccl1\t\tun \n"
        "slurmd\t22.05.8-4\trc \n"
    )
    packages = parsers.parse_dpkg_query(text)
    assert [(p["name"], p["version"], p["held"]) for p in packages] == [
        ("libcudnn9-cuda-13", "9.19.0.56-1", False),
        ("libnccl-dev", "2.28.3-1+cuda13.0", False),
        ("libnccl2", "2.28.3-1+cuda13.0", True),
        ("nvidia-driver-580-open", "580.159.04-0ubuntu1", False),
    ]


def test_apt_mark_showhold_and_dpkg_search() -> None:
    assert parsers.parse_apt_mark_showhold("libnccl2\nnvidia-driver-580-open:amd64\n\n") == [
        "libnccl2",
        "nvidia-driver-580-open",
    ]
    owners = "libnccl2:amd64: /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3\n"
    assert parsers.parse_dpkg_search(owners) == ["libnccl2"]


def test_rpm_query() -> None:
    assert parsers.parse_rpm_query("libnccl\t2.28.3-1+cuda13.0\n") == [
        {"name": "libnccl", "version": "2.28.3-1+cuda13.0", "status": "installed", "held": False}
    ]


def test_rpm_query_with_the_epoch_and_the_versionlock_list() -> None:
    """RPM_QF's lines: the EVR as the pins write it (no 0:), the NEVRA a lock line matches."""
    text = "kmod-nvidia-open-dkms\t3:580.82.07-1.el9\tnoarch\nlibnccl\t0:2.26.2-1+cuda12.8\tx86_64\n"
    assert [(p["name"], p["version"], p["nevra"]) for p in parsers.parse_rpm_query(text)] == [
        ("kmod-nvidia-open-dkms", "3:580.82.07-1.el9", "kmod-nvidia-open-dkms-3:580.82.07-1.el9.noarch"),
        ("libnccl", "2.26.2-1+cuda12.8", "libnccl-0:2.26.2-1+cuda12.8.x86_64")]
    assert parsers.parse_versionlock("# fleetspec\n\nlibnccl-0:2.26.2-1+cuda12.8.*\n") == ["libnccl-0:2.26.2-1+cuda12.8.*"]
    assert parsers.parse_dnf_module_file("[nvidia-driver]\nname=nvidia-driver\nstream=580-open\nprofiles=\n"
                                         "state=enabled\n") == {"name": "nvidia-driver", "stream": "580-open",
                                                                 "state": "enabled"}


def test_os_release_of_the_node() -> None:
    values = parsers.parse_os_release(misc_section("uname"))
    assert (values["ID"], values["VERSION_ID"]) == ("ubuntu", "24.04")


def test_rocm_version_file() -> None:
    assert parsers.parse_rocm_version_file("6.3.3-74\n") == "6.3.3"
    assert parsers.parse_rocm_version_file("7.0.2\n") == "7.0.2"


# amd-smi 24.x (ROCm 6.2/6.3): a list of GPU objects; sizes as {value, unit}.
AMD_SMI_LIST = [
    {
        "gpu": 0,
        "asic": {"market_name": "AMD Instinct MI300X", "device_id": "0x74a1", "target_graphics_version": "gfx942"},
        "vram": {"type": "HBM3", "vendor": "N/A", "size": {"value": 196592, "unit": "MB"}, "bit_width": 8192},
    },
    {
        "gpu": 1,
        "asic": {"market_name": "AMD Instinct MI300X", "device_id": "0x74a1", "target_graphics_version": "gfx942"},
        "vram": {"type": "HBM3", "size": "196592 MB"},
    },
]


def test_amd_smi_static_list_form() -> None:
    assert parsers.parse_amd_smi_json(json.dumps(AMD_SMI_LIST)) == [
        {"index": 0, "name": "AMD Instinct MI300X", "gfx_target": "gfx942", "vram_mib": 196592},
        {"index": 1, "name": "AMD Instinct MI300X", "gfx_target": "gfx942", "vram_mib": 196592},
    ]


def test_amd_smi_static_gpu_data_form_and_na_values() -> None:
    text = json.dumps({"gpu_data": [{"gpu": 0, "asic": {"market_name": "N/A", "target_graphics_version": "gfx950"}}]})
    assert parsers.parse_amd_smi_json(text) == [{"index": 0, "name": None, "gfx_target": "gfx950", "vram_mib": None}]


def test_rocm_smi_product_names_and_vram() -> None:
    products = {
        "card1": {"Card Series": "AMD Instinct MI250X", "Card Model": "0x740c", "GFX Version": "gfx90a"},
        "card0": {"Card Series": "AMD Instinct MI250X", "Card Model": "0x740c", "GFX Version": "gfx90a"},
        "system": {"Driver version": "6.8.5"},
    }
    assert parsers.parse_rocm_smi_json(json.dumps(products)) == [
        {"index": 0, "name": "AMD Instinct MI250X", "gfx_target": "gfx90a", "vram_mib": None},
        {"index": 1, "name": "AMD Instinct MI250X", "gfx_target": "gfx90a", "vram_mib": None},
    ]
    vram = {"card0": {"VRAM Total Memory (B)": "68702699520", "VRAM Total Used Memory (B)": "10"}}
    assert parsers.parse_rocm_smi_json(json.dumps(vram))[0]["vram_mib"] == 65520


def test_slurmd_version() -> None:
    assert parsers.parse_slurmd_version("slurm 22.05.8\n") == "22.05.8"
    assert parsers.parse_slurmd_version("slurm-wlm 23.11.4\n") == "23.11.4"


def test_fabricmanager_version() -> None:
    assert parsers.parse_fabricmanager_version("Fabric Manager version is : 580.95.05\n") == "580.95.05"


def test_infiniband_sysfs_tree(tmp_path: Path) -> None:
    port = tmp_path / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    (port / "rate").write_text("400 Gb/sec (4X NDR)\n")
    (port / "link_layer").write_text("InfiniBand\n")
    (tmp_path / "mlx5_0" / "fw_ver").write_text("28.39.1002\n")
    roce = tmp_path / "mlx5_1" / "ports" / "1"
    roce.mkdir(parents=True)
    (roce / "state").write_text("1: DOWN\n")
    (roce / "rate").write_text("2.5 Gb/sec (1X SDR)\n")
    (roce / "link_layer").write_text("Ethernet\n")
    devices = parsers.parse_infiniband_sysfs(str(tmp_path))
    assert [d["device"] for d in devices] == ["mlx5_0", "mlx5_1"]
    assert devices[0]["fw_ver"] == "28.39.1002"
    assert devices[0]["ports"] == [
        {
            "port": 1,
            "state": "ACTIVE",
            "phys_state": "LinkUp",
            "rate": "400 Gb/sec (4X NDR)",
            "rate_gbps": 400,
            "link_layer": "InfiniBand",
        }
    ]
    assert devices[1]["ports"][0]["rate_gbps"] == 2.5
    assert devices[1]["ports"][0]["link_layer"] == "Ethernet"


GARBAGE = [
    "",
    "\x00\xff garbage \n\n",
    "<nvidia_smi_log><gpu><fb_memory_usage><total>lots</total></fb_memory_usage></gpu>",
    "{not json",
    "[1, 2, {\"gpu\": \"x\", \"asic\": 5, \"vram\": {\"size\": {\"value\": \"big\"}}}]",
    "{\"card0\": 7, \"gpu_data\": 3}",
    "\t\t\t\n" * 3,
    None,
    12345,
]

TEXT_PARSERS = [
    parsers.parse_proc_driver_version,
    parsers.parse_nvidia_smi_xml,
    parsers.parse_query_gpu_csv,
    parsers.parse_nvcc_version,
    parsers.parse_cuda_version_json,
    parsers.parse_cuda_version_txt,
    parsers.parse_cudnn_version_header,
    parsers.parse_ldconfig,
    parsers.parse_dpkg_query,
    parsers.parse_rpm_query,
    parsers.parse_versionlock,
    parsers.parse_dnf_module_file,
    parsers.parse_apt_mark_showhold,
    parsers.parse_dpkg_search,
    parsers.parse_rocm_version_file,
    parsers.parse_amd_smi_json,
    parsers.parse_rocm_smi_json,
    parsers.parse_slurmd_version,
    parsers.parse_slurmd_config,
    parsers.parse_fabricmanager_version,
    parsers.parse_os_release,
]


@pytest.mark.parametrize("parse", TEXT_PARSERS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("text", GARBAGE, ids=range(len(GARBAGE)))
def test_parsers_never_raise_on_garbage(parse, text) -> None:
    result = parse(text)
    assert result in (None, [], {}) or isinstance(result, (dict, list))
    if isinstance(result, list):
        assert all(isinstance(item, (dict, str)) for item in result)


def test_garbage_yields_nothing_for_version_parsers() -> None:
    for parse in (parsers.parse_proc_driver_version, parsers.parse_nvcc_version, parsers.parse_slurmd_version,
                  parsers.parse_rocm_version_file, parsers.parse_nvidia_smi_xml):
        assert parse("\x00\xff garbage") is None


@pytest.mark.parametrize("value", [None, "x", -5, 0, 3.7, True, [], "22803"])
def test_decoders_tolerate_garbage(value) -> None:
    for decode in (parsers.decode_nccl_version, parsers.decode_cudart_version, parsers.decode_cudnn_version):
        result = decode(value)
        assert result is None or re.match(r"^\d+\.\d+(\.\d+)?$", result)
    assert parsers.decode_nccl_version("22803") == "2.28.3"


def test_infiniband_parser_tolerates_a_missing_directory(tmp_path: Path) -> None:
    assert parsers.parse_infiniband_sysfs(str(tmp_path / "nope")) == []
