"""The library's own connection speaks the security protocol of the producer's configuration dict:
SASL_PLAINTEXT with PLAIN and SCRAM-SHA-256 through a proxy in front of the SASL listener, SSL
through a proxy whose listeners speak TLS, SASL_SSL through one that speaks TLS in front of the SASL
listener. Every client of the application (admin, producer, share consumer) uses the same dict."""

from __future__ import annotations

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException

import sharetx
from harness import QUIET, Setup, poll_some, sasl, tls, unique

PROTOCOLS = {
    "SASL_PLAINTEXT PLAIN": lambda: sasl("PLAIN", "alice", "alice-secret"),
    "SASL_PLAINTEXT SCRAM-SHA-256": lambda: sasl("SCRAM-SHA-256", "alice", "alice-secret"),
    "SSL": lambda: tls(None),
    "SASL_SSL SCRAM-SHA-256": lambda: tls("SCRAM-SHA-256", "alice", "alice-secret"),
}


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_commit_over_security_protocol(name):
    conf = PROTOCOLS[name]()
    with Setup(1, 2, conf) as s:
        c = s.consumer()
        p = s.producer()
        p.init_transactions(60)
        done = 0
        while done < 2:
            msgs = poll_some(c)
            p.begin_transaction()
            for m in msgs:
                p.produce(s.output, key=m.key(), value=b"out-" + m.value())
            p.send_share_acknowledgements_to_transaction(
                sharetx.ShareAcknowledgements.from_messages(msgs, AcknowledgeType.ACCEPT),
                sharetx.share_group_metadata(c, s.group))
            p.commit_transaction(60)
            sharetx.acknowledge_handed_over(c, msgs)
            done += len(msgs)
        c.poll(0.5)
        assert sorted(s.committed_outputs(QUIET)) == [b"out-value-0", b"out-value-1"]
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == []


def test_wrong_password_is_a_fatal_authentication_error():
    """The library's connection authenticates with the dict's sasl.* settings: a wrong password fails
    the call with a fatal authentication error (the producer's own connection, with the same wrong
    password, never gets a transaction: the library's connection is checked without it)."""
    conf = sasl("SCRAM-SHA-256", "alice", "wrong-password")
    p = sharetx.Producer(dict(conf, **{"transactional.id": unique("pbadpw")}))
    try:
        p._in_txn = True  # the producer's own connection cannot authenticate either: test the library's
        acks = sharetx.ShareAcknowledgements({sharetx.TopicIdPartition("t", 0): [
            sharetx.ShareAcknowledgementBatch(0, 0, (1,))]})
        with pytest.raises(KafkaException) as e:
            p.send_share_acknowledgements_to_transaction(acks, sharetx.ShareGroupMetadata("g"), timeout=20)
        err = e.value.args[0]
        assert err.code() == KafkaError._AUTHENTICATION and err.fatal(), err
        assert "SCRAM-SHA-256" in err.str(), err.str()
    finally:
        p.close(0)


def test_untrusted_certificate_is_a_fatal_authentication_error():
    """SSL without the CA that signed the proxy's certificate: the TLS handshake fails, fatally."""
    conf = tls(None)
    conf.pop("ssl.ca.location")
    p = sharetx.Producer(dict(conf, **{"transactional.id": unique("pbadca")}))
    try:
        p._in_txn = True
        acks = sharetx.ShareAcknowledgements({sharetx.TopicIdPartition("t", 0): [
            sharetx.ShareAcknowledgementBatch(0, 0, (1,))]})
        with pytest.raises(KafkaException) as e:
            p.send_share_acknowledgements_to_transaction(acks, sharetx.ShareGroupMetadata("g"), timeout=20)
        err = e.value.args[0]
        assert err.code() == KafkaError._AUTHENTICATION and err.fatal(), err
        assert "TLS" in err.str(), err.str()
    finally:
        p.close(0)
