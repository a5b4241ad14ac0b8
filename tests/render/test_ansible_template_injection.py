"""No spec-derived string reaches Ansible as a template (issue 13, item 1).

Two layers, each tested over every string field:

- the spec: every string field of the v1alpha1 model, given a template expression, is
  refused by ``validate`` with the location of that field;
- the renderer: every string field of the Fleet IR (a fleet that did not come through
  the spec check: a saved plan, a state file), given a template expression, is either
  refused by the renderer or written so that Ansible's own inventory and variable
  loaders hand it back verbatim: it is loaded with ``InventoryManager`` and
  ``VariableManager`` and templated with ``Templar`` for every host, and the
  expression is never evaluated (the ``pipe`` lookup it carries would create a file).
"""

from __future__ import annotations

import copy
import dataclasses
import types
import typing
from pathlib import Path

import ansible  # noqa: F401 - the test extra installs ansible-core: missing is a failure, not a skip
import pytest
import yaml
from pydantic import BaseModel

from fleetspec.compile import ir
from fleetspec.pipeline import compile_text
from fleetspec.render.ansible import render_ansible
from fleetspec.render.writer import write_tree
from fleetspec.spec.model import FleetSpec
from tests.conftest import EXAMPLES

# Every optional string field set, so that the walk below meets each field of the model.
FULL = yaml.safe_load((EXAMPLES / "museum.yaml").read_text())
FULL["spec"]["packages"] = {"mirror": {"uri": "https://mirror.example.org/apt", "suite": "stable",
                                       "components": "main", "key_url": "https://mirror.example.org/key.gpg"}}
FULL["spec"]["secrets"] = {"munge_key": "file:keys/munge.key", "slurmdbd_password": "env:DBPW",
                           "pulumi_passphrase": "env:PP", "registry_password": "vault:vault.yml#registry"}
FULL["spec"]["slurm"]["state_save_location"] = "/shared/slurm/state"  # two controllers: shared
FULL["spec"]["slurm"]["slinky"] = {"version": "1.2.1"}
FULL["spec"]["slurm"]["pyxis"] = {"enroot": "3.5.0", "pyxis": "0.20.0"}
FULL["spec"]["slurm"]["partitions"]["extra"] = {"nodes": "h100-001", "max_time": "1:00:00", "state": "UP"}
FULL["spec"]["kubernetes"]["kueue"] = {"version": "0.14.1"}
FULL["spec"]["kubernetes"]["volcano"] = {"version": "1.13.0"}
FULL["spec"]["kubernetes"]["quota_owners"] = ["kueue"]
FULL["spec"]["kubernetes"]["gang_policy"] = {"timeout": "10m", "requeue_limit": 3}
FULL["spec"]["kubernetes"]["amd_gpu_operator"] = {"version": "v1.5.1", "driver": "operator", "driver_image": "registry.example.com/gpu/amdgpu-driver", "registry_secret": "amdgpu-pull"}
FULL["spec"]["kubernetes"]["kai"] = {"version": "v0.17.0"}
FULL["spec"]["kubernetes"]["tenants"][0]["limit"] = {"nvidia-blackwell-arm64": 70}
FULL["spec"]["kubernetes"]["network_operator"] = {"enabled": True, "version": "v26.4.1", "rdma": "shared"}
FULL["spec"]["racks"][0]["nodes"][0]["partition"] = "named-part"
FULL["spec"]["racks"][0]["nodes"][0]["features"] = ["ib"]
FULL["spec"]["suppress"] = ["tcp-fallback-risk"]
# What imported clusters need (#29): a site GPU model, MPS beside the GPUs, CPU-only nodes.
FULL["spec"]["gpu_models"] = {"site-board": {"vendor": "nvidia", "name": "Site Board", "generation": "ampere",
                                             "architecture": "Ampere", "memory_gb": 24, "form_factor": "pcie",
                                             "gres": "site_board"}}
FULL["spec"]["racks"][0]["nodes"][0]["other_gres"] = {"mps": 100 * FULL["spec"]["racks"][0]["nodes"][0]["gpu"]["count"]}
FULL["spec"]["racks"][0]["cpu_nodes"] = [{"hosts": "login-01", "scheduler": "slurm", "features": ["login"]}]
# The site's escape hatches (docs/site-settings.md).
FULL["spec"]["slurm"]["settings"] = {"SchedulerParameters": ["bf_continue"], "KillWait": "30"}
FULL["spec"]["slurm"]["cgroup_settings"] = {"ConstrainSwapSpace": "yes", "EnableControllers": ["yes"]}
FULL["spec"]["slurm"]["slurmdbd_settings"] = {"PurgeJobAfter": "12month", "DebugFlags": ["DB_QUERY"]}
FULL["spec"]["slurm"]["partitions"]["extra"]["settings"] = {"PriorityTier": "2", "AllowQos": ["normal"]}
FULL["spec"]["racks"][0]["nodes"][0]["slurm_settings"] = {"Weight": "2", "CpuSpecList": ["0", "1"]}
FULL["spec"]["racks"][0]["nodes"][0]["slurm_state"] = {"state": "DRAIN", "reason": "RMA 4711"}
FULL["spec"]["racks"][0]["cpu_nodes"][0]["slurm_state"] = {"state": "DOWN", "reason": "PSU"}
FULL["spec"]["slurm"]["adopted"] = {"declines": ["default-time"]}  # an adopted cluster (#39)
FULL["spec"]["kubernetes"]["values"] = {"kueue": {"enableCertManager": "false"}}
FULL["spec"]["ansible"] = {"vars": {"site_nfs": "nfs-01"}, "hooks": {
    "before": [{"playbook": "site/mounts.yml", "disruption": "drain", "partitions": ["nvidia-hopper"]}],
    "after": [{"playbook": "site/check.yml", "disruption": "none", "partitions": ["nvidia-hopper"]}]}}
FULL["spec"]["health"] = {"interval": 60, "checks": ["kernel-log"], "actions": {"gpu-lost": "drain"},
                          "slurm_node_state": ["ANY"], "min_healthy": "51%"}
FULL["spec"]["baremetal"] = {"firmware_images": {"bios": {"2.5.1": "https://fw.example.com/bios-2.5.1.bin"}}}

INJECTION = "{{ lookup('pipe', 'touch MARK') }}{{ 'tem' ~ 'plated' }}"


def _string_leaves(node, path=()):
    """(path, kind) of every string in the document: values ("value") and mapping keys ("key")."""
    if isinstance(node, str):
        yield path, "value"
    elif isinstance(node, dict):
        for key, value in node.items():
            yield path + (key,), "key"
            yield from _string_leaves(value, path + (key,))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _string_leaves(item, path + (i,))


def _model_string_fields(model, path=()):
    """Model paths (list items as '*', mapping keys as '<key>', values as '*') that hold strings."""
    for name, info in model.model_fields.items():
        yield from _annotation_strings(info.annotation, path + (name,))


def _annotation_strings(annotation, path):
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        yield from _annotation_strings(typing.get_args(annotation)[0], path)
    elif origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            yield from _annotation_strings(arg, path)
    elif origin is list:
        yield from _annotation_strings(typing.get_args(annotation)[0], path + ("*",))
    elif origin is dict:
        key, value = typing.get_args(annotation)
        yield from _annotation_strings(key, path + ("<key>",))
        yield from _annotation_strings(value, path + ("*",))
    elif origin is typing.Literal:
        if any(isinstance(a, str) for a in typing.get_args(annotation)):
            yield path
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield from _model_string_fields(annotation, path)
    elif annotation is str:
        yield path


def _matches(model_path, doc_path, kind):
    if len(model_path) != len(doc_path):
        return False
    for m, d in zip(model_path, doc_path, strict=True):
        if m in ("*", "<key>"):
            continue
        if m != d:
            return False
    last = model_path[-1]
    return (kind == "key") == (last == "<key>")


def test_the_walk_meets_every_string_field_of_the_model():
    """Coverage: each string field of FleetSpec appears in FULL, so the injections below are complete."""
    leaves = list(_string_leaves(FULL))
    missing = [".".join(map(str, model_path)) for model_path in _model_string_fields(FleetSpec)
               if not any(_matches(model_path, path, kind) for path, kind in leaves)]
    assert not missing, f"FULL lacks these string fields: {missing}"


@pytest.mark.parametrize(("path", "kind"), list(_string_leaves(FULL)),
                         ids=lambda v: ".".join(map(str, v)) if isinstance(v, tuple) else v)
def test_a_template_in_any_spec_string_is_refused_where_it_is(path, kind):
    assert compile_text(yaml.safe_dump(FULL, sort_keys=False), "fleet.yaml").valid
    doc = copy.deepcopy(FULL)
    parent = doc
    for part in path[:-1]:
        parent = parent[part]
    if kind == "key":
        parent[str(path[-1]) + INJECTION] = parent.pop(path[-1])
        where = path[:-1] + (str(path[-1]) + INJECTION,)
    else:
        parent[path[-1]] = parent[path[-1]] + INJECTION
        where = path
    result = compile_text(yaml.safe_dump(doc, sort_keys=False), "fleet.yaml")
    assert not result.valid
    templated = [f for f in result.findings if "starts a template" in f.message]
    assert [f.path for f in templated] == [where]


# -- the renderer: every IR string, injected past the spec check -------------------------

def _ir_string_fields(cls, seen=None):
    """(dataclass, field name) of every IR field that holds strings (directly or in tuples)."""
    seen = set() if seen is None else seen
    if cls in seen:
        return
    seen.add(cls)
    hints = typing.get_type_hints(cls, vars(ir))
    for f in dataclasses.fields(cls):
        if f.metadata.get("location"):
            continue
        for inner in _flatten(hints[f.name]):
            if dataclasses.is_dataclass(inner):
                yield from _ir_string_fields(inner, seen)
            elif inner is str or (typing.get_origin(inner) is typing.Literal):
                yield cls, f.name


def _flatten(hint):
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType, tuple):
        for arg in typing.get_args(hint):
            if arg is not Ellipsis and arg is not type(None):
                yield from _flatten(arg)
    else:
        yield hint


def _inject(value, target):
    """A copy of ``value`` with INJECTION appended to field ``target`` of every instance."""
    cls, name = target
    if dataclasses.is_dataclass(value):
        changes = {f.name: _inject(getattr(value, f.name), target) for f in dataclasses.fields(value)
                   if not f.metadata.get("location")}
        if type(value) is cls:
            changes[name] = _poison(getattr(value, name))
        return dataclasses.replace(value, **changes)
    if isinstance(value, tuple):
        return tuple(_inject(v, target) for v in value)
    return value


def _poison(value):
    if isinstance(value, str):
        return value + INJECTION
    if isinstance(value, tuple):
        return tuple(_poison(v) for v in value)
    return value


IR_FIELDS = sorted({(c.__name__, n): (c, n) for c, n in _ir_string_fields(ir.Fleet)}.items())


def _ansible_values(inventory: Path):
    """Every variable of every host, as Ansible itself loads and templates it."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    inventory_manager = InventoryManager(loader=loader, sources=[str(inventory)])
    variables = VariableManager(loader=loader, inventory=inventory_manager)
    seen_groups = set()
    for host in inventory_manager.get_hosts():
        groups = frozenset(g.name for g in host.get_groups())
        if groups in seen_groups:
            continue  # fleetspec sets variables per group only: one host per group set sees them all
        seen_groups.add(groups)
        host_vars = variables.get_vars(host=host)
        templar = Templar(loader=loader, variables=host_vars)
        for name, value in host_vars.items():
            if name.startswith("fleetspec_"):
                yield host.name, name, templar.template(value)
        yield host.name, "groups", [g.name for g in host.get_groups()]


def _strings_in(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield str(k)
            yield from _strings_in(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings_in(v)


@pytest.fixture(scope="module")
def full_fleet():
    result = compile_text(yaml.safe_dump(FULL, sort_keys=False), "fleet.yaml")
    assert result.valid
    return result.fleet


def test_every_ir_string_field_is_walked():
    names = {f"{c}.{n}" for (c, n), _ in IR_FIELDS}
    for expected in ("Fleet.name", "PackageSource.uri", "PackageSource.key_url", "SlurmConfig.state_save_location",
                     "Node.hostname", "StackTuple.nccl", "Tenant.namespaces", "Fleet.secrets"):
        assert expected in names


def test_no_ir_string_is_ever_templated_by_ansible(full_fleet, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the pipe lookup would 'touch MARK' here
    reached = []
    for (class_name, field_name), target in IR_FIELDS:
        label = f"{class_name}.{field_name}"
        poisoned = _inject(full_fleet, target)
        try:
            files = render_ansible(poisoned)
        except (ValueError, KeyError):
            continue  # the renderer refused the value (not a version, not an https URL...)
        out = tmp_path / label
        write_tree(files, out)
        seen_verbatim = False
        for host, name, value in _ansible_values(out / "ansible" / "inventory.yml"):
            for text in _strings_in(value):
                assert "templated" not in text, (label, host, name, text)
                seen_verbatim |= INJECTION in text
        assert not (tmp_path / "MARK").exists(), f"{label}: Ansible ran the lookup"
        if seen_verbatim:
            reached.append(label)
    print("reached Ansible verbatim:", ", ".join(reached))
    # The injection really reached Ansible through the fields that carry spec text there.
    for field in ("Fleet.name", "PackageSource.uri", "PackageSource.key_url", "PackageSource.suite",
                  "SlurmConfig.state_save_location", "Partition.name"):
        assert field in reached, (field, reached)
