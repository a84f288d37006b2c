"""A sidecar that does not answer (a proxy of this test's own, stopped with SIGSTOP and resumed with
SIGCONT: SHARETX_STALL_BOOTSTRAP, SHARETX_STALL_PID): send_share_acknowledgements_to_transaction
gives up at its timeout with a retriable _TIMED_OUT; the application aborts, releases, and the
records are processed once the sidecar answers. The acknowledger's commit that times out is retried
by the same call."""

from __future__ import annotations

import os
import signal
import time

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException

import sharetx
from harness import QUIET, Setup, bootstrap, env, poll_some, unique
from test_scenarios import drain

TIMEOUT = 4.0


def stall_conf():
    bootstrap()
    return {"bootstrap.servers": env("SHARETX_STALL_BOOTSTRAP", "no proxy for the stall test")}


def stall_pid() -> int:
    return int(env("SHARETX_STALL_PID", "no proxy for the stall test"))


def test_stalled_sidecar_is_timeout():
    conf = stall_conf()
    pid = stall_pid()
    with Setup(1, 2, conf) as s:
        c = s.consumer()
        p = s.producer(unique("pstall"))
        p.init_transactions(60)
        md = sharetx.share_group_metadata(c, s.group)
        msgs = poll_some(c)
        p.begin_transaction()
        t0 = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(KafkaException) as e:
                p.send_share_acknowledgements_to_transaction(
                    sharetx.ShareAcknowledgements.from_messages(msgs, AcknowledgeType.ACCEPT), md, timeout=TIMEOUT)
            took = time.monotonic() - t0
        finally:
            os.kill(pid, signal.SIGCONT)
        err = e.value.args[0]
        print("stalled sidecar -> %s after %.0f ms (timeout %.0f ms)" % (err.name(), took * 1000, TIMEOUT * 1000))
        assert err.code() == KafkaError._TIMED_OUT and err.retriable() and not err.fatal(), err
        assert took >= TIMEOUT - 0.1, "gave up after %.2f s, before the timeout" % took
        with pytest.raises(KafkaException) as e2:  # the timed-out call is unresolved: no commit
            p.commit_transaction(60)
        assert e2.value.args[0].code() == KafkaError._STATE
        # The application's answer to any failure: abort, release, poll again.
        p.abort_transaction(60)
        sharetx.release_for_redelivery(c, msgs)
        drain(p, c, md, 0, 2)
        c.poll(0.5)
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records left after the time-out, the abort and the retry"


class StallingProducer(sharetx.Producer):
    """A producer whose next commit_transaction runs while the sidecar is stopped (resumed after)."""

    def __init__(self, conf, pid):
        super().__init__(conf)
        self.pid = pid
        self.stall_next_commit = False

    def commit_transaction(self, *args, **kwargs):
        if not self.stall_next_commit:
            return super().commit_transaction(*args, **kwargs)
        self.stall_next_commit = False
        os.kill(self.pid, signal.SIGSTOP)
        try:
            return super().commit_transaction(*args, **kwargs)
        finally:
            os.kill(self.pid, signal.SIGCONT)


def test_acknowledger_retries_a_timed_out_commit():
    conf = stall_conf()
    pid = stall_pid()
    with Setup(1, 2, conf) as s:
        c = s.consumer()
        p = StallingProducer(dict(conf, **{"transactional.id": unique("pstallack")}), pid)
        try:
            acker = sharetx.TransactionalShareAcknowledger(p)
            acker.init_transactions()
            msgs = poll_some(c)
            acks = sharetx.ShareAcknowledgements.from_messages(msgs, AcknowledgeType.ACCEPT)
            p.stall_next_commit = True
            with pytest.raises(KafkaException) as e:
                acker.commit_acknowledgements(acks, s.group, timeout=TIMEOUT)
            assert e.value.args[0].retriable(), e.value.args[0]
            with pytest.raises(KafkaException) as e2:  # a commit in flight cannot be aborted
                acker.abort_acknowledgements()
            assert e2.value.args[0].code() == KafkaError._STATE
            acker.commit_acknowledgements(acks, s.group)  # the retry
            sharetx.acknowledge_handed_over(c, msgs)
            done = len(msgs)
            while done < 2:
                more = poll_some(c)
                acker.commit_acknowledgements(sharetx.ShareAcknowledgements.from_messages(more, AcknowledgeType.ACCEPT),
                                              s.group)
                sharetx.acknowledge_handed_over(c, more)
                done += len(more)
            acker.close()
        finally:
            p.close(10)
        c.poll(0.5)
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records left after the retried commit"
