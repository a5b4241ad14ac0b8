"""Node bundles (#30 item 2): deterministic render, real ``ssh-keygen -Y`` signatures, and the
node-side converge refusing unsigned, tampered, foreign-key and replayed bundles, then running
a real ``ansible-playbook -c local`` from a good one."""

from __future__ import annotations

import dataclasses
import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path, PurePosixPath

import pytest

from fleetspec.apply.ansible import PLAYBOOKS
from fleetspec.apply.bundle import BundleSignError, publish, read_sources
from fleetspec.node_side import converge
from fleetspec.pipeline import compile_file
from fleetspec.render.bundle import BundleError, render_bundle

ROOT = Path(__file__).resolve().parents[2]
ANSIBLE_PLAYBOOK = str(Path(sys.executable).parent / "ansible-playbook")

STAND_IN_SITE = """\
# The test's site.yml: proves the play runs on the node itself with the bundle's group_vars.
- name: Converge
  hosts: all
  gather_facts: false
  tasks:
    - name: Record the stack tuple this node was given
      ansible.builtin.copy:
        dest: "{{ lookup('env', 'FLEETSPEC_TEST_MARKERS') }}/{{ inventory_hostname }}"
        content: "{{ fleetspec_stack.name }} {{ fleetspec_stack.driver | default('') }}\\n"
        mode: "0644"
    - name: Fail where the test says
      ansible.builtin.fail:
        msg: told to fail
      when: lookup('env', 'FLEETSPEC_TEST_FAIL') == inventory_hostname
"""


@pytest.fixture(scope="module")
def fleet():
    return compile_file(ROOT / "examples" / "quickstart.yaml").fleet


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("keys")
    for name in ("site", "other"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(d / name)], check=True)
    pub = (d / "site.pub").read_text().split()
    (d / "allowed_signers").write_text(f'fleetspec namespaces="fleetspec-bundle" {pub[0]} {pub[1]}\n')
    return {"site": d / "site", "other": d / "other", "allowed": d / "allowed_signers"}


def _sources(tmp: Path) -> dict[PurePosixPath, bytes]:
    playbooks = tmp / "playbooks"
    playbooks.mkdir(exist_ok=True)
    (playbooks / "site.yml").write_text(STAND_IN_SITE)
    (playbooks / "ansible.cfg").write_text("[defaults]\nretry_files_enabled = False\ninterpreter_python = /usr/bin/python3\n")
    return read_sources(playbooks)


def test_bundle_is_deterministic_and_carries_the_partition_only(fleet) -> None:
    sources = read_sources(PLAYBOOKS)
    one = render_bundle(fleet, "nvidia-hopper", 3, sources)
    assert one == render_bundle(fleet, "nvidia-hopper", 3, dict(reversed(list(sources.items()))))
    assert one != render_bundle(fleet, "nvidia-hopper", 4, sources)
    with tarfile.open(fileobj=io.BytesIO(one), mode="r:gz") as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        manifest = json.loads(tar.extractfile("manifest.json").read())
    assert names == sorted(names) and all(m.mtime == 0 and m.uid == 0 and m.isfile() for m in members)
    assert gzip.decompress(one) and one[4:8] == b"\0\0\0\0"  # gzip header mtime
    assert manifest["version"] == 3 and manifest["partition"] == "nvidia-hopper"
    assert manifest["hosts"] == sorted(n.hostname for n in fleet.nodes if n.partition == "nvidia-hopper")
    assert "playbooks/roles/nvidia_driver/tasks/main.yml" in manifest["files"]
    assert "fleetspec/node_side/collector.py" in manifest["files"] and "playbooks/local.yml" in manifest["files"]
    assert "slurm/slurm.conf" in manifest["files"] and "slurm/slurmdbd.conf" not in manifest["files"]
    assert set(manifest["files"]) == set(names) - {"manifest.json"}


def test_bundle_refuses_bad_input(fleet) -> None:
    with pytest.raises(BundleError, match="no GPU nodes"):
        render_bundle(fleet, "nope", 1, {})
    with pytest.raises(BundleError, match="positive integer"):
        render_bundle(fleet, "nvidia-hopper", 0, {})
    with pytest.raises(BundleError, match="relative path under"):
        render_bundle(fleet, "nvidia-hopper", 1, {PurePosixPath("etc/passwd"): b""})


def test_publish_resolves_the_key_reference(fleet, keys, tmp_path) -> None:
    with pytest.raises(BundleSignError, match="MISSING_KEY is not set"):
        publish(fleet, "nvidia-hopper", 1, "env:MISSING_KEY", tmp_path, PLAYBOOKS, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def _publish(fleet, keys, tmp: Path, version: int, key: str = "site") -> Path:
    os.chmod(keys[key], 0o600)
    published = publish(fleet, "nvidia-hopper", version, f"file:{keys[key]}", tmp, tmp / "playbooks",
                        tmp / "mirror")
    return published.bundle


def _converge(tmp: Path, keys, bundle: Path, host: str = "h100-001", fleet: str = "quickstart",
              partition: str = "nvidia-hopper") -> dict:
    return converge.converge(host, str(bundle), None, str(keys["allowed"]), str(tmp / "state"),
                             str(tmp / "results"), ANSIBLE_PLAYBOOK, collect_root=str(tmp / "noroot"), fleet=fleet,
                             partition=partition)


def test_converge_runs_a_signed_bundle_and_refuses_the_rest(fleet, keys, tmp_path, monkeypatch) -> None:
    _sources(tmp_path)
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv("FLEETSPEC_TEST_MARKERS", str(markers))
    v2 = _publish(fleet, keys, tmp_path, 2)
    good = _converge(tmp_path, keys, v2)
    assert good["ok"], good["error"]
    assert good["version"] == 2 and good["spec_digest"].startswith("sha256:")
    assert (markers / "h100-001").read_text().startswith("hopper-cu13 ")
    assert [p.name for p in markers.iterdir()] == ["h100-001"]  # --limit: this node only
    written = json.loads((tmp_path / "results" / "h100-001.json").read_text())
    assert written["ok"] and written["facts"]["schema"]

    # A replayed older bundle, though properly signed, is refused.
    v1 = _publish(fleet, keys, tmp_path, 1)
    old = _converge(tmp_path, keys, v1)
    assert not old["ok"] and "older than version 2" in old["error"]
    # The same version again (a second reboot) runs.
    assert _converge(tmp_path, keys, v2)["ok"]

    # Tampered: one byte of the tarball changed after signing.
    tampered = tmp_path / "tampered.tar.gz"
    data = bytearray(v2.read_bytes())
    data[len(data) // 2] ^= 0x01
    tampered.write_bytes(bytes(data))
    shutil.copy(str(v2) + ".sig", str(tampered) + ".sig")
    bad = _converge(tmp_path, keys, tampered)
    assert not bad["ok"] and "bad bundle signature" in bad["error"]

    # Signed by a key the node does not allow.
    other = tmp_path / "other"
    other.mkdir()
    _sources(other)
    foreign = _publish(fleet, keys, other, 5, key="other")
    bad = _converge(tmp_path, keys, foreign)
    assert not bad["ok"] and "bad bundle signature" in bad["error"]

    # Unsigned: no signature file.
    unsigned = tmp_path / "unsigned.tar.gz"
    shutil.copy(v2, unsigned)
    bad = _converge(tmp_path, keys, unsigned)
    assert not bad["ok"] and "cannot read" in bad["error"]

    # A bundle for another partition's nodes.
    bad = _converge(tmp_path, keys, v2, host="mi300-001", partition="amd-cdna3")
    assert not bad["ok"] and "partition 'nvidia-hopper'; this node is in fleet 'quickstart', partition 'amd-cdna3'" \
        in bad["error"]
    bad = _converge(tmp_path, keys, v2, host="mi300-001")
    assert not bad["ok"] and "not for host mi300-001" in bad["error"]


def test_converge_exits_non_zero_when_the_play_fails(fleet, keys, tmp_path, monkeypatch) -> None:
    _sources(tmp_path)
    (tmp_path / "markers").mkdir()
    monkeypatch.setenv("FLEETSPEC_TEST_MARKERS", str(tmp_path / "markers"))
    monkeypatch.setenv("FLEETSPEC_TEST_FAIL", "h100-002")
    bundle = _publish(fleet, keys, tmp_path, 7)
    rc = converge.main(["--bundle", str(bundle), "--allowed-signers", str(keys["allowed"]), "--host", "h100-002",
                        "--fleet", "quickstart", "--partition", "nvidia-hopper",
                        "--state-dir", str(tmp_path / "state"), "--result-dir", str(tmp_path / "results"),
                        "--ansible-playbook", ANSIBLE_PLAYBOOK, "--collect-root", str(tmp_path / "noroot")])
    result = json.loads((tmp_path / "results" / "h100-002.json").read_text())
    assert rc == 1 and not result["ok"] and "ansible-playbook exited 2" in result["error"]
    assert not (tmp_path / "state" / converge.STATE_FILE).exists()  # a failed run records no version


def test_two_fleets_sharing_a_signing_key_never_run_each_others_bundles(fleet, keys, tmp_path, monkeypatch) -> None:
    """#41 item 14: staging and prod are signed with the site's one key. A prod node handed
    staging's (newer-numbered) bundle refuses it before anything runs, and prod's own next
    version still runs: each fleet counts its own versions."""
    _sources(tmp_path)
    markers = tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv("FLEETSPEC_TEST_MARKERS", str(markers))
    prod = dataclasses.replace(fleet, name="prod")
    staging = dataclasses.replace(fleet, name="staging")
    os.chmod(keys["site"], 0o600)

    def bundle(of, version: int) -> Path:
        return publish(of, "nvidia-hopper", version, f"file:{keys['site']}", tmp_path, tmp_path / "playbooks",
                       tmp_path / "mirror").bundle

    foreign = _converge(tmp_path, keys, bundle(staging, 9), fleet="prod")
    assert not foreign["ok"] and foreign["version"] is None
    assert "this bundle is for fleet 'staging', partition 'nvidia-hopper'; this node is in fleet 'prod'" \
        in foreign["error"]
    assert _converge(tmp_path, keys, bundle(prod, 4), fleet="prod")["ok"]  # prod's next version: no replay
    # The same node, moved to staging, counts staging's versions apart from prod's.
    assert _converge(tmp_path, keys, bundle(staging, 2), fleet="staging")["ok"]
    back = _converge(tmp_path, keys, bundle(prod, 3), fleet="prod")
    assert not back["ok"] and "older than version 4" in back["error"]
    nowhere = _converge(tmp_path, keys, bundle(prod, 5), fleet="", partition="")
    assert not nowhere["ok"] and "does not know its fleet and partition" in nowhere["error"]


def test_a_link_planted_in_the_shared_results_directory_is_never_written_through(keys, tmp_path) -> None:
    """#41 item 2: another node's root plants links and a FIFO under this node's names in the
    results directory they share; this node's converge (as root) writes neither the victim
    nor through the FIFO: its result goes to a fresh file, or is refused and says why."""
    results = tmp_path / "results"
    results.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    os.symlink(victim, results / "h100-001.json.tmp")  # the name the old code wrote first
    missing = str(tmp_path / "no-such-bundle.tar.gz")

    def run(host: str) -> dict:
        return converge.converge(host, missing, None, str(keys["allowed"]), str(tmp_path / "state" / host),
                                 str(results), ANSIBLE_PLAYBOOK, collect_root=str(tmp_path / "noroot"),
                                 fleet="quickstart", partition="nvidia-hopper")

    first = run("h100-001")
    assert victim.read_text() == "root's file\n"
    written = results / "h100-001.json"
    assert written.is_file() and not written.is_symlink()
    assert json.loads(written.read_text())["error"] == first["error"] and "cannot read" in first["error"]
    assert os.readlink(results / "h100-001.json.tmp") == str(victim)  # left as it was, and unused

    os.symlink(victim, results / "h100-002.json")  # the result's own name, a link
    os.mkfifo(results / "h100-003.json")  # a FIFO: opening it for writing would block
    for host, kind in (("h100-002", "a symbolic link"), ("h100-003", "a FIFO")):
        refused = run(host)
        assert not refused["ok"] and f"h100-{host[-3:]}.json is {kind}, not a regular file" in refused["error"]
        assert "the result was not written" in refused["error"]
    assert victim.read_text() == "root's file\n"
    assert sorted(p.name for p in results.iterdir()) == ["h100-001.json", "h100-001.json.tmp", "h100-002.json",
                                                        "h100-003.json"]  # no temporary file left behind
    rc = converge.main(["--bundle", missing, "--allowed-signers", str(keys["allowed"]), "--host", "h100-002",
                        "--fleet", "quickstart", "--partition", "nvidia-hopper",
                        "--state-dir", str(tmp_path / "state" / "main"), "--result-dir", str(results),
                        "--collect-root", str(tmp_path / "noroot")])
    assert rc == 1 and victim.read_text() == "root's file\n"


def test_extract_refuses_a_member_outside_the_bundle(tmp_path) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("../escape")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(converge.ConvergeError, match="plain relative name"):
        converge.extract(gzip.compress(raw.getvalue()), str(tmp_path))
    assert not (tmp_path.parent / "escape").exists()


def test_converge_units_order_the_converge_before_slurmd(tmp_path) -> None:
    """systemd's own check of the rendered units (systemd-analyze verify), with a stand-in
    slurmd.service and the converge unit's environment file, as on a node."""
    from fleetspec.render.bundle import render_converge_units

    units = render_converge_units()
    unit = units[PurePosixPath("systemd/fleetspec-converge.service")]
    drop_in = units[PurePosixPath("systemd/slurmd.service.d/10-fleetspec-converge.conf")]
    assert "Before=slurmd.service" in unit and "Type=oneshot" in unit
    assert "Requires=fleetspec-converge.service" in drop_in and "After=fleetspec-converge.service" in drop_in
    (tmp_path / "fleetspec-converge.service").write_text(unit)
    (tmp_path / "slurmd.service").write_text("[Service]\nExecStart=/bin/true\n")
    (tmp_path / "slurmd.service.d").mkdir()
    (tmp_path / "slurmd.service.d" / "10-fleetspec-converge.conf").write_text(drop_in)
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / "fleetspec-converge.service")],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:"})
    assert proc.returncode == 0, proc.stderr
    broken = unit.replace("Type=oneshot", "Type=oneshoot")
    (tmp_path / "fleetspec-converge.service").write_text(broken)
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / "fleetspec-converge.service")],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:"})
    assert "oneshoot" in proc.stderr  # the check can fail


def test_converge_request_units_pass_systemd_analyze(tmp_path) -> None:
    """The in-place converge's timer and oneshot service (no reboot), checked by systemd."""
    from fleetspec.render.bundle import REQUEST_TIMER, REQUEST_UNIT, render_converge_units

    units = render_converge_units()
    assert "OnUnitInactiveSec=30s" in units[REQUEST_TIMER] and "Type=oneshot" in units[REQUEST_UNIT]
    assert "fleetspec.node_side.converge_request" in units[REQUEST_UNIT]
    for path in (REQUEST_UNIT, REQUEST_TIMER):
        (tmp_path / path.name).write_text(units[path])
    (tmp_path / "slurmd.service").write_text("[Service]\nExecStart=/bin/true\n")
    (tmp_path / "fleetspec-converge.service").write_text(units[PurePosixPath("systemd/fleetspec-converge.service")])
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / REQUEST_TIMER.name),
                           str(tmp_path / REQUEST_UNIT.name)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:"})
    assert proc.returncode == 0, proc.stderr
    (tmp_path / REQUEST_TIMER.name).write_text(units[REQUEST_TIMER].replace("OnUnitInactiveSec", "OnUnitInactivSec"))
    proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / REQUEST_TIMER.name)],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "SYSTEMD_UNIT_PATH": f"{tmp_path}:"})
    assert "OnUnitInactivSec" in proc.stderr  # the check can fail


@pytest.mark.parametrize(("raw", "said"), [
    (b"not json", "not JSON"),
    (b'{"format": 1, "request": "1-0123456789abcdef", "version": 1, "bundle": "https://evil/x"}', "not {format"),
    (b'{"format": 1, "request": "../../etc", "version": 1}', "ID is not"),
    (b'{"format": 1, "request": "1-0123456789abcdef", "version": true}', "version is not"),
    (b'{"format": 2, "request": "1-0123456789abcdef", "version": 1}', "not {format"),
    (b"x" * 5000, "larger than"),
])
def test_a_converge_request_is_refused_unless_well_formed(raw, said) -> None:
    """A request names nothing but an ID and a version: anything else is refused."""
    from fleetspec.node_side.converge_request import Refused, parse_request

    with pytest.raises(Refused, match=said):
        parse_request(raw)
    assert parse_request(b'{"format": 1, "request": "12-0123456789abcdef", "version": 12}') == \
        ("12-0123456789abcdef", 12)


@pytest.mark.parametrize(("args", "said"), [
    (["--engine", "slurm-native"], "needs --bundle-key, --bundle-dir, --results"),
    (["--engine", "slurm-native", "--bundle-key", "file:k", "--bundle-dir", "b"], "needs --results"),
    (["--bundle-key", "file:k"], "go with --engine slurm-native"),
])
def test_apply_engine_options_are_checked_before_anything_runs(args, said, tmp_path) -> None:
    from typer.testing import CliRunner

    from fleetspec.cli import app

    result = CliRunner().invoke(app, ["apply", str(ROOT / "examples" / "quickstart.yaml"), "--yes",
                                      "--state", str(tmp_path / "state"), *args])
    assert result.exit_code == 64 and said in " ".join(result.output.split()), result.output
    assert not (tmp_path / "state").exists()
