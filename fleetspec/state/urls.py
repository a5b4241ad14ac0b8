"""State database URLs in messages: never with a password.

A libpq URL carries a password in two places: the userinfo (``user:PASSWORD@host``) and
the query parameters ``password`` and ``sslpassword`` (the passphrase of the client key),
https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS. Both are
redacted. The URL is taken apart by hand, not with ``urlsplit``, so a URL ``urlsplit``
refuses (``postgresql://host[::1``) is redacted all the same.
"""

from __future__ import annotations

import re
from urllib.parse import unquote

MASK = "***"
# libpq's parameter keywords are case-sensitive; any case is masked, to be safe.
_SECRET_PARAM = re.compile(r"(?i)([?&](?:ssl)?password=)([^&#]*)")


def _split(url: str) -> tuple[str, str, str] | None:
    """(``scheme://``, netloc, the rest) or None when there is no ``://``."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return None
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    return scheme + sep, rest[:end], rest[end:]


def redact_url(url: str) -> str:
    """The URL with every password replaced by ``***`` (for messages and logs)."""
    parts = _split(url)
    if parts is None:
        return _SECRET_PARAM.sub(lambda m: m.group(1) + MASK, url)
    head, netloc, rest = parts
    userinfo, at, host = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}"
    return head + netloc + _SECRET_PARAM.sub(lambda m: m.group(1) + MASK, rest)


def url_secrets(url: str) -> list[str]:
    """The passwords the URL carries, as written and decoded (to scrub a driver's message)."""
    found = []
    parts = _split(url)
    if parts is not None:
        userinfo, at, _ = parts[1].rpartition("@")
        if at and ":" in userinfo:
            found.append(userinfo.split(":", 1)[1])
    found += [m.group(2) for m in _SECRET_PARAM.finditer(url)]
    return [s for v in found if v for s in {v, unquote(v)}]


def redact_message(message: str, url: str) -> str:
    """``message`` (a driver's error about ``url``) with the URL's passwords masked."""
    for secret in sorted(url_secrets(url), key=len, reverse=True):
        message = message.replace(secret, MASK)
    return redact_url(message) if "://" in message else message
