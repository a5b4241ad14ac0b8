"""An adopted cluster keeps its own cgroup.conf and slurmdbd.conf (#39): read with
`--cgroup`/`--slurmdbd` or beside slurm.conf, kept in spec.slurm.adopted as written, the
render equal to them key by key, validate naming each (rule adopted-site-file), and the
first plan after `import --state` empty. slurmdbd's StoragePass never enters the spec: it is
the secret reference apply fills.

The files are modelled on SLAC's production ones (slaclab/slurm-docker,
kubernetes/overlays/prod/etc/cgroup.conf and slurmdbd.conf, Jan 2020; the password here is
this test's own); the nodes are CPU-only with illustrative facts."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest
from typer.testing import CliRunner

from fleetspec.cli import app
from fleetspec.render.slurm import SECRET_DB_PASSWORD, render_slurm
from fleetspec.site.adopted import STORAGE_PASS
from tests.importer.facts import cpu_facts, write_facts

SLURM_CONF = ("ClusterName=sdf\nSlurmctldHost=sdf-ctl\nAccountingStorageType=accounting_storage/slurmdbd\n"
              "AccountingStorageHost=slurmdbd-0\nProctrackType=proctrack/cgroup\nTaskPlugin=task/cgroup\n"
              "NodeName=cpu[01-02] CPUs=8 RealMemory=30000 State=UNKNOWN\n"
              "PartitionName=shared Nodes=cpu[01-02] Default=YES MaxTime=INFINITE State=UP\n")
CGROUP_CONF = ("CgroupAutomount=yes \n#CgroupReleaseAgentDir=\"/etc/slurm/cgroup\" \n\nConstrainCores=yes \n"
               "ConstrainDevices=yes\nConstrainRAMSpace=yes\n#TaskAffinity=yes\n")
PASSWORD = "Pa55-w0rd-of-this-test"
SLURMDBD_CONF = ("# Authentication info\nAuthType=auth/munge\nAuthInfo=/var/run/munge/munge.socket.2\n"
                 "DbdHost=slurmdbd-0\nDbdBackupHost=slurmdbd-1\nDbdPort=6819\nSlurmUser=slurm\nDebugLevel=4\n"
                 "LogFile=/dev/stdout\nPidFile=/var/run/slurmdbd.pid\n"
                 "PrivateData=accounts,users,usage,jobs,reservations,events\n"
                 "StorageType=accounting_storage/mysql\nStorageHost=mysql-0.mysql\n"
                 f"StoragePass={PASSWORD}\nStorageUser=slurm\nStorageLoc=slurm_acct_db\n")


def _site(tmp_path: Path, cgroup: str = CGROUP_CONF, slurmdbd: str = SLURMDBD_CONF) -> Path:
    site = tmp_path / "etc"
    site.mkdir()
    (site / "slurm.conf").write_text(SLURM_CONF)
    (site / "cgroup.conf").write_text(cgroup)
    (site / "slurmdbd.conf").write_text(slurmdbd)
    return site


def _import(tmp_path: Path, site: Path, *extra: str) -> tuple[int, str, Path, Path]:
    facts = write_facts(tmp_path / "facts", {h: cpu_facts(h) for h in ("cpu01", "cpu02")})
    out, state = tmp_path / "fleet.yaml", tmp_path / "state"
    result = CliRunner().invoke(app, ["import", "slurm", "--conf", str(site / "slurm.conf"), "--facts", str(facts),
                                      "--out", str(out), "--slurm-version", "22.05.8", "--state", str(state),
                                      *extra])
    return result.exit_code, result.output, out, state


def _pairs(text: str) -> list[tuple[str, str]]:
    """Key=value lines as slurmdbd and slurmd read them (comments, blanks, quotes left out)."""
    out = []
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            key, _, value = line.partition("=")
            out.append((key.strip(), value.strip().strip('"')))
    return out


def test_the_sites_cgroup_and_slurmdbd_conf_render_back_and_the_first_plan_is_empty(tmp_path: Path) -> None:
    code, output, out, state = _import(tmp_path, _site(tmp_path))  # both found beside slurm.conf
    assert code == 0, output
    assert "cgroup.conf (beside slurm.conf" in output and "slurmdbd.conf (beside slurm.conf" in output
    text = out.read_text()
    assert PASSWORD not in text and PASSWORD not in output
    assert f"StoragePass={STORAGE_PASS}" in text and STORAGE_PASS == SECRET_DB_PASSWORD
    from fleetspec.pipeline import compile_text

    result = compile_text(text, "fleet.yaml")
    assert result.valid
    rendered = render_slurm(result.fleet)
    # CgroupAutomount is defunct from 23.11 only: 22.05.8 keeps it, as the site wrote it.
    assert _pairs(rendered[PurePosixPath("slurm/cgroup.conf")]) == _pairs(CGROUP_CONF)
    assert _pairs(rendered[PurePosixPath("slurm/slurmdbd.conf")]) == [
        (k, STORAGE_PASS if k == "StoragePass" else v) for k, v in _pairs(SLURMDBD_CONF)]
    said = [f.message for f in result.located() if f.rule == "adopted-site-file"]
    assert any(m.startswith("cgroup.conf is the adopted cluster's") for m in said), said
    assert any(m.startswith("slurmdbd.conf is the adopted cluster's") for m in said), said
    plan = CliRunner().invoke(app, ["plan", str(out), "--state", str(state), "--detailed-exitcode"])
    assert plan.exit_code == 0, plan.output


def test_a_key_defunct_at_the_release_is_dropped_and_a_line_that_cannot_be_kept_is_located(tmp_path: Path) -> None:
    site = _site(tmp_path, cgroup=CGROUP_CONF + "TaskAffinity=yes\n",
                 slurmdbd=SLURMDBD_CONF + "ArchiveDir=\"/var/archive with blanks\"\n")
    code, output, out, _ = _import(tmp_path, site)
    assert code == 1 and not out.exists()
    assert "cgroup.conf:8:1: error: 'TaskAffinity' is not a cgroup.conf parameter" in output, output
    assert "slurmdbd.conf:17:1: error: ArchiveDir's value is not one token" in output, output
    assert PASSWORD not in output
    # At 23.11 the catalog has CgroupAutomount defunct: dropped with a warning at its line.
    (site / "cgroup.conf").write_text(CGROUP_CONF)
    (site / "slurmdbd.conf").write_text(SLURMDBD_CONF)
    code, output, out, _ = _import(tmp_path, site, "--slurm-version", "23.11.10")
    assert code == 0, output
    assert "cgroup.conf:1:1: warning: CgroupAutomount is dropped: defunct in Slurm's cgroup.conf since 23.11" \
        in output, output
    assert "CgroupAutomount" not in out.read_text()


@pytest.mark.parametrize("line", [f"StoragePass={PASSWORD}", "JobCompPass=x", "Include=/etc/other.conf",
                                  "StorageHost=a b"])
def test_validate_refuses_an_adopted_slurmdbd_line_it_cannot_write_without_echoing_a_secret(line: str,
                                                                                           tmp_path: Path) -> None:
    from fleetspec.pipeline import compile_text

    code, output, out, _ = _import(tmp_path, _site(tmp_path))
    assert code == 0, output
    text = out.read_text().replace(f"StoragePass={STORAGE_PASS}", line.replace("a b", "'a b'"))
    errors = [f for f in compile_text(text, "fleet.yaml").located() if f.severity.name == "ERROR"]
    assert [f.rule for f in errors] == ["site-settings"], [f.message for f in errors]
    assert "spec.slurm.adopted.slurmdbd_conf" in str(errors[0].path), errors[0].path
    assert PASSWORD not in errors[0].message


@pytest.mark.parametrize("line", [f'StoragePass="{PASSWORD} unclosed', f"StoragePass=a {PASSWORD}"])
def test_a_slurmdbd_line_the_parser_cannot_read_is_located_and_never_quoted(line: str, tmp_path: Path) -> None:
    """A password with a blank (the word after it is a bare word to Slurm's parser) or an
    unclosed quote: the error names the line, not its text."""
    code, output, out, _ = _import(tmp_path, _site(tmp_path, slurmdbd=SLURMDBD_CONF.replace(
        f"StoragePass={PASSWORD}", line)))
    assert code == 1 and not out.exists()
    assert "slurmdbd.conf:14:1: error: this line cannot be read as Key=value" in output, output
    assert PASSWORD not in output
