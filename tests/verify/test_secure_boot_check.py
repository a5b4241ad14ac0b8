"""verify's module-signer check and the collector's reading of the MOK (#24 item 9): the
certificate parsed on the node (stdlib only) says what kmod's modinfo shows for a module it
signed; real openssl certificates, the collector over a node tree with --root."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fleetspec.compile.ir import StackTuple
from fleetspec.node_side import collector
from fleetspec.node_side.collector import Host, collect_secure_boot, parse_certificate_signer, parse_dkms_signing
from fleetspec.verify.compare import Status, secure_boot_checks

EFIVAR = "sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


def _certificate(directory: Path, subject: str, serial: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["openssl", "req", "-new", "-x509", "-nodes", "-days", "30", "-newkey", "rsa:2048",
                    "-subj", subject, "-set_serial", serial, "-keyout", str(directory / "MOK.priv"),
                    "-outform", "DER", "-out", str(directory / "MOK.der")], check=True, capture_output=True)
    return directory / "MOK.der"


@pytest.mark.parametrize(("subject", "serial", "signer", "sig_key"), [
    ("/CN=Example Site MOK/O=Example", "0x12CB66F0DB30A1C2", "Example Site MOK", "12:CB:66:F0:DB:30:A1:C2"),
    # a serial with the high bit set is stored with a leading 00 byte; kmod shows it without
    ("/O=Example/CN=Second", "0x80112233", "Second", "80:11:22:33"),
    ("/CN=One", "5", "One", "05"),
])
def test_the_certificate_names_what_modinfo_shows(tmp_path: Path, subject: str, serial: str, signer: str,
                                                  sig_key: str) -> None:
    der = _certificate(tmp_path, subject, serial).read_bytes()
    assert parse_certificate_signer(der) == {"signer": signer, "sig_key": sig_key}


def test_anything_else_is_no_certificate(tmp_path: Path) -> None:
    der = _certificate(tmp_path, "/CN=x", "7").read_bytes()
    pem = subprocess.run(["openssl", "x509", "-inform", "DER", "-in", str(tmp_path / "MOK.der")],
                         capture_output=True, check=True).stdout
    for data in (b"", b"\x30", b"\x30\x84\xff\xff\xff\xff", der[:40], pem, (tmp_path / "MOK.priv").read_bytes()):
        assert parse_certificate_signer(data) is None
    assert parse_certificate_signer(der[:-1] + der[-1:]) is not None


def test_dkms_settings_are_read_as_dkms_sources_them() -> None:
    texts = ["# mok_signing_key=/commented\nmok_certificate=/var/lib/dkms/mok.pub\n",
             'mok_certificate="/srv/mok/MOK.der"  # the site\nmok_signing_key=\'/srv/mok/MOK.priv\'\n',
             ]
    assert parse_dkms_signing(texts) == {"mok_certificate": "/srv/mok/MOK.der", "mok_signing_key": "/srv/mok/MOK.priv"}
    assert parse_dkms_signing([*texts, "mok_certificate=$(evil)\n"])["mok_certificate"] == "unknown"


def test_the_collector_reads_secure_boot_dkms_and_the_certificate_under_root(tmp_path: Path) -> None:
    root = tmp_path / "node"
    (root / EFIVAR).parent.mkdir(parents=True)
    (root / EFIVAR).write_bytes(b"\x06\x00\x00\x00\x01")
    (root / "etc/dkms/framework.conf.d").mkdir(parents=True)
    (root / "etc/dkms/framework.conf").write_text("# mok_certificate=/var/lib/dkms/mok.pub\n")
    (root / "etc/dkms/framework.conf.d/fleetspec-mok.conf").write_text('mok_certificate="/srv/mok/MOK.der"\n')
    _certificate(root / "srv/mok", "/CN=Site", "0x0102")
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/osrelease").write_text("6.8.0-1-generic\n")
    section = collect_secure_boot(Host(str(root), commands=False, load=False))
    assert section["enabled"] is True and section["dkms_mok_certificate"] == "/srv/mok/MOK.der"
    assert section["certificate"] == {"signer": "Site", "sig_key": "01:02"}
    assert section["kernel"] == "6.8.0-1-generic"
    (root / EFIVAR).write_bytes(b"\x06\x00\x00\x00\x00")
    (root / "etc/dkms/framework.conf.d/fleetspec-mok.conf").unlink()
    section = collect_secure_boot(Host(str(root), commands=False, load=False))
    assert section["enabled"] is False and section["dkms_mok_certificate"] == "/var/lib/dkms/mok.pub"
    assert section["certificate"] == "absent"
    (root / "etc").joinpath("os-release").write_text("ID=ubuntu\nVERSION_ID=\"24.04\"\n")
    section = collect_secure_boot(Host(str(root), commands=False, load=False))
    assert section["dkms_mok_certificate"] == "/var/lib/shim-signed/mok/MOK.der"  # DKMS's Ubuntu default
    # the role's entry point prints only this section, one JSON document, exit 0
    out = subprocess.run([sys.executable, collector.__file__, "--root", str(root), "--no-commands", "--secure-boot",
                          "6.8.0-2-generic"], capture_output=True, text=True, check=True).stdout
    assert json.loads(out)["secure_boot"]["kernel"] == "6.8.0-2-generic"


STACK = StackTuple(name="hopper", vendor="nvidia", driver="580.95.05", mok_certificate="/srv/mok/MOK.der",
                   mok_signing_key="/srv/mok/MOK.priv")
SIGNED = {"signer": "Site", "sig_key": "01:02", "filename": "/lib/modules/k/updates/dkms/nvidia.ko.zst",
          "dkms": True, "loaded": True, "unsigned_loaded": False}


def _facts(**changes: object) -> dict:
    section = {"enabled": True, "dkms_mok_certificate": "/srv/mok/MOK.der",
               "certificate": {"signer": "Site", "sig_key": "01:02"}, "kernel": "k",
               "modules": {"nvidia": dict(SIGNED)}, "errors": []}
    section.update(changes)
    return {"schema": "fleetspec.io/facts/v1", "secure_boot": section}


def test_signed_by_the_declared_mok_passes_and_each_way_to_miss_it_is_drift() -> None:
    assert [c.status for c in secure_boot_checks(STACK, _facts())] == [Status.OK]
    in_tree = {"signer": "Build time autogenerated kernel key", "sig_key": "3D:46", "dkms": False}
    assert [c.component for c in secure_boot_checks(STACK, _facts(modules={"nvidia": SIGNED, "amdgpu": in_tree}))] \
        == ["module-signer:nvidia"]
    cases = {
        "DKMS signs with /var/lib/dkms/mok.pub": _facts(dkms_mok_certificate="/var/lib/dkms/mok.pub"),
        "is absent": _facts(certificate="absent"),
        "not an X.509 certificate": _facts(certificate="unknown"),
        "no GPU driver module built by DKMS": _facts(modules={"amdgpu": in_tree}),
        "is signed by unsigned (-)": _facts(modules={"nvidia": {**SIGNED, "signer": "", "sig_key": ""}}),
        "is signed by Site (01:03)": _facts(modules={"nvidia": {**SIGNED, "sig_key": "01:03"}}),
        "tainted the kernel as unsigned": _facts(modules={"nvidia": {**SIGNED, "unsigned_loaded": True}}),
        "modinfo could not read nvidia": _facts(modules={"nvidia": "unknown"}),
    }
    for words, facts in cases.items():
        checks = secure_boot_checks(STACK, facts)
        assert checks and checks[0].status is Status.DRIFT and words in checks[0].message, (words, checks)


def test_no_check_without_secure_boot_a_declared_mok_or_the_section() -> None:
    assert secure_boot_checks(STACK, _facts(enabled=False)) == []
    assert secure_boot_checks(StackTuple(name="hopper", vendor="nvidia", driver="580.95.05"), _facts()) == []
    assert secure_boot_checks(STACK, {"schema": "fleetspec.io/facts/v1"}) == []
    assert secure_boot_checks(STACK, {"schema": "fleetspec.io/facts/v1", "secure_boot": "garbage"}) == []
