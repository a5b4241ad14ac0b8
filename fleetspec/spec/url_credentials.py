"""Credentials carried in a URL's query (#41 item 8): which parameter names hold one.

A webhook or image URL written into the spec lands in fleet.json, the state and saved
plans, so a credential in its query must be refused and its source line never echoed. A
parameter named like a secret (token, password, api_key: `SECRET_NAME`) is one; so are
these, whose names do not say so, each from the service that defines it:
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import parse_qsl, unquote, urlsplit

URL_CREDENTIAL_PARAMETERS = {
    # Azure Storage shared access signature: "sig", the signature that grants the access
    # (learn.microsoft.com/training/modules/configure-storage-security/4-identify-uri-sas-parameters).
    "sig": "an Azure shared access signature",
    # Azure Functions HTTP trigger: the function key as "?code=<API_KEY>"
    # (learn.microsoft.com/azure/azure-functions/functions-bindings-http-webhook-trigger, "API key authorization").
    "code": "an Azure Functions key",
    # AWS Signature Version 4 presigned URLs: the access key id and the signature
    # (docs.aws.amazon.com/AmazonS3/latest/API/sigv4-query-string-auth.html).
    "x-amz-credential": "an AWS access key",
    "x-amz-signature": "an AWS presigned signature",
    # Google Cloud Storage V4 signed URLs, the same two
    # (cloud.google.com/storage/docs/access-control/signing-urls-with-helpers).
    "x-goog-credential": "a Google service account credential",
    "x-goog-signature": "a Google signed-URL signature",
}
# A query parameter's name in a line of text: after '?' or '&', before '='.
_PARAMETER = re.compile(r"[?&]([^=&#\s\"']{1,128})=")


def credential_name(name: str, secret_name: Callable[[str], bool]) -> str | None:
    """``name`` (a query parameter) in words when it carries a credential, else None."""
    plain = unquote(name)
    if plain.lower() in URL_CREDENTIAL_PARAMETERS:
        return f"'{plain}': {URL_CREDENTIAL_PARAMETERS[plain.lower()]}"
    return f"'{plain}'" if secret_name(plain) else None


def query_credential(url: str, secret_name: Callable[[str], bool]) -> str | None:
    """The first query parameter of ``url`` that carries a credential, in words (never its value)."""
    query = urlsplit(url).query
    for name in [pair.partition("=")[0] for pair in query.split("&")] + [k for k, _ in parse_qsl(query, True)]:
        said = credential_name(name, secret_name)
        if said:
            return said
    return None


def line_holds_credential(text: str, secret_name: Callable[[str], bool]) -> bool:
    """Whether a source line holds a URL query parameter that carries a credential."""
    return "=" in text and any(credential_name(m.group(1), secret_name) for m in _PARAMETER.finditer(text))
