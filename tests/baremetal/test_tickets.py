"""Break-fix tickets against a local HTTP server on 127.0.0.1: the body (node, fault class,
evidence), the bearer token from a secret reference, and the refusals at the trust boundary."""

from __future__ import annotations

import pytest

from fleetspec.baremetal.tickets import MAX_BODY_BYTES, TicketError, post_ticket, ticket_body
from fleetspec.compile.ir import TicketWebhook

from .webhook import serving

VERDICT = {"status": "sick", "action": "replace", "faults": [
    {"class": "row-remap-failure", "scope": "device", "device": "0000:18:00.0", "action": "replace",
     "detail": "Xid 64: row remapping failure", "source": "kernel-log"},
    {"class": "ib-link-down", "scope": "node", "device": "mlx5_0", "action": "none", "detail": "port 1 down",
     "source": "infiniband"},
]}


def test_a_ticket_carries_node_fault_class_and_evidence_with_a_bearer_token(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FLEETSPEC_TEST_TICKET_TOKEN", "tok-123456")
    with serving() as hook:
        status = post_ticket(TicketWebhook(hook.url, "env:FLEETSPEC_TEST_TICKET_TOKEN", 5),
                             ticket_body("metal", "gpu-01", "nvidia-hopper", VERDICT, "spare-01"), tmp_path)
    assert status == 201
    (request,) = hook.requests
    assert request["headers"]["Authorization"] == "Bearer tok-123456"
    assert request["body"] == {
        "fleet": "metal", "node": "gpu-01", "partition": "nvidia-hopper", "action": "replace",
        "fault_class": "row-remap-failure", "spare": "spare-01",
        "evidence": [{"class": "row-remap-failure", "device": "0000:18:00.0",
                      "detail": "Xid 64: row remapping failure", "source": "kernel-log"}]}


def test_the_body_is_bounded() -> None:
    many = {"action": "replace", "faults": [{"class": "row-remap-failure", "action": "replace", "device": str(i),
                                              "detail": "x" * 10_000, "source": "kernel-log"} for i in range(100)]}
    body = ticket_body("metal", "gpu-01", "p", many, None)
    import json

    assert len(json.dumps(body).encode()) <= MAX_BODY_BYTES and body["evidence"]
    assert all(len(e["detail"]) == 500 for e in body["evidence"])


def test_a_redirect_is_not_followed_and_the_token_never_shows(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("FLEETSPEC_TEST_TICKET_TOKEN", "tok-123456")
    with serving() as hook:
        hook.status, hook.location = 307, "http://127.0.0.1:9/elsewhere"
        with pytest.raises(TicketError, match="answered 307") as caught:
            post_ticket(TicketWebhook(hook.url, "env:FLEETSPEC_TEST_TICKET_TOKEN", 5),
                        ticket_body("metal", "gpu-01", "p", VERDICT, None), tmp_path)
    assert len(hook.requests) == 1 and "tok-123456" not in str(caught.value)


def test_a_webhook_that_hangs_times_out(tmp_path) -> None:
    with serving() as hook:
        hook.delay = 3
        with pytest.raises(TicketError, match="could not be reached: timed out"):
            post_ticket(TicketWebhook(hook.url, None, 1), ticket_body("metal", "gpu-01", "p", VERDICT, None), tmp_path)


def test_a_missing_token_is_an_error_before_anything_is_sent(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("FLEETSPEC_TEST_TICKET_TOKEN", raising=False)
    with serving() as hook, pytest.raises(TicketError, match="FLEETSPEC_TEST_TICKET_TOKEN is not set"):
        post_ticket(TicketWebhook(hook.url, "env:FLEETSPEC_TEST_TICKET_TOKEN", 5),
                    ticket_body("metal", "gpu-01", "p", VERDICT, None), tmp_path)
    assert hook.requests == []


def test_replace_from_verdict_files_posts_a_ticket_and_says_what_it_could_not_do(tmp_path) -> None:
    """``fleetspec baremetal replace --facts DIR``: the node check's verdicts in, a ticket out;
    a partition without a spare pool is said (exit 1), the ticket still goes."""
    import json as json_module

    from typer.testing import CliRunner

    from fleetspec.cli import app

    from .fleets import spec

    facts = tmp_path / "verdicts"
    facts.mkdir()
    (facts / "gpu-02.json").write_text(json_module.dumps(VERDICT))
    (facts / "gpu-01.json").write_text(json_module.dumps({"status": "healthy", "action": "none", "faults": []}))
    with serving() as hook:
        path = tmp_path / "fleet.yaml"
        path.write_text(spec("http://127.0.0.1:8000", extra=f'  baremetal:\n    tickets: {{url: "{hook.url}"}}\n'))
        done = CliRunner().invoke(app, ["baremetal", "replace", str(path), "--facts", str(facts)])
    assert done.exit_code == 1, done.output
    assert done.stdout.splitlines() == ["gpu-02: ticket posted (201)",
                                        "gpu-02: partition nvidia-hopper has no spare pool (spec.baremetal.spares)"]
    (request,) = hook.requests
    assert (request["body"]["node"], request["body"]["fault_class"], request["body"]["spare"]) == (
        "gpu-02", "row-remap-failure", None)
