"""The NVLink 5 facts the catalog sources (nvidia_stack.yaml, nvlink5) are spelled again
where the catalog cannot be read: the collector and the gpu_facts role run on nodes. These
tests hold every copy to the catalog, so a corrected fact cannot leave a stale copy."""

from __future__ import annotations

import re

from fleetspec.catalog import load_catalog
from fleetspec.lab.repo import nvlink5_standins
from fleetspec.node_side import collector
from tests.conftest import ROOT

NVLINK5 = load_catalog().nvlink5_packages()


def test_the_collector_looks_for_the_catalogs_management_bridge_marker():
    assert NVLINK5.management_bridge_vpd == collector.NVLINK5_BRIDGE_VPD


def test_the_gpu_facts_role_greps_for_the_catalogs_management_bridge_marker():
    role = (ROOT / "playbooks" / "roles" / "gpu_facts" / "tasks" / "main.yml").read_text()
    greps = re.findall(r"grep -aq (\S+) \"\$vpd\"", role)
    assert greps == [NVLINK5.management_bridge_vpd]


def test_the_lab_nvlsm_carries_its_config_where_the_fabric_managers_start_script_reads_it():
    nvlsm = [p for p in nvlink5_standins(NVLINK5.nvlsm_version) if p.name == "nvlsm"]
    assert nvlsm and all(list(p.files) == [NVLINK5.nvlsm_config] for p in nvlsm)
