"""ansible.vars and ansible.hooks: checked, rendered, planned with the declared class."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import yaml

from fleetspec.pipeline import compile_file
from fleetspec.plan import make_plan
from fleetspec.render.ansible import render_ansible

from .specs import spec

HOOKS = """\
  ansible:
    vars: {{site_nfs_server: nfs-01.example.org, site_mounts: [/home, /scratch]}}
    hooks:
      before:
        - {{playbook: hooks/mounts.yml, disruption: {disruption}}}
"""


def _write(tmp_path: Path, disruption: str = "drain", hook_text: str = "- hosts: all\n  tasks: []\n",
           extra: str = "") -> Path:
    (tmp_path / "hooks").mkdir(exist_ok=True)
    (tmp_path / "hooks" / "mounts.yml").write_text(hook_text)
    path = tmp_path / "fleet.yaml"
    path.write_text(spec() + HOOKS.format(disruption=disruption) + extra)
    return path


def test_vars_land_in_group_vars_all(tmp_path: Path) -> None:
    result = compile_file(_write(tmp_path))
    assert result.valid, [f.message for f in result.located()]
    all_vars = yaml.safe_load(render_ansible(result.fleet)[PurePosixPath("ansible/group_vars/all.yml")])
    assert all_vars["site_nfs_server"] == "nfs-01.example.org"
    assert all_vars["site_mounts"] == ["/home", "/scratch"]
    assert all_vars["fleetspec_fleet"] == "site"


def test_a_pin_or_a_special_variable_cannot_be_a_site_variable(tmp_path: Path) -> None:
    path = _write(tmp_path)
    path.write_text(path.read_text().replace("site_nfs_server:", "fleetspec_packages: [], hostvars: {}, x:"))
    errors = [f for f in compile_file(path).located() if f.severity.name == "ERROR"]
    assert sorted(e.message.split(" ")[0] for e in errors) == ["fleetspec_packages", "hostvars"]
    assert "spec.stacks" in next(e.message for e in errors if e.message.startswith("fleetspec_"))


def test_a_missing_hook_playbook_is_a_located_error(tmp_path: Path) -> None:
    path = _write(tmp_path)
    (tmp_path / "hooks" / "mounts.yml").unlink()
    (error,) = [f for f in compile_file(path).located() if f.severity.name == "ERROR"]
    assert "hooks/mounts.yml does not exist" in error.message
    assert error.source_line.strip().startswith("- {playbook: hooks/mounts.yml")


def test_hooks_are_planned_with_the_class_the_site_declares(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    harmless = compile_file(_write(tmp_path / "a", "none")).fleet
    plain = tmp_path / "plain.yaml"
    plain.write_text(spec())
    old = compile_file(plain).fleet
    drained = make_plan(compile_file(_write(tmp_path, "drain")).fleet, old)
    assert {c.target: c.disruption.value for c in drained.changes if c.target.startswith("node:")} == {
        "node:h100-01": "drain", "node:h100-02": "drain"}
    assert {h for w in drained.waves for h in w.hosts} == {"h100-01", "h100-02"}
    # The same hook again: nothing to do. Its playbook edited: it runs again.
    same = compile_file(_write(tmp_path, "drain")).fleet
    assert not [c for c in make_plan(same, same).changes if c.target.startswith("node:")]
    edited = compile_file(_write(tmp_path, "drain", "- hosts: all\n  tasks: [{debug: {msg: hi}}]\n")).fleet
    again = make_plan(edited, same)
    assert {c.disruption.value for c in again.changes if c.target.startswith("node:")} == {"drain"}
    assert "changed" in next(c.reason for c in again.changes if c.target == "node:h100-01")
    # A hook declared harmless needs no wave.
    assert make_plan(harmless, old).waves == ()


def test_every_ansible_variable_is_refused_with_what_to_do_instead(tmp_path: Path) -> None:
    # Connection (a ProxyCommand runs on the controller), redirection, privilege, the
    # interpreter, a plugin's own option, an injected fact and a magic variable: all
    # ansible_*, none on a hand list.
    names = ["ansible_ssh_common_args", "ansible_connection", "ansible_host", "ansible_become_user",
             "ansible_python_interpreter", "ansible_paramiko_proxy_command", "ansible_distribution",
             "ANSIBLE_USER"]
    path = _write(tmp_path)
    path.write_text(path.read_text().replace(
        "site_nfs_server:", "".join(f"{n}: x, " for n in names) + "site_nfs_server:"))
    errors = [f for f in compile_file(path).located() if f.severity.name == "ERROR"]
    assert sorted(e.message.split(" ")[0] for e in errors) == sorted(names)
    vars_line = path.read_text().splitlines().index(next(x for x in path.read_text().splitlines()
                                                         if "vars:" in x)) + 1
    for e in errors:
        assert "inventory or ansible.cfg" in e.message and e.line == vars_line, e
    assert len({e.column for e in errors}) == len(names)  # each at its own key
    assert errors[0].source_line.strip().startswith("vars: {ansible_ssh_common_args")


def _plan_lines(new: Path, old: Path) -> dict[str, tuple[str, str]]:
    plan = make_plan(compile_file(new).fleet, compile_file(old).fleet)
    return {c.target: (c.disruption.value, c.reason) for c in plan.changes}


def test_a_change_to_ansible_vars_is_a_planned_change_with_the_hooks_class(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    old = _write(tmp_path / "a", "drain")
    new = _write(tmp_path, "drain")
    new.write_text(new.read_text().replace("nfs-01.example.org", "nfs-02.example.org"))
    lines = _plan_lines(new, old)
    disruption, why = lines["site:ansible.vars"]
    assert disruption == "drain"
    assert "changed site_nfs_server" in why and "nfs-02" not in why  # names, never values
    # Every hook reads them: each runs again on its nodes, which get waves.
    assert lines["node:h100-01"][0] == "drain" and "ansible.vars changed" in lines["node:h100-01"][1]
    plan = make_plan(compile_file(new).fleet, compile_file(old).fleet)
    assert {h for w in plan.waves for h in w.hosts} == {"h100-01", "h100-02"}
    # Without hooks nothing reads them: still a line of its own, saying so.
    for path in (old, new):
        path.write_text(path.read_text().split("    hooks:")[0])
    disruption, why = _plan_lines(new, old)["site:ansible.vars"]
    assert disruption == "none" and "no site hook reads them" in why


def test_a_new_hook_has_a_line_of_its_own(tmp_path: Path) -> None:
    plain = tmp_path / "plain.yaml"
    plain.write_text(spec())
    lines = _plan_lines(_write(tmp_path, "drain-reboot"), plain)
    assert lines["site:hook:hooks/mounts.yml"][0] == "drain-reboot"
    assert "2 node(s)" in lines["site:hook:hooks/mounts.yml"][1]


def _hook_error(path: Path) -> str:
    (error,) = [f for f in compile_file(path).located() if f.severity.name == "ERROR"]
    assert error.source_line.strip().startswith("- {playbook: hooks/mounts.yml"), error
    return error.message


def test_a_hook_that_links_out_of_the_spec_directory_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "mounts.yml").write_text("- hosts: all\n  tasks: []\n")
    spec_dir = tmp_path / "spec"
    spec_dir.mkdir()
    path = _write(spec_dir)
    # The playbook a link to a file elsewhere (/etc/shadow in the report).
    (spec_dir / "hooks" / "mounts.yml").unlink()
    (spec_dir / "hooks" / "mounts.yml").symlink_to(outside / "mounts.yml")
    message = _hook_error(path)
    assert "outside the spec's directory" in message and str(outside / "mounts.yml") in message
    assert "copy the playbook into the spec's directory" in message
    # The directory on the way a link (a linked directory under /tmp in the report).
    (spec_dir / "hooks" / "mounts.yml").unlink()
    (spec_dir / "hooks").rmdir()
    (spec_dir / "hooks").symlink_to(outside)
    assert "outside the spec's directory" in _hook_error(path)
    # A link that stays inside the directory is fine.
    (spec_dir / "hooks").unlink()
    (spec_dir / "real").mkdir()
    (spec_dir / "real" / "mounts.yml").write_text("- hosts: all\n  tasks: []\n")
    (spec_dir / "hooks").symlink_to("real")
    assert compile_file(path).valid


def test_a_huge_hook_is_an_error_not_a_memory_error(tmp_path: Path) -> None:
    path = _write(tmp_path)
    with open(tmp_path / "hooks" / "mounts.yml", "r+b") as handle:
        handle.truncate(3 * 2**30)  # 3 GiB, sparse: hashed whole before
    assert "larger than 16 MiB" in _hook_error(path)
    (tmp_path / "hooks" / "mounts.yml").unlink()
    (tmp_path / "hooks" / "mounts.yml").mkdir()
    assert "not a regular file" in _hook_error(path)


def test_a_literal_secret_in_ansible_vars_is_refused_without_echoing_it(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from fleetspec.cli import app

    secret = "hunter2-correct-horse"
    for written in (f"site_db_password: {secret}", f"site_db: {{token: {secret}}}", f"site_users: [{{pass: {secret}}}]"):
        path = _write(tmp_path)
        path.write_text(path.read_text().replace("site_nfs_server:", f"{written}, site_nfs_server:"))
        errors = [f for f in compile_file(path).located() if f.severity.name == "ERROR"]
        assert len(errors) == 1 and "reads as a secret" in errors[0].message, errors
        for fmt in ("text", "sarif"):
            result = CliRunner().invoke(app, ["validate", str(path), "--format", fmt])
            assert result.exit_code == 1 and secret not in result.output, result.output
    # A secret-named variable that holds no secret (a flag, nothing) is fine.
    path = _write(tmp_path)
    path.write_text(path.read_text().replace("site_nfs_server:", "site_use_password: true, site_nfs_server:"))
    assert compile_file(path).valid


def test_a_secret_site_variable_is_a_reference_never_rendered(tmp_path: Path) -> None:
    """#27 item 8: ansible.vars take the reference form the rest of the spec has,
    {secret: REF}; only the reference reaches the IR (state, saved plans), never the
    rendered group_vars; a reference that does not parse is refused without echoing it."""
    import json

    path = _write(tmp_path)
    path.write_text(path.read_text().replace(
        "site_nfs_server:", "site_db_password: {secret: 'hashicorp-vault:secret/fleet/db#password'}, "
                            "site_nfs_server:"))
    result = compile_file(path)
    assert result.valid, [f.message for f in result.located()]
    assert json.loads(result.fleet.site.ansible_vars)["site_db_password"] == {
        "secret": "hashicorp-vault:secret/fleet/db#password"}
    all_vars = yaml.safe_load(render_ansible(result.fleet)[PurePosixPath("ansible/group_vars/all.yml")])
    assert "site_db_password" not in all_vars and "site_nfs_server" in all_vars
    bad = _write(tmp_path)
    bad.write_text(bad.read_text().replace("site_nfs_server:", "site_db_password: {secret: hunter2-horse}, "
                                                               "site_nfs_server:"))
    errors = [f for f in compile_file(bad).located() if f.severity.name == "ERROR"]
    assert len(errors) == 1 and "a secret reference is" in errors[0].message
    assert "hunter2-horse" not in errors[0].message and errors[0].line > 0
