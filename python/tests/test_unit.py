"""The library's bytes and values against the Go side's and the Java library's (kip1289/kip1289.go,
kip1289/partition.go, java WireFormatTest), the SCRAM exchange against RFC 7677, the configuration
checks, and the decoders against random input. No Kafka, no sidecar."""

from __future__ import annotations

import random
import socket
import threading
import uuid

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, Message

import sharetx
from sharetx import _protocol as P
from sharetx._errors import error_for
from sharetx._sasl import Scram, plain_initial
from sharetx._sidecar import Settings
from sharetx._touch import shadow_partition, touch_partition
from sharetx._wire import MalformedResponse, Reader

# The Go codec's encoding of the same request and response (kip1289.TxnShareAcknowledgeRequest.AppendTo,
# kip1289.Batches), as the Java library's WireFormatTest holds them.
GO_REQUEST = ("0674786e2d310867726f75702d61ffffffffffffffffffff01ffffffff030102030405060708090a0b0c0d0e0f10"
              "0300000000030000000000000005000000000000000702010000000000000000090000000000000009020300000000000302000000000000000a"
              "000000000000000c04010300000000abababababababababababababababab02000000010200000000000f424000000000000f4240020300000000")
GO_RESPONSE = ("000000000071020102030405060708090a0b0c0d0e0f10030000000000713a736861726574783a20746865206d656d"
               "6265722065706f6368206973206e6f7420746865206d656d62657227732063757272656e74206f6e650000000003007100000000")

ID1 = uuid.UUID(bytes=bytes(range(1, 17)))
ID2 = uuid.UUID(bytes=b"\xab" * 16)


def _acks(offsets):
    b = sharetx.ShareAcknowledgements.builder()
    for tip, off, t in offsets:
        if t == 0:
            b.add_gap(tip, off)
        else:
            b.add_offset(tip, off, AcknowledgeType(t))
    return b.build()


def _go_request_parts():
    """GO_REQUEST's partitions and acknowledgements."""
    p0 = sharetx.TopicIdPartition(None, 0, ID1)
    p3 = sharetx.TopicIdPartition(None, 3, ID1)
    q1 = sharetx.TopicIdPartition(None, 1, ID2)
    acks = _acks([(p0, 5, 1), (p0, 6, 1), (p0, 7, 1), (p0, 9, 3), (p3, 10, 1), (p3, 11, 3), (p3, 12, 0),
                  (q1, 1000000, 3)])
    parts = [P.AckPartition(tip.topic_id, tip.partition, [(b.first_offset, b.last_offset, b.acknowledge_types)
                                                           for b in bs]) for tip, bs in acks.items()]
    return parts


def test_request_bytes_are_the_go_codecs():
    parts = _go_request_parts()
    got = P.txn_share_acknowledge("txn-1", "group-a", -1, -1, "", -1, parts)
    assert got.hex() == GO_REQUEST


def test_output_record_bytes_are_the_go_codecs():
    """The OutputRecord extension (tag 10002: topic id, name, partition, offset), alone and after
    TouchOffset, as kip1289.TxnShareAcknowledgeRequest.AppendTo encodes it."""
    parts = _go_request_parts()
    base = GO_REQUEST[:-2]  # the reference layout ends with no tagged fields (00)
    got = P.txn_share_acknowledge("txn-1", "group-a", -1, -1, "", -1, parts, None,
                                  P.OutputRef("results", ID2, 2, 4242))
    assert got.hex() == base + "01924e24" + "ab" * 16 + "08726573756c7473" + "00000002" + "0000000000001092"
    got = P.txn_share_acknowledge("txn-1", "group-a", -1, -1, "", -1, parts, 7,
                                  P.OutputRef("results", None, 2, 4242))
    assert got.hex() == (base + "02914e080000000000000007924e24" + "00" * 16 + "08726573756c7473" + "00000002"
                         + "0000000000001092")


def test_defer_bytes_are_the_go_codecs():
    """The Defer extension (tag 10003, one byte 1), alone and last after OutputRecord, as
    kip1289.TxnShareAcknowledgeRequest.AppendTo encodes it."""
    parts = _go_request_parts()
    base = GO_REQUEST[:-2]
    got = P.txn_share_acknowledge("txn-1", "group-a", -1, -1, "", -1, parts, None, None, True)
    assert got.hex() == base + "01" + "934e0101"
    got = P.txn_share_acknowledge("txn-1", "group-a", -1, -1, "", -1, parts, None,
                                  P.OutputRef("results", ID2, 2, 4242), True)
    assert got.hex() == (base + "02924e24" + "ab" * 16 + "08726573756c7473" + "00000002" + "0000000000001092"
                         + "934e0101")


def test_deferred_calls_merge_per_partition_in_call_order():
    """What the staging call sends for the calls a transaction deferred: each partition's batches of
    every call, in the order the calls came."""
    from sharetx._producer import _merged
    p0 = sharetx.TopicIdPartition(None, 0, ID1)
    p1 = sharetx.TopicIdPartition(None, 1, ID1)
    first = _acks([(p0, 5, 1), (p0, 6, 1), (p1, 3, 3)])
    second = _acks([(p0, 7, 1), (p0, 9, 1)])
    m = _merged([first, second])
    assert [(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in m[p0]] == [
        (5, 6, (1,)), (7, 7, (1,)), (9, 9, (1,))]
    assert [(b.first_offset, b.last_offset, tuple(b.acknowledge_types)) for b in m[p1]] == [(3, 3, (3,))]
    assert m.offset_count() == 5


def test_response_decodes_as_the_reference_client_reads_it():
    r = P.parse_txn_share_acknowledge(bytes.fromhex(GO_RESPONSE))
    assert r.effective_code() == 113
    assert len(r.partitions) == 2
    assert r.message() == "sharetx: the member epoch is not the member's current one"
    with pytest.raises(MalformedResponse):
        P.parse_txn_share_acknowledge(bytes.fromhex(GO_RESPONSE[:-4]))
    with pytest.raises(MalformedResponse):
        P.parse_txn_share_acknowledge(bytes.fromhex(GO_RESPONSE) + b"\0")


def test_request_header_v2():
    assert P.frame(95, 0, 7, "c", True, b"\x2a").hex() == "005f000000000007000163002a"
    assert P.frame(18, 0, 1, None, False, b"").hex() == "0012000000000001ffff"


def test_shadow_and_touch_partitions_are_the_go_ones():
    cases = [("", 3, 1, 2), ("orders-worker-1", 8, 7, 0), ("txn-a", 2, 1, 0), ("txn-a", 5, 3, 4), ("é-ü", 7, 3, 4),
             ("txn-a", 1, 0, 0), ("txn-a", 0, 0, 0)]
    for tid, n, shadow, touch in cases:
        assert shadow_partition(tid, n) == shadow, (tid, n)
        assert touch_partition(tid, n) == touch, (tid, n)
    assert shadow_partition("a", 1000) == 0xE40C292C % 1000


def test_error_classes_follow_the_reference_client():
    cases = {
        14: "retriable", 15: "retriable", 6: "retriable", 100: "retriable", 51: "retriable",
        30: "abortable", 120: "abortable", 121: "abortable", 42: "abortable", 25: "abortable", 69: "abortable",
        113: "abortable",
        90: "fatal", 47: "fatal", 53: "fatal", 35: "fatal", 49: "fatal", 55: "fatal", -1: "fatal", 9999: "fatal",
    }
    for code, want in cases.items():
        e = error_for(code, "m")
        assert isinstance(e, KafkaException)
        err = e.args[0]
        assert isinstance(err, KafkaError)
        assert err.code() == code
        got = "retriable" if err.retriable() else "abortable" if err.txn_requires_abort() else "fatal" if err.fatal() else "?"
        assert got == want, (code, got)
        assert sharetx.is_fatal(e) == (want == "fatal")
        assert sharetx.is_abortable(e) == (want == "abortable")
        assert sharetx.is_retriable(e) == (want == "retriable")


def test_batches_validate_as_the_reference():
    with pytest.raises(ValueError):
        sharetx.ShareAcknowledgementBatch(2, 1, (1,))
    with pytest.raises(ValueError):
        sharetx.ShareAcknowledgementBatch(1, 2, ())
    with pytest.raises(ValueError):
        sharetx.ShareAcknowledgementBatch(1, 3, (1, 3))
    with pytest.raises(ValueError):
        sharetx.ShareAcknowledgementBatch(1, 1, (2,))  # RELEASE is not transactional


def test_from_messages_coalesces_contiguous_offsets():
    msgs = [Message(topic="in", partition=2, offset=o, value=b"v") for o in (4, 5, 6, 9)]
    msgs.append(Message(topic="in", partition=0, offset=1, value=b"v"))
    acks = sharetx.ShareAcknowledgements.from_messages(msgs, AcknowledgeType.REJECT)
    p2 = sharetx.TopicIdPartition("in", 2)
    assert acks[p2] == (sharetx.ShareAcknowledgementBatch(4, 6, (3,)), sharetx.ShareAcknowledgementBatch(9, 9, (3,)))
    assert acks.offset_count() == 5
    with pytest.raises(ValueError):
        sharetx.ShareAcknowledgements.from_messages(msgs, AcknowledgeType.RELEASE)
    mixed = (sharetx.ShareAcknowledgements.builder().add(msgs[0], AcknowledgeType.ACCEPT)
             .add(msgs[1], AcknowledgeType.REJECT).add_gap(p2, 6).build())
    assert mixed[p2] == (sharetx.ShareAcknowledgementBatch(4, 6, (1, 3, 0)),)
    assert sharetx.ShareAcknowledgements.empty().is_empty()
    errored = Message(topic="in", partition=0, offset=1, error=KafkaError(KafkaError._PARTITION_EOF))
    with pytest.raises(ValueError):
        sharetx.ShareAcknowledgements.from_messages([errored], AcknowledgeType.ACCEPT)


def test_from_messages_equals_the_builder():
    # from_messages has its own one-pass loop (it runs over every polled message of every
    # transaction): the same acknowledgements as the builder, in the same partition order.
    rnd = random.Random(7)
    for _ in range(500):
        msgs = [Message(topic=rnd.choice(("a", "b")), partition=rnd.randint(0, 2), offset=rnd.randint(0, 40), value=b"v")
                for _ in range(rnd.randint(0, 50))]
        for t in (AcknowledgeType.ACCEPT, AcknowledgeType.REJECT):
            b = sharetx.ShareAcknowledgements.builder()
            for m in msgs:
                b.add(m, t)
            want, got = b.build(), sharetx.ShareAcknowledgements.from_messages(msgs, t)
            assert got == want and list(got) == list(want)
    with pytest.raises(ValueError, match="no topic, partition or offset"):
        sharetx.ShareAcknowledgements.from_messages([Message(topic="a", partition=0, offset=-1, value=b"v")])


def test_acknowledgements_are_immutable_copies():
    tip = sharetx.TopicIdPartition("t", 0, uuid.uuid4())
    batches = [sharetx.ShareAcknowledgementBatch(1, 2, (1,))]
    m = {tip: batches}
    acks = sharetx.ShareAcknowledgements(m)
    batches.append(sharetx.ShareAcknowledgementBatch(3, 3, (3,)))
    m.clear()
    assert acks[tip] == (sharetx.ShareAcknowledgementBatch(1, 2, (1,)),)
    with pytest.raises(TypeError):
        acks[tip] = ()  # type: ignore[index]
    assert acks == sharetx.ShareAcknowledgements({tip: [sharetx.ShareAcknowledgementBatch(1, 2, (1,))]})


def test_share_group_metadata():
    md = sharetx.share_group_metadata(object(), "g")
    assert md == sharetx.ShareGroupMetadata("g", "", -1)
    with pytest.raises(ValueError):
        sharetx.ShareGroupMetadata("")


def test_scram_sha256_rfc7677():
    s = Scram("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert s.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = s.final(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert final == (b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                     b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    s.verify(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    from sharetx._sasl import SaslError
    with pytest.raises(SaslError):
        s.verify(b"v=AAAATRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=")
    with pytest.raises(SaslError):  # a nonce that does not extend ours
        Scram("SCRAM-SHA-256", "user", "pencil", nonce="abc").final(b"r=xyz123,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    assert plain_initial("alice", "pw") == b"\0alice\0pw"


@pytest.mark.parametrize("conf,key", [
    ({}, "bootstrap.servers"),
    ({"bootstrap.servers": "nohost"}, "bootstrap.servers"),
    ({"bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism"),
    ({"bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "GSSAPI"}, "sasl.mechanism"),
    ({"bootstrap.servers": "h:1", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "OAUTHBEARER"},
     "sasl.mechanisms"),
    ({"bootstrap.servers": "h:1", "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN", "sasl.username": "u",
      "sasl.password": "p", "ssl.keystore.location": "/x.p12"}, "ssl.keystore.location"),
    ({"bootstrap.servers": "h:1", "security.protocol": "SSL", "ssl.ca.location": "/nonexistent/ca.pem"},
     "ssl.ca.location"),
    ({"bootstrap.servers": "h:1", "security.protocol": "kerberos"}, "security.protocol"),
    ({"bootstrap.servers": "h:1", "sharetx.typo": 1}, "sharetx.typo"),
    ({"bootstrap.servers": "h:1", "sharetx.api.key": "x"}, "sharetx.api.key"),
])
def test_unsupported_settings_are_named(conf, key):
    with pytest.raises(ValueError) as e:
        Settings.of(conf)
    assert key in str(e.value)


def test_settings_read_from_the_producer_config():
    s, conf = Settings.of({"bootstrap.servers": "a:1, b:2", "security.protocol": "sasl_plaintext",
                           "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "u", "sasl.password": "p",
                           "transactional.id": "t", "sharetx.api.key": 93, "sharetx.shadow.topic": "shadow",
                           "socket.timeout.ms": 5000})
    assert s.bootstrap == ["a:1", "b:2"] and s.security_protocol == "SASL_PLAINTEXT"
    assert (s.sasl_mechanism, s.sasl_username, s.sasl_password) == ("SCRAM-SHA-512", "u", "p")
    assert (s.api_key, s.shadow_topic, s.request_timeout_s, s.transactional_id) == (93, "shadow", 5.0, "t")
    assert "sharetx.api.key" not in conf and "sharetx.shadow.topic" not in conf and conf["sasl.username"] == "u"


def test_producer_call_needs_a_transaction():
    p = sharetx.Producer({"bootstrap.servers": "127.0.0.1:9", "transactional.id": "t"})
    acks = sharetx.ShareAcknowledgements({sharetx.TopicIdPartition("t", 0): [sharetx.ShareAcknowledgementBatch(0, 0, (1,))]})
    with pytest.raises(KafkaException) as e:
        p.send_share_acknowledgements_to_transaction(acks, sharetx.ShareGroupMetadata("g"), timeout=1)
    assert e.value.args[0].code() == KafkaError._STATE
    with pytest.raises(TypeError):
        p.send_share_acknowledgements_to_transaction({}, sharetx.ShareGroupMetadata("g"))  # type: ignore[arg-type]
    plain = sharetx.Producer({"bootstrap.servers": "127.0.0.1:9"})
    with pytest.raises(KafkaException) as e:
        plain.send_share_acknowledgements_to_transaction(acks, sharetx.ShareGroupMetadata("g"), timeout=1)
    assert e.value.args[0].code() == KafkaError._NOT_CONFIGURED
    with pytest.raises(ValueError):
        sharetx.TransactionalShareAcknowledger({"bootstrap.servers": "127.0.0.1:9"})


def test_new_share_consumer_insists_on_explicit_mode():
    with pytest.raises(ValueError):
        sharetx.new_share_consumer({"bootstrap.servers": "127.0.0.1:9", "group.id": "g",
                                    "share.acknowledgement.mode": "implicit"})
    with pytest.raises(ValueError):
        sharetx.new_share_consumer({"bootstrap.servers": "127.0.0.1:9"})


DECODERS = [P.parse_txn_share_acknowledge, P.parse_api_versions_v0, P.parse_metadata_v12,
            P.parse_sasl_handshake_v1, P.parse_sasl_authenticate_v1]


@pytest.mark.parametrize("decode", DECODERS, ids=lambda d: d.__name__)
def test_decoders_reject_garbage_with_a_defined_error(decode):
    """Random bytes, truncations and single-byte corruptions of a valid answer: each decoder returns
    or raises MalformedResponse, nothing else, and never loops (a forged count is bounded by the
    bytes left)."""
    rng = random.Random(1289)
    valid = bytes.fromhex(GO_RESPONSE)
    inputs = [b"", b"\xff" * 64, b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff\x0f"]
    inputs += [valid[:i] for i in range(len(valid))]
    for _ in range(3000):
        n = rng.randrange(0, 96)
        inputs.append(bytes(rng.getrandbits(8) for _ in range(n)))
    for _ in range(1000):
        b = bytearray(valid)
        b[rng.randrange(len(b))] = rng.getrandbits(8)
        inputs.append(bytes(b))
    outcomes = {"ok": 0, "malformed": 0}
    for data in inputs:
        try:
            decode(data)
            outcomes["ok"] += 1
        except MalformedResponse:
            outcomes["malformed"] += 1
    assert outcomes["malformed"] > 0
    assert sum(outcomes.values()) == len(inputs)


def test_reader_bounds():
    with pytest.raises(MalformedResponse):
        Reader(b"\xff\xff\xff\xff\xff\xff").uvarint()
    with pytest.raises(MalformedResponse):
        Reader(b"\x05ab").compact_string()
    with pytest.raises(MalformedResponse):
        Reader(b"\x7f").compact_array_len()


def _fake_server(answer: bytes):
    """A listener that answers every request frame with ``answer`` under the request's correlation id."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)

    def serve():
        c, _ = srv.accept()
        try:
            while True:
                hdr = c.recv(4)
                if len(hdr) < 4:
                    return
                n = int.from_bytes(hdr, "big")
                req = b""
                while len(req) < n:
                    req += c.recv(n - len(req))
                body = req[4:8] + answer
                c.sendall(len(body).to_bytes(4, "big") + body)
        except OSError:
            pass
        finally:
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv


def test_a_broker_without_the_key_is_unsupported_version():
    """An address that answers ApiVersions without key 95 (a broker, not the sidecar): the call fails
    with a fatal UNSUPPORTED_VERSION, and commit raises it again (no Kafka: a fake listener)."""
    api_versions = bytes.fromhex("0000" "00000001" "0000" "0000" "000c")  # no error, key 0 v0-12
    srv = _fake_server(api_versions)
    try:
        s, _ = Settings.of({"bootstrap.servers": "127.0.0.1:%d" % srv.getsockname()[1]})
        from sharetx._sidecar import Deadline, NotASidecar, SidecarClient
        with pytest.raises(NotASidecar) as e:
            SidecarClient(s).probe(s.bootstrap[0], Deadline(5))
        assert "does not serve TxnShareAcknowledge" in str(e.value)
    finally:
        srv.close()
