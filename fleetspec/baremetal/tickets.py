"""Break-fix tickets: one JSON POST to the site's webhook per node the health loop replaces.

The webhook is a trust boundary. Its URL was checked at compile time (https, or http only to
the loopback address; no user, password or credential-named query parameter in it); the
bearer token is a secret reference resolved here and never printed. The body is bounded
(`MAX_BODY_BYTES`: evidence lines are cut to fit), redirects are not followed (a redirect
could carry the token elsewhere), every request has a timeout, and only the status line of
the answer is read back (at most `MAX_REPLY_BYTES`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from fleetspec.compile.ir import TicketWebhook
from fleetspec.secrets import Redactor, SecretError, SecretRef, resolve

MAX_BODY_BYTES = 16 * 1024
MAX_EVIDENCE = 20  # fault lines per ticket
MAX_DETAIL = 500  # characters per fault line
MAX_REPLY_BYTES = 4096


class TicketError(RuntimeError):
    """The ticket could not be posted; the message never holds the token."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx is an error: the token is not sent on to wherever it points


def ticket_body(fleet: str, node: str, partition: str, verdict: dict[str, Any], spare: str | None) -> dict[str, Any]:
    """The ticket: node, fault class, evidence (the acting faults as the node check saw them)."""
    acting = [f for f in verdict.get("faults", []) if f.get("action", "none") != "none"]
    replace = [f for f in acting if f.get("action") == "replace"] or acting
    evidence = [{"class": str(f.get("class", "")), "device": str(f.get("device", ""))[:64],
                 "detail": str(f.get("detail", ""))[:MAX_DETAIL], "source": str(f.get("source", ""))[:64]}
                for f in replace[:MAX_EVIDENCE]]
    body = {"fleet": fleet, "node": node, "partition": partition, "action": "replace",
            "fault_class": evidence[0]["class"] if evidence else "unknown", "evidence": evidence,
            "spare": spare}
    while len(json.dumps(body).encode()) > MAX_BODY_BYTES and body["evidence"]:
        body["evidence"] = body["evidence"][:-1]
    return body


def post_ticket(hook: TicketWebhook, body: dict[str, Any], base_dir: Path, redactor: Redactor | None = None) -> int:
    """POST the ticket; the HTTP status on success (2xx). Raises TicketError otherwise."""
    redactor = redactor or Redactor()
    data = json.dumps(body, sort_keys=True).encode()
    if len(data) > MAX_BODY_BYTES:
        raise TicketError(f"the ticket for {body.get('node')} is {len(data)} bytes, over {MAX_BODY_BYTES}")
    headers = {"Content-Type": "application/json", "User-Agent": "fleetspec-break-fix"}
    if hook.token is not None:
        try:
            token = resolve(SecretRef.parse("tickets.token", hook.token), base_dir).decode().strip()
        except SecretError as exc:
            raise TicketError(str(exc)) from None
        redactor.add(token)
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(hook.url, data=data, headers=headers, method="POST")
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=hook.timeout) as reply:
            reply.read(MAX_REPLY_BYTES)
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        raise TicketError(f"the ticket webhook answered {exc.code} {redactor(str(exc.reason))[:200]}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TicketError(f"the ticket webhook could not be reached: {redactor(str(reason))[:200]}") from None
