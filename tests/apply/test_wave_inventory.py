"""A wave's Ansible run sees only its hosts (issue #30 item 3): a real ansible-runner run
over the rendered quickstart inventory, narrowed to a wave, on local connections."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import yaml

from fleetspec.apply.ansible import run_playbook
from fleetspec.apply.wave_inventory import WaveInventories, narrowed_runner
from fleetspec.pipeline import compile_file
from fleetspec.render import render_all
from fleetspec.render.writer import write_tree

ROOT = Path(__file__).resolve().parents[2]

PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - name: Record what this run's inventory holds
      ansible.builtin.copy:
        dest: "{{ out_dir }}/{{ inventory_hostname }}.json"
        content: "{{ {'all': groups['all'], 'debug': groups['partition_debug'] | default([]),
                     'fleet': fleetspec_fleet, 'inventory_dir': inventory_dir} | to_json }}"
        mode: "0644"
"""


def test_a_wave_run_loads_only_its_hosts_with_the_group_vars(tmp_path: Path) -> None:
    fleet = compile_file(ROOT / "examples" / "quickstart.yaml").fleet
    build = tmp_path / "build"
    write_tree(render_all(fleet), build)
    rendered = build / "ansible" / "inventory.yml"
    overlay = tmp_path / "local.yml"
    overlay.write_text(yaml.safe_dump({"all": {"vars": {"ansible_connection": "local",
                                                        "ansible_python_interpreter": "python3",
                                                        "out_dir": str(tmp_path / "out")}}}))
    (tmp_path / "out").mkdir()
    project = tmp_path / "project"
    project.mkdir()
    (project / "site.yml").write_text(PLAY)
    run = narrowed_runner(functools.partial(run_playbook, project_dir=project), [rendered, overlay],
                          [n.hostname for n in fleet.nodes])
    result = run(limit=["h100-001", "h100-005"])
    assert result.ok, result
    seen = json.loads((tmp_path / "out" / "h100-001.json").read_text())
    assert {h for h in seen["all"] if h.startswith("h100-")} == {"h100-001", "h100-005"}
    assert seen["debug"] == ["h100-001"] and seen["fleet"] == "quickstart"  # groups and group_vars kept
    assert Path(seen["inventory_dir"]) == rendered.parent  # the roles find ../slurm and ../health
    assert sorted(p.name for p in rendered.parent.glob("inventory*.yml")) == ["inventory.yml"]  # removed after


def test_narrowing_keeps_the_hosts_that_are_not_nodes(tmp_path: Path) -> None:
    fleet = compile_file(ROOT / "examples" / "quickstart.yaml").fleet
    build = tmp_path / "build"
    write_tree(render_all(fleet), build)
    waves = WaveInventories(build / "ansible" / "inventory.yml", [n.hostname for n in fleet.nodes])
    narrowed = waves.narrowed(["h100-003"])

    def hosts(group: dict) -> set[str]:
        found = set(group.get("hosts") or {})
        for child in (group.get("children") or {}).values():
            found |= hosts(child)
        return found

    every = hosts(narrowed["all"])
    assert {h for h in every if h.startswith("h100-")} == {"h100-003"}
    assert set(fleet.slurm.controllers) <= every
