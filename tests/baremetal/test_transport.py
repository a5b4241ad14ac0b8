"""A compromised BMC against fleetspec's Redfish transport (#41 items 1, 6, 10; #40 item 4):
a hostile service on 127.0.0.1 serving a real BMC's capture (tests/baremetal/hostile_bmc.py)
and another listener standing for "another host", which must never see a credential, a token
or an image; trickled and huge answers, bounded in time and memory; TLS as sites have it."""

from __future__ import annotations

import resource
import subprocess
import time
from pathlib import Path

import pytest

from fleetspec.baremetal import redfish
from fleetspec.baremetal.redfish import BmcError, Session
from fleetspec.compile.ir import NodeBmc

from . import hostile_bmc as h

ENV = "FLEETSPEC_TEST_HOSTILE_PASSWORD"


@pytest.fixture(scope="module")
def hostile():
    with h.serving(h.capture()) as service:
        yield service


@pytest.fixture(scope="module")
def elsewhere():
    with h.serving(None) as service:
        yield service


@pytest.fixture(autouse=True)
def _fresh(request, monkeypatch):
    monkeypatch.setenv(ENV, h.PASSWORD)
    for name in ("hostile", "elsewhere"):
        if name in request.fixturenames:
            request.getfixturevalue(name).reset()


def node_bmc(endpoint: str, **kw) -> NodeBmc:
    return NodeBmc("gpu-01", endpoint, None, h.USER, f"env:{ENV}", **kw)


def nothing_reached(elsewhere) -> None:
    assert elsewhere.seen == [], elsewhere.seen


# --- credentials never leave the origin (#41 item 1) ---------------------------------------

def test_a_system_linked_on_another_host_gets_no_basic_credential(hostile, elsewhere, tmp_path) -> None:
    """Sessions refused (sushy falls back to Basic), the System named by an absolute link to
    another host over plain http: the issue's finding, where Basic admin:<password> went there."""
    hostile.sessions = False
    hostile.rewrite["/redfish/v1/Systems"] = lambda doc: {
        **doc, "Members": [{"@odata.id": f"{elsewhere.url}/redfish/v1/Systems/1"}]}
    with pytest.raises(BmcError) as caught, Session(node_bmc(hostile.url), tmp_path):
        pass
    message = str(caught.value)
    assert message.startswith(f"gpu-01: cannot open a Redfish session at {hostile.url}: the BMC named "
                              f"{elsewhere.url}/redfish/v1/Systems/1 for GET /redfish/v1/Systems/1, off its own origin")
    assert h.PASSWORD not in message
    nothing_reached(elsewhere)
    assert any(s.authorization for s in hostile.seen)  # Basic went to the BMC itself, as it should


def test_the_console_script_reports_the_refusal_and_exits_promptly(hostile, elsewhere, tmp_path) -> None:
    """The session was made (a token in play) before the refusal: the process ends it and exits,
    rather than leaving sushy to log out at the interpreter's exit, where no request can run."""
    import os
    import sys

    from tests.conftest import ROOT

    from .fleets import spec

    hostile.rewrite["/redfish/v1/Systems/1"] = lambda doc: {
        **doc, "EthernetInterfaces": {"@odata.id": f"{elsewhere.url}/redfish/v1/Systems/1/EthernetInterfaces"}}
    path = tmp_path / "fleet.yaml"
    path.write_text(spec(hostile.url).replace('system: "{host}"', 'system: "1"').replace(
        "env:FLEETSPEC_TEST_BMC_PASSWORD", f"env:{ENV}"))
    proc = subprocess.run([sys.executable, "-m", "fleetspec.cli", "baremetal", "plan", str(path), "--hosts", "gpu-01"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1
    assert f"gpu-01: cannot read the system at {hostile.url}: the BMC named {elsewhere.url}/redfish/v1/Systems/1/" \
           "EthernetInterfaces for GET /redfish/v1/Systems/1/EthernetInterfaces, off its own origin" in proc.stderr
    assert h.PASSWORD not in proc.stdout + proc.stderr
    nothing_reached(elsewhere)


def test_a_session_service_elsewhere_never_gets_the_password(hostile, elsewhere, tmp_path) -> None:
    sessions = {"@odata.id": f"{elsewhere.url}/redfish/v1/SessionService/Sessions"}
    hostile.rewrite["/redfish/v1"] = lambda doc: {**doc, "Links": {**doc["Links"], "Sessions": sessions}}
    hostile.rewrite["/redfish/v1/SessionService"] = lambda doc: {**doc, "Sessions": sessions}
    with pytest.raises(BmcError, match="off its own origin"), Session(node_bmc(hostile.url), tmp_path):
        pass
    nothing_reached(elsewhere)


def test_a_redirect_elsewhere_never_carries_the_session_token(hostile, elsewhere, tmp_path) -> None:
    """requests drops Authorization on a redirect to another host, but not X-Auth-Token."""
    hostile.special["/redfish/v1/Systems/1"] = h.moved(f"{elsewhere.url}/redfish/v1/Systems/1")
    with pytest.raises(BmcError, match="off its own origin"), Session(node_bmc(hostile.url), tmp_path):
        pass
    assert any(s.token for s in hostile.seen)  # the session was made: the token was in play
    nothing_reached(elsewhere)


def test_a_push_uri_elsewhere_gets_neither_token_nor_image(hostile, elsewhere, tmp_path) -> None:
    hostile.rewrite["/redfish/v1/UpdateService"] = lambda doc: {
        **doc, "MultipartHttpPushUri": f"{elsewhere.url}/upload"}
    with Session(node_bmc(hostile.url), tmp_path) as session, pytest.raises(BmcError) as caught:
        session.update_firmware("bios", f"{elsewhere.url}/images/bios.bin", sha256="0" * 64)
    assert f"the BMC named {elsewhere.url}/upload for the bios image (MultipartHttpPushUri)" in str(caught.value)
    nothing_reached(elsewhere)  # not even the image fetched: refused before


def test_a_task_monitor_elsewhere_is_never_polled(hostile, elsewhere, tmp_path) -> None:
    hostile.rewrite["/redfish/v1/UpdateService"] = lambda doc: {
        k: v for k, v in doc.items() if k != "MultipartHttpPushUri"}
    hostile.special["/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"] = h.accepted(
        f"{elsewhere.url}/redfish/v1/TaskService/Tasks/1")
    off = "TaskService/Tasks/1 for GET /redfish/v1/TaskService/Tasks/1, off its own origin"
    with Session(node_bmc(hostile.url), tmp_path) as session, pytest.raises(BmcError, match=off):
        session.update_firmware("bios", "https://images.example/bios.bin")
    nothing_reached(elsewhere)


# --- deadlines and answer sizes (#41 items 6, 10) ------------------------------------------

@pytest.mark.parametrize("answer", [h.trickle(every_s=0.2), h.trickle_headers(every_s=0.2)], ids=["body", "headers"])
def test_a_trickling_bmc_is_unreachable_at_the_request_deadline(hostile, tmp_path, monkeypatch, answer) -> None:
    monkeypatch.setattr(redfish, "READ_TIMEOUT_S", 1)
    hostile.special["/redfish/v1/Systems/1"] = answer
    start = time.monotonic()
    with pytest.raises(BmcError) as caught, Session(node_bmc(hostile.url), tmp_path):
        pass
    took = time.monotonic() - start
    assert took < 10, took  # the trickle lasts 30 s: without the deadline it runs to its end
    assert "unreachable: the BMC had not finished answering GET /redfish/v1/Systems/1 within the 1 s deadline of " \
           "one request" in str(caught.value)


def test_a_slow_bmc_is_unreachable_at_its_own_deadline_in_plan(hostile, tmp_path) -> None:
    """Every answer whole and in time (0.2 s each), but the BMC as a whole past its deadline."""
    from fleetspec.baremetal.run import observe

    from .fleets import compiled, spec

    hostile.delay_s = 0.2
    fleet = compiled(spec(hostile.url).replace('system: "{host}"', 'system: "1"').replace(
        "env:FLEETSPEC_TEST_BMC_PASSWORD", f"env:{ENV}").replace("username: admin", f"username: {h.USER}")).fleet
    start = time.monotonic()
    seen = observe(fleet, tmp_path, hosts=["gpu-01"], deadline_s=1)
    took = time.monotonic() - start
    assert took < 5, took  # room for a busy CI machine; without the deadline: every answer, 0.2 s each
    assert not seen.seen
    why = seen.unreachable["gpu-01"]
    assert why.startswith(f"gpu-01: cannot read the system at {hostile.url}: unreachable: "), why
    assert "the BMC's deadline (1 s for all its requests)" in why


def test_a_huge_answer_is_refused_as_the_nodes_error_in_bounded_memory(hostile, tmp_path) -> None:
    """256 MB for the EthernetInterfaces, which the read treats as optional: still the node's error."""
    hostile.special["/redfish/v1/Systems/1/EthernetInterfaces"] = h.huge(256 << 20)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    start = time.monotonic()
    with Session(node_bmc(hostile.url), tmp_path) as session, pytest.raises(BmcError) as caught:
        session.read()
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert time.monotonic() - start < 10
    assert grown_mib < 64, grown_mib
    assert str(caught.value).startswith(f"gpu-01: cannot read the system at {hostile.url}: the BMC's answer to GET "
                                        "/redfish/v1/Systems/1/EthernetInterfaces is over the 16777216 bytes")


# --- TLS as sites have it (#40 item 4) ------------------------------------------------------

@pytest.fixture(scope="module")
def ami_cert(tmp_path_factory) -> tuple[Path, Path, str]:
    """A certificate like the AMI MegaRAC vendor default #40 reports: self-signed, subject
    CN=AMI and nothing else, no subjectAltName (so not valid for the address it is reached by)."""
    d = tmp_path_factory.mktemp("ami")
    cert, key = d / "ami.pem", d / "ami.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=AMI", "-days", "3650",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    out = subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-fingerprint", "-sha256"], check=True,
                         capture_output=True, text=True, timeout=30).stdout
    assert "Subject Alternative Name" not in subprocess.run(["openssl", "x509", "-in", str(cert), "-noout", "-text"],
                                                            capture_output=True, text=True, timeout=30).stdout
    return cert, key, out.strip().split("=", 1)[1]  # AB:CD:... as openssl prints it


@pytest.fixture(scope="module")
def ami_bmc(ami_cert):
    with h.serving(h.capture(), cert=(ami_cert[0], ami_cert[1])) as service:
        yield service


def _fingerprints(text: str) -> tuple[str, ...]:
    return (text.replace(":", "").lower(),)


def test_a_pinned_fingerprint_trusts_the_vendor_default_certificate(ami_bmc, ami_cert, tmp_path) -> None:
    with Session(node_bmc(ami_bmc.url, fingerprints=_fingerprints(ami_cert[2])), tmp_path) as session:
        assert session._system.identity == "1"


def test_a_wrong_fingerprint_is_refused_before_the_credential_is_sent(ami_bmc, ami_cert, tmp_path) -> None:
    ami_bmc.reset()
    other = "AA:" * 31 + "AA"
    with pytest.raises(BmcError) as caught, Session(node_bmc(ami_bmc.url, fingerprints=_fingerprints(other)), tmp_path):
        pass
    assert f"TLS: the BMC presented a certificate with SHA-256 fingerprint {ami_cert[2]}; bmc.fingerprint pins " \
           f"{other}: refused before anything was sent" in str(caught.value)
    assert ami_bmc.seen == []


def test_ca_file_and_server_name_trust_a_certificate_named_ami_reached_by_address(ami_bmc, ami_cert, tmp_path) -> None:
    bmc = node_bmc(ami_bmc.url, ca_file=str(ami_cert[0]), server_name="AMI")
    with Session(bmc, tmp_path) as session:
        assert session._system.identity == "1"


def test_ca_file_alone_is_refused_saying_what_to_set(ami_bmc, ami_cert, tmp_path) -> None:
    ami_bmc.reset()
    with pytest.raises(BmcError) as caught, Session(node_bmc(ami_bmc.url, ca_file=str(ami_cert[0])), tmp_path):
        pass
    message = str(caught.value)
    assert "TLS: the BMC's certificate was refused (" in message and "127.0.0.1" in message
    assert f"the certificate it presents has SHA-256 fingerprint {ami_cert[2]}" in message
    assert "bmc.server_name" in message and "bmc.fingerprint" in message
    assert not any(s.authorization for s in ami_bmc.seen)


def test_the_wrong_server_name_is_refused(ami_bmc, ami_cert, tmp_path) -> None:
    with pytest.raises(BmcError, match="TLS: the BMC's certificate was refused"), \
            Session(node_bmc(ami_bmc.url, ca_file=str(ami_cert[0]), server_name="bmc.example"), tmp_path):
        pass


def test_without_any_trust_setting_a_vendor_certificate_is_refused(ami_bmc, tmp_path) -> None:
    with pytest.raises(BmcError, match="TLS: the BMC's certificate was refused .*certificate verify failed"), \
            Session(node_bmc(ami_bmc.url), tmp_path):
        pass


# --- boot scripts by MAC (#41 item 4) --------------------------------------------------------

def _two_nodes(hostile):
    """gpu-01 and gpu-02, each with a BMC at the hostile service (its System 1)."""
    from .fleets import compiled, spec

    text = spec(hostile.url).replace('system: "{host}"', 'system: "1"').replace(
        "env:FLEETSPEC_TEST_BMC_PASSWORD", f"env:{ENV}").replace("username: admin", f"username: {h.USER}")
    return compiled(text).fleet


def test_a_mac_two_bmcs_report_is_an_error_naming_both_and_nothing_is_written(hostile, tmp_path) -> None:
    """Both BMCs report the capture's NICs: either could take the other's boot."""
    from fleetspec.baremetal.run import BootScriptError, observe, write_boot_scripts

    fleet = _two_nodes(hostile)
    seen = observe(fleet, tmp_path, hosts=["gpu-01", "gpu-02"])
    assert set(seen.seen) == {"gpu-01", "gpu-02"}, seen.unreachable
    mac = seen.seen["gpu-01"].nics[0]
    tftp = tmp_path / "tftp"
    tftp.mkdir()
    with pytest.raises(BootScriptError) as caught:
        write_boot_scripts(tftp, fleet, seen)
    assert f"the MAC {mac} is reported by the BMCs of gpu-01 and gpu-02" in str(caught.value)
    assert list(tftp.iterdir()) == []


def test_only_unicast_macs_become_boot_scripts_normalised(hostile, tmp_path) -> None:
    """A BMC naming its NICs with paths, shell words, multicast and hyphenated upper case."""
    from fleetspec.baremetal.run import observe, write_boot_scripts

    planted = {"1": "../../boot", "2": "01:00:5E:00:00:FB", "3": "B8-3F-D2-90-97-C4", "4": "hosts/gpu-02",
               "5": "$(reboot)", "6": "00:00:00:00:00:00"}
    for member, value in planted.items():
        hostile.rewrite[f"/redfish/v1/Systems/1/EthernetInterfaces/{member}"] = (
            lambda doc, value=value: {**doc, "MACAddress": value})
    fleet = _two_nodes(hostile)
    seen = observe(fleet, tmp_path, hosts=["gpu-01"])
    tftp = tmp_path / "tftp"
    tftp.mkdir()
    written, skipped = write_boot_scripts(tftp, fleet, seen)
    names = sorted(p.name for p in (tftp / "nodes").iterdir())
    assert names == sorted(p.name for p in written)
    assert "b8-3f-d2-90-97-c4.ipxe" in names
    for name in names:
        assert h.MAC_FILE.fullmatch(name), name
    assert sorted(p.relative_to(tftp).as_posix() for p in tftp.rglob("*")) == ["nodes"] + [f"nodes/{n}" for n in names]
    left_out = "\n".join(skipped)
    for value in ("'../../boot'", "'hosts/gpu-02'", "'$(reboot)'"):
        assert f"its BMC reports the NIC address {value}, not a MAC" in left_out
    assert "01:00:5e:00:00:fb, a multicast, broadcast or zero address" in left_out
    assert "00:00:00:00:00:00, a multicast" in left_out
