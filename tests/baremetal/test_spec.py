"""The bmc and baremetal sections: merged per node, checked at the trust boundary, each
problem located in the spec."""

from __future__ import annotations

import pytest

from .fleets import compiled, spec

LOCAL = "http://127.0.0.1:8000"


def errors(text: str) -> list:
    return [f for f in compiled(text).located() if str(f.severity) == "error"]


def test_each_node_gets_its_bmc_with_the_groups_bios_over_the_racks() -> None:
    result = compiled(spec(LOCAL, rack_bmc="\n        bios: {BootMode: Uefi, ProcTurboMode: Disabled}"))
    assert result.valid, result.located()
    bm = result.fleet.baremetal
    assert [b.host for b in bm.bmcs] == ["gpu-01", "gpu-02", "spare-01"]
    gpu = bm.bmc("gpu-01")
    assert (gpu.endpoint, gpu.system, gpu.username, gpu.password) == (LOCAL, "gpu-01", "admin",
                                                                       "env:FLEETSPEC_TEST_BMC_PASSWORD")
    assert gpu.bios == (("BootMode", "Uefi"), ("ProcTurboMode", "Enabled"))  # the group's value wins
    assert bm.bmc("spare-01").bios == (("BootMode", "Uefi"), ("ProcTurboMode", "Disabled"))
    assert '"password": "env:FLEETSPEC_TEST_BMC_PASSWORD"' in result.fleet.to_json()  # a reference, never a value


@pytest.mark.parametrize("endpoint, message", [
    ("http://bmc.example.com", "must be https:// (plain http only to 127.0.0.1 or localhost)"),
    ("ftp://127.0.0.1", "must be https://"),
])
def test_an_endpoint_in_clear_over_the_network_is_refused_where_it_is_written(endpoint, message) -> None:
    found = errors(spec(endpoint))
    assert len(found) == 1 and message in found[0].message, found
    assert (found[0].path, found[0].line) == ("spec.racks[0].bmc.endpoint", 11)


def test_a_user_in_the_endpoint_is_refused_without_echoing_it() -> None:
    found = errors(spec("https://root:calvin@bmc.example.com"))
    assert len(found) == 1 and "no user or password in it" in found[0].message, found
    assert "calvin" not in found[0].message and found[0].line == 11


def test_a_plaintext_password_is_refused_and_never_echoed() -> None:
    text = spec(LOCAL).replace("env:FLEETSPEC_TEST_BMC_PASSWORD", "calvin123")
    found = errors(text)
    assert len(found) == 1 and "not a secret reference" in found[0].message, found
    assert "calvin123" not in found[0].message and "calvin123" not in found[0].source_line
    assert found[0].line == 14


def test_a_pulumi_secret_cannot_hold_a_bmc_password() -> None:
    found = errors(spec(LOCAL).replace("env:FLEETSPEC_TEST_BMC_PASSWORD", "pulumi:bmcPassword"))
    assert len(found) == 1 and "env:, file: or vault:" in found[0].message
    assert found[0].path == "spec.racks[0].bmc.password"


def test_a_bmc_without_credentials_says_what_is_missing() -> None:
    text = spec(LOCAL).replace("        username: admin\n", "")
    found = errors(text)
    assert len(found) == 1 and "has no username" in found[0].message and found[0].path == "spec.racks[0].bmc"


SPARES = """\
  baremetal:
    spares: {{nvidia-hopper: {hosts}}}
    tickets: {{url: "{url}"}}
"""


def test_a_spare_pool_and_a_ticket_webhook_compile() -> None:
    result = compiled(spec(LOCAL, extra=SPARES.format(hosts="spare-01", url="https://tickets.example.com/api")))
    assert result.valid, result.located()
    assert result.fleet.baremetal.spares == (("nvidia-hopper", ("spare-01",)),)
    assert result.fleet.baremetal.tickets.url == "https://tickets.example.com/api"


@pytest.mark.parametrize("hosts, url, message, path", [
    ("gpu-01", "https://t.example.com", "already in partition 'nvidia-hopper'", "spec.baremetal.spares.nvidia-hopper"),
    ("ghost-01", "https://t.example.com", "is not a node of any rack", "spec.baremetal.spares.nvidia-hopper"),
    ("spare-01", "http://t.example.com", "must be https://", "spec.baremetal.tickets.url"),
    ("spare-01", "https://t.example.com/hook?api_key=abc", "carries a credential in its query",
     "spec.baremetal.tickets.url"),
])
def test_spares_and_webhook_problems_are_located(hosts, url, message, path) -> None:
    found = errors(spec(LOCAL, extra=SPARES.format(hosts=hosts, url=url)))
    assert len(found) == 1 and message in found[0].message, found
    assert found[0].path == path


@pytest.mark.parametrize("query, said", [
    ("sv=2024-11-04&sp=w&sig=Zm9vYmFyc2VjcmV0", "'sig': an Azure shared access signature"),
    ("code=Zm9vYmFyc2VjcmV0&clientId=default", "'code': an Azure Functions key"),
    ("X-Amz-Date=20260101T000000Z&X-Amz-Signature=Zm9vYmFyc2VjcmV0", "'X-Amz-Signature': an AWS presigned signature"),
    ("x-goog-signature=Zm9vYmFyc2VjcmV0", "'x-goog-signature': a Google signed-URL signature"),
    ("%73ig=Zm9vYmFyc2VjcmV0", "'sig': an Azure shared access signature"),  # percent-encoded name
    ("access_token=Zm9vYmFyc2VjcmV0", "'access_token'"),
])
def test_a_webhook_credential_in_any_known_query_parameter_is_refused_unechoed(query, said) -> None:
    """#41 item 8: a credential in the webhook's query would land in fleet.json and plans."""
    found = errors(spec(LOCAL, extra=SPARES.format(hosts="spare-01", url=f"https://hooks.example.com/api?{query}")))
    assert len(found) == 1 and f"carries a credential in its query ({said})" in found[0].message, found
    assert "tickets.token" in found[0].message and found[0].path == "spec.baremetal.tickets.url"
    assert "Zm9vYmFyc2VjcmV0" not in found[0].message + found[0].source_line


def test_a_bios_password_literal_is_refused_at_its_key_and_never_echoed() -> None:
    """#41 item 8: the registries declare AdminPassword and SetupPassword as Type Password; a
    literal pinned under them would be written to fleet.json, the state and saved plans.
    PasswordStatus and BootmanagerPassword are Enumerations there (Dell R750): pinned freely."""
    text = spec(LOCAL, bios="{ProcTurboMode: Enabled, AdminPassword: hunter2secret, PasswordStatus: Locked}",
                rack_bmc="\n        bios: {SetupPassword: 0451x, BootmanagerPassword: Never}")
    found = errors(text)
    assert [f.path for f in found] == ["spec.racks[0].bmc.bios.SetupPassword",
                                       "spec.racks[0].nodes[0].bmc.bios.AdminPassword"], found
    for finding in found:
        assert "is a password" in finding.message and "secret reference" in finding.message
        assert "hunter2secret" not in finding.message + finding.source_line
        assert "0451x" not in finding.message + finding.source_line
    fine = compiled(spec(LOCAL, bios="{PasswordStatus: Locked, BootmanagerPassword: Never}"))
    assert fine.valid, fine.located()


def test_a_spare_of_another_model_is_refused() -> None:
    text = spec(LOCAL, extra=SPARES.format(hosts="spare-01", url="https://t.example.com"))
    text = text.replace("- hosts: spare-01\n          gpu: {model: h100-sxm, count: 8}",
                        "- hosts: spare-01\n          gpu: {model: h100-sxm, count: 4}")
    found = errors(text)
    assert len(found) == 1 and "must be the same model and tuple" in found[0].message, found


def test_stack_firmware_pins_reach_the_tuple() -> None:
    result = compiled(spec(LOCAL, stack_extra=', firmware: {vbios: "96.00.74.00.01", connectx: "28.43.2566"}'))
    assert result.valid, result.located()
    assert result.fleet.stack("hopper").firmware == (("vbios", "96.00.74.00.01"), ("connectx", "28.43.2566"))


def test_the_bare_metal_ir_survives_the_state_round_trip() -> None:
    import json

    from fleetspec.state.codec import fleet_from_dict

    result = compiled(spec(LOCAL, extra=SPARES.format(hosts="spare-01", url="https://t.example.com"),
                           bios="{ProcTurboMode: Enabled, NumaNodes: 4, SriovGlobalEnable: true}",
                           stack_extra=', firmware: {vbios: "96.00.74.00.01"}'))
    assert result.valid, result.located()
    back = fleet_from_dict(json.loads(result.fleet.to_json()))
    assert back.to_json() == result.fleet.to_json()
    assert back.baremetal.bmc("gpu-01").bios == (("NumaNodes", 4), ("ProcTurboMode", "Enabled"),
                                                 ("SriovGlobalEnable", True))


def test_a_damaged_stored_bios_value_is_refused() -> None:
    import json

    from fleetspec.state.codec import FleetDecodeError, fleet_from_dict

    data = json.loads(compiled(spec(LOCAL)).fleet.to_json())
    data["baremetal"]["bmcs"][0]["bios"][0][1] = {"an": "object"}
    with pytest.raises(FleetDecodeError, match="expected str or int or bool"):
        fleet_from_dict(data)
    del data["baremetal"]["bmcs"][0]["endpoint"]
    with pytest.raises(FleetDecodeError, match="NodeBmc lacks 'endpoint'"):
        fleet_from_dict(data)


def test_firmware_images_compile_and_survive_the_state_round_trip() -> None:
    import json

    from fleetspec.state.codec import fleet_from_dict

    extra = '  baremetal:\n    firmware_images: {bios: {"2.5.1": "https://fw.example.com/bios-2.5.1.bin"}}\n'
    result = compiled(spec(LOCAL, extra=extra, stack_extra=', firmware: {bios: "2.5.1"}'))
    assert result.valid, result.located()
    assert result.fleet.baremetal.firmware_image("bios", "2.5.1") == "https://fw.example.com/bios-2.5.1.bin"
    assert fleet_from_dict(json.loads(result.fleet.to_json())).to_json() == result.fleet.to_json()


@pytest.mark.parametrize("component, uri, severity, message", [
    ("bios", "http://fw.example.com/b.bin", "warning", "the bios 2.5.1 firmware image http://fw.example.com/b.bin is "
     "served over plain http: the BMC fetches whatever answers there"),
    ("bios", "https://u:p@fw.example.com/b.bin", "error", "the bios 2.5.1 firmware image carries a user or password "
     "in the URL"),
])
def test_firmware_image_uris_are_checked_where_they_are_written(component, uri, severity, message) -> None:
    extra = f'  baremetal:\n    firmware_images: {{{component}: {{"2.5.1": "{uri}"}}}}\n'
    found = [f for f in compiled(spec(LOCAL, extra=extra)).located() if f.rule == "baremetal"]
    assert [(str(f.severity), f.path, f.line) for f in found] == [
        (severity, "spec.baremetal.firmware_images.bios.2.5.1", 31)], found
    assert message in found[0].message and "u:p" not in found[0].message


@pytest.mark.parametrize("extra, path", [
    ('  baremetal:\n    firmware_images: {bios: {"2.5.1": "https://fw.example.com/b.bin?X-Amz-Date=20260101T000000Z'
     '&X-Amz-Signature=Zm9vYmFyc2VjcmV0"}}\n', "spec.baremetal.firmware_images.bios.2.5.1"),
    ('  baremetal:\n    pxe: {server: 10.0.0.1, interface: eth1, dhcp_range: "10.0.0.50,10.0.0.60",\n'
     '          image_url: "https://img.example.com/golden?sv=2024-11-04&sig=Zm9vYmFyc2VjcmV0"}\n',
     "spec.baremetal.pxe.image_url"),
])
def test_a_presigned_image_url_is_refused_unechoed(extra, path) -> None:
    """#41 item 8: a presigned firmware or golden-image URL would store its signature with the fleet."""
    found = errors(spec(LOCAL, extra=extra))
    assert [f.path for f in found] == [path], found
    assert "carries a credential in its query" in found[0].message
    assert "Zm9vYmFyc2VjcmV0" not in found[0].message + found[0].source_line


def test_a_firmware_component_the_tuple_does_not_know_is_refused() -> None:
    extra = '  baremetal:\n    firmware_images: {gpu: {"2.5.1": "https://fw.example.com/b.bin"}}\n'
    found = errors(spec(LOCAL, extra=extra))
    assert found and "firmware_images" in found[0].path, found


def test_an_image_with_its_sha256_compiles_and_a_bad_sha256_is_refused_where_written() -> None:
    import json

    from fleetspec.state.codec import fleet_from_dict

    digest = "ab" * 32
    extra = (f'  baremetal:\n    firmware_images: {{bmc: {{"1.20": {{url: "https://fw.example.com/bmc.bin", '
             f'sha256: "{digest}"}}}}}}\n')
    result = compiled(spec(LOCAL, extra=extra))
    assert result.valid, result.located()
    assert result.fleet.baremetal.firmware_image("bmc", "1.20") == "https://fw.example.com/bmc.bin"
    assert result.fleet.baremetal.firmware_sha256("bmc", "1.20") == digest
    assert fleet_from_dict(json.loads(result.fleet.to_json())).to_json() == result.fleet.to_json()
    found = errors(spec(LOCAL, extra=extra.replace(digest, "AB" * 32)))
    assert [f.path for f in found] == ["spec.baremetal.firmware_images.bmc.1.20.sha256"], found
    assert "64 lower-case hex digits" in found[0].message
    assert found[0].line == 31, found


FP = "E0:E3:3B:11:94:4B:9D:EE:2A:30:D2:C9:9F:84:74:CD:EA:9D:38:5D:9A:51:F0:BB:BD:61:C7:6F:E4:FD:FB:40"


def test_tls_trust_per_bmc_compiles_normalised_and_survives_the_state_round_trip() -> None:
    import json

    from fleetspec.state.codec import fleet_from_dict

    text = spec("https://{host}-bmc.mgmt", rack_bmc=f'\n        fingerprint: ["sha256:{FP}", "{"ab" * 32}"]')
    result = compiled(text)
    assert result.valid, result.located()
    bmc = result.fleet.baremetal.bmc("gpu-01")
    assert bmc.fingerprints == (FP.replace(":", "").lower(), "ab" * 32)  # as the transport compares them
    assert fleet_from_dict(json.loads(result.fleet.to_json())).to_json() == result.fleet.to_json()
    named = compiled(spec("https://10.0.0.{host}", rack_bmc="\n        ca_file: certs/ami.pem\n        server_name: AMI"))
    assert named.valid, named.located()
    assert (named.fleet.baremetal.bmc("gpu-01").server_name, named.fleet.baremetal.bmc("gpu-01").ca_file) == (
        "AMI", "certs/ami.pem")


@pytest.mark.parametrize("rack_bmc, path, message", [
    ('\n        fingerprint: "E0:E3:3B"', "spec.racks[0].bmc.fingerprint", "openssl x509 -noout -fingerprint"),
    ('\n        fingerprint: ["' + "g" * 64 + '"]', "spec.racks[0].bmc.fingerprint", "openssl x509 -noout -fingerprint"),
    (f'\n        fingerprint: "{FP}"\n        ca_file: certs/ami.pem', "spec.racks[0].bmc.fingerprint",
     "this BMC pins its certificate (fingerprint) and gives ca_file too"),
    ('\n        server_name: "AMI/../x"', "spec.racks[0].bmc.server_name", "Write the DNS name the BMC's certificate"),
])
def test_tls_settings_that_cannot_hold_are_refused_where_written(rack_bmc, path, message) -> None:
    found = errors(spec("https://{host}-bmc.mgmt", rack_bmc=rack_bmc))
    assert found and found[0].path.startswith(path) and message in found[0].message, found


def test_tls_settings_on_a_plain_http_endpoint_are_refused() -> None:
    found = errors(spec(LOCAL, rack_bmc="\n        server_name: AMI"))
    assert [(f.path, f.line) for f in found] == [("spec.racks[0].bmc.server_name", 15)], found
    assert "server_name applies to a certificate, and this BMC's endpoint is plain http" in found[0].message


def test_the_schema_documents_the_tls_fields() -> None:
    from fleetspec.spec.model import Bmc

    fields = Bmc.model_json_schema()["properties"]
    assert "CN=AMI" in fields["server_name"]["description"]
    assert "openssl x509 -fingerprint -sha256" in fields["fingerprint"]["description"]
