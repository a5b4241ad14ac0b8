"""The inventory is emitted directly (PyYAML's representer costs seconds on 20,000 nodes);
it must be byte for byte what PyYAML writes, for every name, or fall back to PyYAML."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from fleetspec.pipeline import compile_file
from fleetspec.render import ansible
from tests.conftest import EXAMPLES

TRICKY = ["yes", "no", "on", "off", "null", "true", "false", "y", "n", "Yes", "NULL", "nan", "inf", "x" * 128,
          "x" * 127, "a-1", "_a", "h100-001", "o", "t-1", "f", "n1", "y-1", "on-1", "nulls", "1a", "0x1f"]


def _pyyaml(fleet, members, host_vars=None) -> str:
    host_vars = host_vars or {}
    children = {g: {"hosts": {h: (host_vars.get(h) if g == "k8s_node" else None) for h in sorted(hosts)}}
                for g, hosts in members.items()}
    return ansible._dump(fleet, {"all": {"children": children}})


@pytest.mark.parametrize("name", TRICKY)
def test_emitted_inventory_is_what_pyyaml_writes(name: str) -> None:
    fleet = compile_file(EXAMPLES / "quickstart.yaml").fleet
    members = {"slurm_node": {name, "h100-001"}, "rack_r01": {"h100-002"}}
    assert ansible._inventory(fleet, members, {}) == _pyyaml(fleet, members)
    hosts = yaml.safe_load(ansible._inventory(fleet, members, {}))["all"]["children"]["slurm_node"]["hosts"]
    assert hosts == {name: None, "h100-001": None}  # every name reads back as the string it is


def test_the_museum_inventory_is_emitted_directly_and_matches() -> None:
    from fleetspec.render.kubelet import registration_labels

    fleet = compile_file(EXAMPLES / "museum.yaml").fleet
    members = ansible._groups(fleet)
    assert all(map(ansible._plain, members))  # the fast path, not the fallback
    host_vars = {h: {"fleetspec_node_labels": ansible.Quoted(v)} for h, v in registration_labels(fleet).items()}
    assert host_vars and max(len(v) for v in registration_labels(fleet).values()) > 120  # past PyYAML's width
    assert ansible._inventory(fleet, members, host_vars) == _pyyaml(fleet, members, host_vars)
    renamed = dataclasses.replace(fleet, name="museum")
    assert ansible._inventory(renamed, members, host_vars) == _pyyaml(renamed, members, host_vars)


@pytest.mark.parametrize("name", [*TRICKY, "", "a\nb", "h100-001\n", "x" * 129, "é1"])
def test_all_plain_agrees_with_plain_name_by_name(name: str) -> None:
    names = {name, "h100-001", "rack_r01"}
    assert ansible._all_plain(names) == all(map(ansible._plain, names))
    assert ansible._all_plain([name]) == ansible._plain(name)
