"""What a site hook receives (issue 27, item 5): a real ansible-playbook run of
fleetspec's run_with_hooks on a local connection. site.yml gets apply's secrets (its
roles fill the slurmdbd password on the node); the hook playbook does not. A hook that
was made a link out of the spec's directory after the plan is refused, not run."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from fleetspec.apply.ansible import run_playbook
from fleetspec.apply.hooks import run_with_hooks
from fleetspec.pipeline import compile_file
from tests.apply.local_playbook import local_project
from tests.site.specs import spec

WRITE = """\
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.copy:
        dest: "{{{{ out_dir }}}}/{name}"
        content: "{{{{ fleetspec_slurmdbd_password | default('absent') }}}} {{{{ fleetspec_munge_key_file | default('absent') }}}} {{{{ fleetspec_allow_reboot | default('absent') }}}}"
"""
HOOK = """\
  ansible:
    hooks:
      after:
        - {playbook: hooks/check.yml, disruption: none}
"""
EXTRAVARS = {"fleetspec_slurmdbd_password": "s3cret-pw", "fleetspec_munge_key_file": "/keys/munge.key",
             "fleetspec_allow_reboot": False}


def _setup(tmp_path: Path):
    out = tmp_path / "out"
    out.mkdir()
    project, inventory = local_project(tmp_path, WRITE.format(name="site"), "h100-01", out_dir=out)
    spec_dir = tmp_path / "spec"
    (spec_dir / "hooks").mkdir(parents=True)
    (spec_dir / "hooks" / "check.yml").write_text(WRITE.format(name="hook"))
    (spec_dir / "fleet.yaml").write_text(spec() + HOOK)
    result = compile_file(spec_dir / "fleet.yaml")
    assert result.valid, [f.message for f in result.located()]
    runner = partial(run_playbook, inventory, project_dir=project, work_dir=tmp_path / "runs")
    return out, spec_dir, result.fleet, runner


def test_a_hook_gets_no_secret_of_apply(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out, spec_dir, fleet, runner = _setup(tmp_path)
    result = run_with_hooks(runner, fleet, spec_dir, ["h100-01"], lambda _: None, extravars=EXTRAVARS)
    assert result.ok, result
    assert (out / "site").read_text() == "s3cret-pw /keys/munge.key False"
    assert (out / "hook").read_text() == "absent absent False"


def test_a_hook_linked_out_after_the_plan_is_not_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out, spec_dir, fleet, runner = _setup(tmp_path)
    elsewhere = tmp_path / "elsewhere.yml"
    elsewhere.write_text((spec_dir / "hooks" / "check.yml").read_text())  # same bytes: same digest
    (spec_dir / "hooks" / "check.yml").unlink()
    (spec_dir / "hooks" / "check.yml").symlink_to(elsewhere)
    result = run_with_hooks(runner, fleet, spec_dir, ["h100-01"], lambda _: None, extravars=EXTRAVARS)
    assert not result.ok
    (failure,) = result.hosts["h100-01"].failures
    assert "outside the spec's directory" in failure
    assert not (out / "hook").exists()


def test_a_site_secret_variable_reaches_the_hook_at_apply_time_only(tmp_path, monkeypatch):
    """ansible.vars given as {secret: REF} (#27 item 8): apply resolves the reference and
    the hook gets the value as an extra var (a real ansible-playbook run); fleetspec's
    own run and the rendered group_vars never hold it; the redactor knows it."""
    from fleetspec import secrets as sec
    from fleetspec.apply.cli import _secrets
    from fleetspec.render.ansible import render_ansible

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SITE_LDAP_PW", "ldap-bind-Pw-0042")
    out = tmp_path / "out"
    out.mkdir()
    project, inventory = local_project(tmp_path, WRITE.format(name="site"), "h100-01", out_dir=out)
    spec_dir = tmp_path / "spec"
    (spec_dir / "hooks").mkdir(parents=True)
    (spec_dir / "hooks" / "check.yml").write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n    - ansible.builtin.copy:\n"
        "        dest: \"{{ out_dir }}/hook\"\n        content: \"{{ site_ldap_password | default('absent') }}\"\n")
    (spec_dir / "fleet.yaml").write_text(spec() + HOOK + "    vars:\n      site_ldap_password: {secret: env:SITE_LDAP_PW}\n")
    result = compile_file(spec_dir / "fleet.yaml")
    assert result.valid, [f.message for f in result.located()]
    fleet = result.fleet
    assert "ldap-bind-Pw-0042" not in fleet.to_json()
    assert all("ldap-bind-Pw-0042" not in text for text in render_ansible(fleet).values())
    sec.init(fleet, spec_dir)  # the munge key and slurmdbd password files apply also resolves
    extravars, redact = _secrets(fleet, spec_dir, sec)
    assert extravars["site_ldap_password"] == "ldap-bind-Pw-0042" and redact("x ldap-bind-Pw-0042") == "x ********"
    runner = partial(run_playbook, inventory, project_dir=project, work_dir=tmp_path / "runs")
    done = run_with_hooks(runner, fleet, spec_dir, ["h100-01"], lambda _: None,
                          extravars={**EXTRAVARS, **extravars})
    assert done.ok, done
    assert (out / "hook").read_text() == "ldap-bind-Pw-0042"
