"""NATS credentials for tests: JWTs signed with nkeys (operator mode, a memory resolver),
``.creds`` files, and a private CA with server and client certificates (openssl CLI)."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import nkeys


def _b64(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


def jwt(claims: dict[str, Any], signer: nkeys.KeyPair) -> str:
    """A NATS JWT (ed25519-nkey), enough for a memory resolver."""
    import hashlib

    header = _b64(json.dumps({"typ": "JWT", "alg": "ed25519-nkey"}).encode())
    claims = dict(claims, iat=int(time.time()), jti="")
    raw = json.dumps(claims, separators=(",", ":")).encode()
    claims["jti"] = base64.b32encode(hashlib.sha256(raw).digest()).decode().rstrip("=")
    body = _b64(json.dumps(claims, separators=(",", ":")).encode())
    sig = _b64(signer.sign(f"{header}.{body}".encode()))
    return f"{header}.{body}.{sig}"


def keypair(prefix: int) -> tuple[bytes, nkeys.KeyPair, str]:
    seed = nkeys.encode_seed(os.urandom(32), prefix)
    kp = nkeys.from_seed(bytearray(seed))
    return seed, kp, kp.public_key.decode()


def operator_setup(tmp: Path) -> tuple[str, Path]:
    """nats-server config lines for operator mode with one account, and a ``.creds`` file of a
    user of that account with no limits."""
    _, okp, opub = keypair(nkeys.PREFIX_BYTE_OPERATOR)
    _, akp, apub = keypair(nkeys.PREFIX_BYTE_ACCOUNT)
    useed, _, upub = keypair(nkeys.PREFIX_BYTE_USER)
    op_jwt = jwt({"iss": opub, "sub": opub, "name": "op", "nats": {"type": "operator", "version": 2}}, okp)
    limits = {"subs": -1, "conn": -1, "leaf": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1}
    acc_claims = {"type": "account", "version": 2, "limits": {**limits, "wildcards": True}}
    acc_jwt = jwt({"iss": opub, "sub": apub, "name": "A", "nats": acc_claims}, okp)
    user_claims = {"type": "user", "version": 2, "pub": {}, "sub": {}, "subs": -1, "data": -1, "payload": -1}
    user_jwt = jwt({"iss": apub, "sub": upub, "name": "u", "nats": user_claims}, akp)
    creds = tmp / "u.creds"
    creds.write_text(
        "-----BEGIN NATS USER JWT-----\n"
        f"{user_jwt}\n"
        "------END NATS USER JWT------\n\n"
        "************************* IMPORTANT *************************\n\n"
        "-----BEGIN USER NKEY SEED-----\n"
        f"{useed.decode()}\n"
        "------END USER NKEY SEED------\n"
    )
    conf = f'operator: "{op_jwt}"\nresolver: MEMORY\nresolver_preload: {{ {apub}: "{acc_jwt}" }}\n'
    return conf, creds


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def private_ca(tmp: Path) -> dict[str, Path]:
    """A CA, a server certificate for 127.0.0.1/localhost and a client certificate, all signed
    by the CA: paths by name (ca, server_cert, server_key, client_cert, client_key)."""
    d = tmp
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
             "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"))  # fmt: skip
    out: dict[str, Path] = {"ca": d / "ca.pem"}
    for who, cn, ext in (
        ("server", "127.0.0.1", "subjectAltName=IP:127.0.0.1,DNS:localhost"),
        ("client", "jetlog", "extendedKeyUsage=clientAuth"),
    ):
        key, csr, crt, extf = d / f"{who}.key", d / f"{who}.csr", d / f"{who}.pem", d / f"{who}.ext"
        extf.write_text(ext + "\n")
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={cn}",
            "-keyout",
            str(key),
            "-out",
            str(csr),
        )
        _openssl("x509", "-req", "-in", str(csr), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
                 "-CAcreateserial", "-days", "1", "-extfile", str(extf), "-out", str(crt))  # fmt: skip
        out[f"{who}_cert"], out[f"{who}_key"] = crt, key
    return out
