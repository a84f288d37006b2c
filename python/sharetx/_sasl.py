"""SASL PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802, RFC 7677) client exchanges, in pure Python
(hashlib, hmac), for the library's own connection to the sidecar."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from typing import Callable, Dict

__all__ = ["SaslError", "plain_initial", "Scram", "MECHANISMS"]

#: The mechanisms the library's own connection speaks (the sasl.mechanism values it accepts).
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class SaslError(Exception):
    """The server's SCRAM messages are malformed or do not prove it knows the password."""


def plain_initial(username: str, password: str) -> bytes:
    """PLAIN's one message: authzid (empty), authcid, password, NUL-separated."""
    return b"\0" + username.encode("utf-8") + b"\0" + password.encode("utf-8")


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


def _attrs(msg: str) -> Dict[str, str]:
    out: Dict[str, str] = {}
    for part in msg.split(","):
        if len(part) < 2 or part[1] != "=":
            raise SaslError("SCRAM: malformed attribute %r" % part[:20])
        out[part[0]] = part[2:]
    return out


class Scram:
    """One SCRAM exchange: first() -> server-first -> final(server_first) -> server-final -> verify()."""

    def __init__(self, mechanism: str, username: str, password: str, nonce: str = "") -> None:
        if mechanism == "SCRAM-SHA-256":
            self._hash: Callable[..., "hashlib._Hash"] = hashlib.sha256
            self._name = "sha256"
        elif mechanism == "SCRAM-SHA-512":
            self._hash = hashlib.sha512
            self._name = "sha512"
        else:
            raise ValueError("not a SCRAM mechanism: %s" % mechanism)
        self._user = username
        self._password = password.encode("utf-8")
        self._nonce = nonce or base64.b64encode(os.urandom(24)).decode("ascii")
        self._first_bare = "n=%s,r=%s" % (_saslname(username), self._nonce)
        self._server_signature = b""

    def first(self) -> bytes:
        return ("n,," + self._first_bare).encode("utf-8")

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def final(self, server_first: bytes) -> bytes:
        try:
            sf = server_first.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslError("SCRAM: server-first message is not UTF-8") from None
        a = _attrs(sf)
        if "e" in a:
            raise SaslError("SCRAM: the server refused: %s" % a["e"])
        nonce, salt_b64, iters = a.get("r", ""), a.get("s", ""), a.get("i", "")
        if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
            raise SaslError("SCRAM: the server's nonce does not extend the client's")
        try:
            salt = base64.b64decode(salt_b64, validate=True)
            iterations = int(iters)
        except (ValueError, TypeError):
            raise SaslError("SCRAM: bad salt or iteration count") from None
        if iterations < 4096 or iterations > 1_000_000:
            raise SaslError("SCRAM: iteration count %d out of range" % iterations)
        salted = hashlib.pbkdf2_hmac(self._name, self._password, salt, iterations)
        client_key = self._hmac(salted, b"Client Key")
        stored_key = self._hash(client_key).digest()
        without_proof = "c=biws,r=" + nonce
        auth_message = ",".join((self._first_bare, sf, without_proof)).encode("utf-8")
        signature = self._hmac(stored_key, auth_message)
        proof = bytes(x ^ y for x, y in zip(client_key, signature))
        self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
        return (without_proof + ",p=" + base64.b64encode(proof).decode("ascii")).encode("utf-8")

    def verify(self, server_final: bytes) -> None:
        try:
            a = _attrs(server_final.decode("utf-8"))
        except UnicodeDecodeError:
            raise SaslError("SCRAM: server-final message is not UTF-8") from None
        if "e" in a:
            raise SaslError("SCRAM: the server refused: %s" % a["e"])
        try:
            got = base64.b64decode(a.get("v", ""), validate=True)
        except ValueError:
            raise SaslError("SCRAM: malformed server signature") from None
        if not self._server_signature or not hmac.compare_digest(got, self._server_signature):
            raise SaslError("SCRAM: the server's signature does not verify")
