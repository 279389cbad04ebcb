"""Leafnode URLs and credentials: URL parsing (``user:pass@`` / ``token@``), ``.creds`` files,
and nkey nonce signatures, as nats-server expects them on a leaf CONNECT."""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from jetlog.errors import TransportError

_CREDS_RE = re.compile(rb"\s*(?:(?:-{3,}.*-{3,}\r?\n)([\w\-.=]+)(?:\r?\n-{3,}.*-{3,}(\r?\n|\Z)))")


@dataclass(slots=True)
class Endpoint:
    """One leafnode URL, parsed."""

    host: str
    port: int
    tls: bool
    user: str | None
    password: str | None
    token: str | None


def parse_url(url: str) -> Endpoint:
    """Parse ``nats-leaf://``, ``nats://`` or ``tls://`` URLs with optional credentials."""
    if "://" not in url:
        url = "nats-leaf://" + url
    u = urlsplit(url)
    scheme = u.scheme.lower()
    if scheme not in ("nats-leaf", "nats", "tls"):
        raise TransportError(f"unsupported leafnode URL scheme {scheme!r} in {url!r}")
    if not u.hostname:
        raise TransportError(f"no host in leafnode URL {url!r}")
    user = unquote(u.username) if u.username else None
    password = unquote(u.password) if u.password is not None else None
    token = None
    if user is not None and password is None:
        token, user = user, None  # "token@host", as nats clients read it
    return Endpoint(u.hostname, u.port or 7422, scheme == "tls", user, password, token)


def read_creds(path: str) -> tuple[str, bytes]:
    """(user JWT, nkey seed) from a ``.creds`` file (the same decorated blocks nsc writes)."""
    try:
        with open(path, "rb") as f:
            contents = f.read()
    except OSError as e:
        raise TransportError(f"cannot read credentials file {path}: {e}") from e
    items = _CREDS_RE.findall(contents)
    if len(items) < 2:
        raise TransportError(f"credentials file {path} is malformed")
    return items[0][0].decode(), items[1][0]


def nkey_public(seed: bytes) -> str:
    import nkeys

    kp = nkeys.from_seed(bytearray(seed))
    try:
        return str(kp.public_key.decode())
    finally:
        kp.wipe()


def sign(seed: bytes, nonce: str) -> str:
    import nkeys

    kp = nkeys.from_seed(bytearray(seed))
    try:
        # nats-server decodes base64.RawURLEncoding (StdEncoding as a fallback).
        return base64.urlsafe_b64encode(kp.sign(nonce.encode())).rstrip(b"=").decode()
    finally:
        kp.wipe()
