"""The library's own connection to the sidecar's listeners, one request at a time. confluent-kafka's
producer cannot send an API key librdkafka does not know, so TxnShareAcknowledge (and the
ApiVersions, SASL and Metadata requests around it) go here, on a socket of the library's own.

Its security settings are read from the producer's own confluent-kafka configuration dict
(security.protocol, sasl.*, ssl.*), so that it reaches the sidecar as the producer does:
PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL with PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512. A setting it
cannot honour is refused with a ValueError naming the key, never ignored."""

from __future__ import annotations

import logging
import socket
import ssl
import struct
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from confluent_kafka import KafkaError, KafkaException

from . import _protocol as P
from ._errors import kafka_exception
from ._sasl import MECHANISMS, SaslError, Scram, plain_initial
from ._wire import MalformedResponse, Reader

log = logging.getLogger("sharetx")

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

# ssl.* and sasl.* settings the library's connection cannot honour: named in the error when set.
_UNSUPPORTED_SSL = ("ssl.keystore.location", "ssl.keystore.password", "ssl.certificate.pem", "ssl.key.pem",
                    "ssl_key", "ssl_certificate", "ssl.crl.location", "ssl.engine.location", "ssl.engine.id",
                    "ssl_engine_callback_data", "ssl.providers", "ssl.ca.certificate.stores", "ssl.curves.list",
                    "ssl.sigalgs.list", "ssl.certificate.verify_cb")
_UNSUPPORTED_SASL = ("sasl.oauthbearer.config", "sasl.oauthbearer.method", "sasl.oauthbearer.client.id",
                     "sasl.oauthbearer.client.secret", "sasl.oauthbearer.token.endpoint.url", "oauth_cb",
                     "sasl.kerberos.keytab", "sasl.kerberos.principal")

#: The library's own settings, taken out of the configuration before confluent-kafka sees it.
API_KEY_CONFIG = "sharetx.api.key"
SHADOW_TOPIC_CONFIG = "sharetx.shadow.topic"
DEFAULT_SHADOW_TOPIC = "__sharetx_shadow"


def _bool(key: str, v: Any) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError("%s=%r: not a boolean" % (key, v))


def _int(key: str, v: Any) -> int:
    try:
        return int(str(v).strip())
    except ValueError:
        raise ValueError("%s=%r: not an integer" % (key, v)) from None


@dataclass
class Settings:
    """What the library's connection takes from a confluent-kafka configuration dict."""

    bootstrap: List[str]
    client_id: str
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: Optional[str] = None
    sasl_username: str = ""
    sasl_password: str = ""
    ssl_context: Optional[ssl.SSLContext] = None
    ssl_check_hostname: bool = True
    request_timeout_s: float = 60.0
    connect_timeout_s: float = 30.0
    retry_backoff_s: float = 0.1
    api_key: int = P.DEFAULT_TXN_SHARE_ACKNOWLEDGE_KEY
    shadow_topic: str = DEFAULT_SHADOW_TOPIC
    transactional_id: Optional[str] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, config: Mapping[str, Any]) -> Tuple["Settings", Dict[str, Any]]:
        """The settings, and the configuration for confluent-kafka (without the sharetx.* keys)."""
        if not isinstance(config, Mapping):
            raise TypeError("the configuration must be a dict, as confluent-kafka's")
        conf = dict(config)
        api_key = conf.pop(API_KEY_CONFIG, None)
        shadow = conf.pop(SHADOW_TOPIC_CONFIG, None)
        for k in list(conf):
            if k.startswith("sharetx."):
                raise ValueError("unknown setting %s (the library's own settings: %s, %s)" % (k, API_KEY_CONFIG,
                                                                                           SHADOW_TOPIC_CONFIG))
        bs = conf.get("bootstrap.servers", conf.get("metadata.broker.list"))
        if not bs or not str(bs).strip():
            raise ValueError("bootstrap.servers is not set: it must name the sharetx sidecar")
        bootstrap = [b.strip() for b in str(bs).split(",") if b.strip()]
        for b in bootstrap:
            P.split_host_port(b)  # raises, naming bootstrap.servers
        txn = conf.get("transactional.id")
        s = cls(bootstrap=bootstrap,
                client_id=str(conf.get("client.id") or ("sharetx-" + str(txn) if txn else "sharetx")),
                transactional_id=str(txn) if txn else None)
        if api_key is not None:
            s.api_key = _int(API_KEY_CONFIG, api_key)
            if not 0 <= s.api_key <= 32767:
                raise ValueError("%s=%r: out of range" % (API_KEY_CONFIG, api_key))
        if shadow is not None and str(shadow).strip():
            s.shadow_topic = str(shadow).strip()
        if "socket.timeout.ms" in conf:
            s.request_timeout_s = _int("socket.timeout.ms", conf["socket.timeout.ms"]) / 1000.0
        if "socket.connection.setup.timeout.ms" in conf:
            s.connect_timeout_s = _int("socket.connection.setup.timeout.ms",
                                       conf["socket.connection.setup.timeout.ms"]) / 1000.0
        if "retry.backoff.ms" in conf:
            s.retry_backoff_s = _int("retry.backoff.ms", conf["retry.backoff.ms"]) / 1000.0
        proto = str(conf.get("security.protocol", "plaintext")).strip().upper()
        if proto not in _PROTOCOLS:
            raise ValueError("security.protocol=%s: not one of %s" % (conf.get("security.protocol"), ", ".join(_PROTOCOLS)))
        s.security_protocol = proto
        if proto.startswith("SASL"):
            s._sasl(conf)
        if proto in ("SSL", "SASL_SSL"):
            s._ssl(conf)
        return s, conf

    def _sasl(self, conf: Dict[str, Any]) -> None:
        mech = conf.get("sasl.mechanism", conf.get("sasl.mechanisms"))
        key = "sasl.mechanism" if "sasl.mechanism" in conf else "sasl.mechanisms"
        if mech is None:
            raise ValueError("security.protocol=%s needs sasl.mechanism (librdkafka's default, GSSAPI, is not supported "
                             "by the sharetx library's own connection: use one of %s)" % (self.security_protocol,
                                                                                       ", ".join(MECHANISMS)))
        mech = str(mech).strip().upper()
        if mech not in MECHANISMS:
            raise ValueError("%s=%s is not supported by the sharetx library's own connection to the sidecar "
                             "(supported: %s)" % (key, mech, ", ".join(MECHANISMS)))
        for k in _UNSUPPORTED_SASL:
            if k in conf:
                raise ValueError("%s is not supported by the sharetx library's own connection to the sidecar" % k)
        user, pw = conf.get("sasl.username"), conf.get("sasl.password")
        if user is None or pw is None:
            raise ValueError("sasl.mechanism=%s needs sasl.username and sasl.password" % mech)
        self.sasl_mechanism, self.sasl_username, self.sasl_password = mech, str(user), str(pw)

    def _ssl(self, conf: Dict[str, Any]) -> None:
        for k in _UNSUPPORTED_SSL:
            if k in conf:
                raise ValueError("%s is not supported by the sharetx library's own connection to the sidecar "
                                 "(supported: ssl.ca.location, ssl.ca.pem, ssl.certificate.location, ssl.key.location, "
                                 "ssl.key.password, ssl.cipher.suites, ssl.endpoint.identification.algorithm, "
                                 "enable.ssl.certificate.verification)" % k)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        verify = _bool("enable.ssl.certificate.verification", conf.get("enable.ssl.certificate.verification", True))
        ca = conf.get("ssl.ca.location")
        ca_pem = conf.get("ssl.ca.pem")
        if ca and str(ca).strip().lower() != "probe":
            try:
                ctx.load_verify_locations(cafile=str(ca))
            except (OSError, ssl.SSLError) as e:
                raise ValueError("ssl.ca.location=%s: %s" % (ca, e)) from None
        elif ca_pem:
            try:
                ctx.load_verify_locations(cadata=str(ca_pem))
            except (OSError, ssl.SSLError) as e:
                raise ValueError("ssl.ca.pem: %s" % e) from None
        else:
            ctx.load_default_certs()
        cert, keyf = conf.get("ssl.certificate.location"), conf.get("ssl.key.location")
        if cert or keyf:
            if not (cert and keyf):
                raise ValueError("ssl.certificate.location and ssl.key.location go together")
            try:
                ctx.load_cert_chain(str(cert), str(keyf), password=conf.get("ssl.key.password"))
            except (OSError, ssl.SSLError) as e:
                raise ValueError("ssl.certificate.location/ssl.key.location: %s" % e) from None
        if conf.get("ssl.cipher.suites"):
            try:
                ctx.set_ciphers(str(conf["ssl.cipher.suites"]))
            except ssl.SSLError as e:
                raise ValueError("ssl.cipher.suites: %s" % e) from None
        alg = str(conf.get("ssl.endpoint.identification.algorithm", "https")).strip().lower()
        if alg not in ("https", "none"):
            raise ValueError("ssl.endpoint.identification.algorithm=%s: not https or none" % alg)
        self.ssl_check_hostname = verify and alg == "https"
        ctx.check_hostname = self.ssl_check_hostname
        ctx.verify_mode = ssl.CERT_REQUIRED if verify else ssl.CERT_NONE
        self.ssl_context = ctx


class Deadline:
    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + max(0.0, seconds)

    def left(self) -> float:
        return self.at - time.monotonic()

    def passed(self) -> bool:
        return self.left() <= 0


class SidecarTimeout(Exception):
    """The deadline passed before the sidecar answered."""


class AuthenticationFailed(Exception):
    """The TLS handshake or the SASL exchange failed: retrying will not help."""


class NotASidecar(Exception):
    """The address answers ApiVersions without TxnShareAcknowledge: a broker, not the sidecar."""


class _Conn:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.correlation = 1


class SidecarClient:
    """Connections to the sidecar's listeners, one request at a time each (not thread safe: the
    producer serializes its calls)."""

    def __init__(self, settings: Settings) -> None:
        self.s = settings
        self._conns: Dict[str, _Conn] = {}
        self._next = 0

    def any_bootstrap(self) -> str:
        a = self.s.bootstrap[self._next % len(self.s.bootstrap)]
        self._next += 1
        return a

    def probe(self, address: str, deadline: Deadline) -> None:
        """Opens (or reuses) the connection: ApiVersions says whether it serves the key."""
        self._conn(address, deadline)

    def request(self, address: str, key: int, version: int, flexible: bool, body: bytes, deadline: Deadline) -> bytes:
        """Sends one request and returns the response body (after its header). Any failure closes
        the connection (a later call opens a new one)."""
        c = self._conn(address, deadline)
        try:
            return self._round_trip(c, address, key, version, flexible, body, deadline)
        except BaseException:
            self.close_address(address)
            raise

    def _conn(self, address: str, deadline: Deadline) -> _Conn:
        c = self._conns.get(address)
        if c is not None:
            return c
        host, port = P.split_host_port(address)
        timeout = min(deadline.left(), self.s.connect_timeout_s)
        if timeout <= 0:
            raise SidecarTimeout("deadline passed before connecting to %s" % address)
        try:
            raw = socket.create_connection((host, port), timeout=timeout)
        except socket.timeout:
            raise SidecarTimeout("connecting to %s timed out" % address) from None
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock: socket.socket = raw
        try:
            if self.s.ssl_context is not None:
                raw.settimeout(max(0.001, min(deadline.left(), self.s.connect_timeout_s)))
                try:
                    sock = self.s.ssl_context.wrap_socket(raw, server_hostname=host)
                except ssl.SSLCertVerificationError as e:
                    raise AuthenticationFailed("TLS handshake with %s failed: %s" % (address, e)) from None
                except ssl.SSLError as e:
                    raise AuthenticationFailed("TLS handshake with %s failed: %s" % (address, e)) from None
            c = _Conn(sock)
            if self.s.sasl_mechanism:
                self._authenticate(c, address, deadline)
            # ApiVersions, as the Kafka clients send it: it tells whether a sidecar serves the key.
            b = self._round_trip(c, address, P.API_VERSIONS, 0, False, b"", deadline)
            err, keys = P.parse_api_versions_v0(b)
            if err:
                raise kafka_exception(err, "sharetx: ApiVersions from %s failed with error code %d" % (address, err),
                                      retriable=True)
            rng = keys.get(self.s.api_key)
            if rng is None or rng[0] > 0 or rng[1] < 0:
                raise NotASidecar("%s does not serve TxnShareAcknowledge (API key %d version 0): the producer must "
                                  "connect through the sharetx sidecar, with the same kip1289.api_key"
                                  % (address, self.s.api_key))
        except BaseException:
            try:
                sock.close()
            except OSError:
                pass
            raise
        self._conns[address] = c
        log.info("sharetx: connected to the sidecar at %s (%s, TxnShareAcknowledge on API key %d)", address,
                 self.s.security_protocol, self.s.api_key)
        return c

    def _authenticate(self, c: _Conn, address: str, deadline: Deadline) -> None:
        mech = self.s.sasl_mechanism or ""
        b = self._round_trip(c, address, P.SASL_HANDSHAKE, 1, False, P.sasl_handshake_v1(mech), deadline)
        err, mechs = P.parse_sasl_handshake_v1(b)
        if err:
            raise AuthenticationFailed("SASL handshake with %s: mechanism %s refused (error code %d; the server enables %s)"
                                       % (address, mech, err, ", ".join(mechs) or "none"))

        def step(data: bytes) -> bytes:
            body = self._round_trip(c, address, P.SASL_AUTHENTICATE, 1, False, P.sasl_authenticate_v1(data), deadline)
            code, msg, out = P.parse_sasl_authenticate_v1(body)
            if code:
                raise AuthenticationFailed("SASL %s authentication with %s failed (error code %d): %s"
                                           % (mech, address, code, msg or ""))
            return out

        if mech == "PLAIN":
            step(plain_initial(self.s.sasl_username, self.s.sasl_password))
            return
        scram = Scram(mech, self.s.sasl_username, self.s.sasl_password)
        try:
            server_first = step(scram.first())
            server_final = step(scram.final(server_first))
            scram.verify(server_final)
        except SaslError as e:
            raise AuthenticationFailed("SASL %s authentication with %s failed: %s" % (mech, address, e)) from None

    def _round_trip(self, c: _Conn, address: str, key: int, version: int, flexible: bool, body: bytes,
                    deadline: Deadline) -> bytes:
        corr = c.correlation
        c.correlation += 1
        f = P.frame(key, version, corr, self.s.client_id, flexible, body)
        self._send(c, address, struct.pack(">i", len(f)) + f, deadline)
        size = struct.unpack(">i", self._recv(c, address, 4, deadline))[0]
        if size < 4 or size > 64 * 1024 * 1024:
            raise MalformedResponse("response size %d from %s" % (size, address))
        payload = self._recv(c, address, size, deadline)
        r = Reader(payload)
        got = r.int32()
        if got != corr:
            raise MalformedResponse("correlation id %d from %s, want %d" % (got, address, corr))
        # Response header v1 (flexible) has a tag section; ApiVersions' response header is always v0.
        if flexible and key != P.API_VERSIONS:
            r.skip_tags()
        return payload[len(payload) - r.remaining():]

    def _timeout(self, deadline: Deadline, address: str, what: str) -> float:
        left = min(deadline.left(), self.s.request_timeout_s)
        if left <= 0:
            raise SidecarTimeout("%s %s: deadline passed (the call's timeout or socket.timeout.ms)" % (what, address))
        return left

    def _send(self, c: _Conn, address: str, data: bytes, deadline: Deadline) -> None:
        c.sock.settimeout(self._timeout(deadline, address, "writing to"))
        try:
            c.sock.sendall(data)
        except socket.timeout:
            raise SidecarTimeout("writing to %s timed out" % address) from None

    def _recv(self, c: _Conn, address: str, n: int, deadline: Deadline) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            c.sock.settimeout(min(self._timeout(deadline, address, "waiting for an answer from"), 1.0))
            try:
                chunk = c.sock.recv(n - len(buf))
            except socket.timeout:
                continue  # the loop checks the deadline
            if not chunk:
                raise ConnectionError("%s closed the connection" % address)
            buf += chunk
        return bytes(buf)

    def close_address(self, address: str) -> None:
        c = self._conns.pop(address, None)
        if c is not None:
            try:
                c.sock.close()
            except OSError:
                pass

    def close(self) -> None:
        for a in list(self._conns):
            self.close_address(a)


def unsupported_version(msg: str) -> KafkaException:
    return kafka_exception(KafkaError.UNSUPPORTED_VERSION, "sharetx: " + msg, fatal=True)
