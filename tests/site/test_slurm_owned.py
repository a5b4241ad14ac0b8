"""#27 item 4: the Slurm keys fleetspec owns come from what each key does (authentication,
plugin loading, addresses, privilege) over every release's parameter list, and every key
the renderer writes is owned or a reasoned tunable default, so a site setting can never
replace a key fleetspec writes for a reason."""

from __future__ import annotations

import dataclasses
from pathlib import PurePosixPath

import pytest
import yaml

from fleetspec.pipeline import compile_text
from fleetspec.render.slurm import render_slurm
from fleetspec.site.slurm import OWNED, TUNABLE, owned_keys, owner
from tests.slurm import fleets

from .specs import spec

VERSIONS = ("22.05.8", "24.11.6", "25.11.8")


@pytest.mark.parametrize(("extra", "node", "key"), [
    ("    settings: {SlurmctldAddr: 10.0.0.9}\n", "", "SlurmctldAddr"),
    ("    settings: {AuthAltTypes: auth/jwt}\n", "", "AuthAltTypes"),
    ("    settings: {AuthAltParameters: jwt_key=/tmp/k}\n", "", "AuthAltParameters"),
    ("    settings: {PluginDir: /tmp/evil}\n", "", "PluginDir"),
    ("    settings: {JobSubmitPlugins: lua}\n", "", "JobSubmitPlugins"),
    ("    accounting: {host: db-01}\n    slurmdbd_settings: {PluginDir: /tmp/evil}\n", "", "PluginDir"),
    ("    accounting: {host: db-01}\n    slurmdbd_settings: {AuthAltTypes: auth/jwt}\n", "", "AuthAltTypes"),
    ("    cgroup_settings: {CgroupPlugin: disabled}\n", "", "CgroupPlugin"),
    ("", "          slurm_settings: {Boards: 2, SocketsPerBoard: 1}", "Boards"),
])
def test_keys_that_authenticate_load_plugins_or_address_daemons_are_owned(extra: str, node: str, key: str) -> None:
    errors = [f for f in compile_text(spec(extra, node_settings=node), "f.yaml").located()
              if f.severity.name == "ERROR"]
    assert errors and errors[0].message.startswith(f"{key} is fleetspec's"), [e.message for e in errors]
    assert errors[0].line > 0


def test_a_site_may_still_tune_what_is_not_owned() -> None:
    text = spec("    settings: {SchedulerParameters: [bf_continue], MaxJobCount: 20000, JobCompType: jobcomp/none}\n")
    assert [f.message for f in compile_text(text, "f.yaml").located() if f.severity.name == "ERROR"] == []


@pytest.mark.parametrize("version", VERSIONS)
def test_owned_set_is_derived_per_release(version: str) -> None:
    for kind in OWNED:
        keys = owned_keys(kind, version)
        assert set(OWNED[kind]) <= set(keys)
        assert not set(keys) & set(TUNABLE[kind]), kind
    assert "SlurmctldAddr" in owned_keys("slurm.conf", version)
    assert "PluginDir" in owned_keys("slurmdbd.conf", version)
    # TLSType: Debian's slurmctld 24.11.5 parses it, 22.05.8 does not (catalog `added`,
    # tests/slurm/test_parameters_real.py): owned where the release parses it.
    assert ("TLSType" in owned_keys("slurm.conf", version)) == (version in ("24.11.6", "25.11.8"))


def _rendered_keys(files: dict) -> dict[str, set[str]]:
    """kind -> the keys fleetspec wrote, from the rendered files (or Slinky's values)."""
    keys: dict[str, set[str]] = {kind: set() for kind in OWNED}

    def conf(kind: str, text: str) -> None:
        for line in text.splitlines():
            line = line.split("#", 1)[0].strip()
            if "=" not in line:
                continue
            first = line.split("=", 1)[0]
            if kind == "slurm.conf" and first in ("NodeName", "PartitionName"):
                sub = "node" if first == "NodeName" else "partition"
                keys[sub] |= {t.split("=", 1)[0] for t in line.split() if "=" in t}
            else:
                keys[kind].add(first)

    for path, text in files.items():
        name = PurePosixPath(path).name
        if name in ("slurm.conf", "cgroup.conf", "slurmdbd.conf"):
            conf(name, text)
        elif name == "slinky-values.yaml":
            values = yaml.safe_load(text)
            keys["slurm.conf"] |= set(values.get("controller", {}).get("extraConfMap", {}))
            keys["slurmdbd.conf"] |= set((values.get("accounting") or {}).get("extraConfMap", {}))
            for nodeset in values.get("nodesets", {}).values():
                keys["node"] |= set(nodeset.get("extraConfMap") or {})
            for partition in values.get("partitions", {}).values():
                keys["partition"] |= set(partition.get("configMap") or {})
            for name, body in (values.get("configFiles") or {}).items():
                if name in keys:
                    conf(name, body)
    return keys


def _fleets():
    for make in (fleets.quickstart, fleets.museum, fleets.nvl72, fleets.lab):
        for version in VERSIONS:
            fleet = fleets.with_version(make(), version)
            yield version, fleet
            if fleet.slurm is not None:
                yield version, dataclasses.replace(fleet, slurm=dataclasses.replace(fleet.slurm, mode="slinky"))


def test_every_key_the_renderer_writes_is_owned_or_a_reasoned_tunable() -> None:
    """Fails when the renderer starts writing a key that is neither: a site setting could
    then replace it without anyone deciding that it may."""
    checked = 0
    for version, fleet in _fleets():
        for kind, keys in _rendered_keys(render_slurm(fleet)).items():
            for key in keys:
                assert owner(kind, key) or key in TUNABLE[kind], (kind, key, version)
                checked += 1
    assert checked > 200


def test_the_rendered_key_check_can_fail() -> None:
    files = {PurePosixPath("slurm/slurm.conf"): "ClusterName=x\nCgroupPlugin=x\nKillWait=30\n"
                                                "NodeName=a Weight=1\n"}
    keys = _rendered_keys(files)
    assert keys["slurm.conf"] == {"ClusterName", "CgroupPlugin", "KillWait"} and keys["node"] == {"NodeName", "Weight"}
    assert not (owner("slurm.conf", "KillWait") or "KillWait" in TUNABLE["slurm.conf"])
