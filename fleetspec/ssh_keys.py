"""One OpenSSH public key line, checked before it becomes a node's trust anchor (#30 item 2).

The bundle signing key's public half goes into every Slurm node's allowed_signers file
(``ssh-keygen -Y verify -f``): whatever passes here is what a node believes. So the line is
refused unless it is exactly ``TYPE BASE64 [COMMENT]``: a type from a reasoned list, the
base64 blob well formed and naming that same type inside it, the key the size that type
has, and a plain comment. No options (``cert-authority``, ``namespaces=``,
``valid-before=``: fleetspec writes the namespace itself), no second line, and never a
private key. The key formats are RFC 8709 (ssh-ed25519: a 32-byte key) and RFC 5656
(ecdsa-sha2-nistp*: the curve's identifier, then an uncompressed point, 0x04 || X || Y).
"""

from __future__ import annotations

import base64
import binascii
import re

# Types OpenSSH's ssh-keygen -Y signs and verifies with (ssh-keygen(1), "-Y sign"). RSA is
# left out: its strength depends on a modulus size a spec reviewer cannot see; ed25519 is
# what `ssh-keygen -t ed25519` makes.
# type -> (curve identifier inside the blob or None, key bytes)
KEY_TYPES: dict[str, tuple[str | None, int]] = {
    "ssh-ed25519": (None, 32),
    "ecdsa-sha2-nistp256": ("nistp256", 65),
    "ecdsa-sha2-nistp384": ("nistp384", 97),
    "ecdsa-sha2-nistp521": ("nistp521", 133),
}
_COMMENT = re.compile(r"^[A-Za-z0-9._@+=:-]{1,64}$")
_MAX_LINE = 512


def public_key_problem(line: str) -> str | None:
    """None when ``line`` is one acceptable OpenSSH public key, else what is wrong and what to do."""
    if "PRIVATE KEY" in line:
        return ("this is a private key: give only the public line (the .pub file, 'ssh-ed25519 AAAA...'); the "
                "private half stays with apply's --bundle-key")
    if "\n" in line or "\r" in line:
        return "give one line: the public key as ssh-keygen writes it to the .pub file"
    fields = line.split(" ")
    if len(fields) not in (2, 3) or "" in fields:
        return ("expected 'TYPE BASE64 [COMMENT]' separated by single spaces, with no options before the type "
                "(fleetspec writes the allowed_signers options itself)")
    kind, blob_text = fields[0], fields[1]
    if kind not in KEY_TYPES:
        return f"key type '{kind}' is not accepted: use one of {', '.join(KEY_TYPES)} (ssh-keygen -t ed25519)"
    if len(line) > _MAX_LINE:
        return f"the line is longer than {_MAX_LINE} characters: give only the .pub line"
    try:
        blob = base64.b64decode(blob_text, validate=True)
    except (binascii.Error, ValueError):
        return "the key's base64 part does not decode: copy the line from the .pub file unchanged"
    problem = _blob_problem(kind, blob)
    if problem:
        return problem
    if len(fields) == 3 and not _COMMENT.match(fields[2]):
        return "the comment may hold only letters, digits and ._@+=:- (at most 64); or leave it out"
    return None


def _blob_problem(kind: str, blob: bytes) -> str | None:
    parts: list[bytes] = []
    rest = blob
    while rest:
        if len(rest) < 4:
            return "the key's base64 part is truncated: copy the line from the .pub file unchanged"
        size = int.from_bytes(rest[:4], "big")
        if size > len(rest) - 4:
            return "the key's base64 part is truncated: copy the line from the .pub file unchanged"
        parts.append(rest[4:4 + size])
        rest = rest[4 + size:]
    curve, key_bytes = KEY_TYPES[kind]
    expected = 3 if curve else 2
    if not parts or parts[0] != kind.encode():
        named = parts[0].decode("ascii", "replace") if parts else "nothing"
        return f"the key says '{kind}' but its base64 part holds a '{named}' key: copy the .pub line unchanged"
    if len(parts) != expected:
        return f"not a {kind} public key (wrong number of fields): copy the .pub line unchanged"
    if curve is not None and parts[1] != curve.encode():
        return f"not a {kind} public key (curve '{parts[1].decode('ascii', 'replace')}'): copy the .pub line unchanged"
    key = parts[-1]
    if len(key) != key_bytes or (curve is not None and key[0] != 4):
        return f"not a {kind} public key (a {len(key)}-byte key): copy the .pub line unchanged"
    return None
