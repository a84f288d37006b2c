"""KIP-1289's reference scenarios (the reference's ShareConsumerTransactionTest, the Java library's
ScenariosTest) with confluent-kafka's ShareConsumer in explicit mode and this library, against the
sidecar named by SHARETX_BOOTSTRAP (in front of a real Kafka cluster, or the zero-config start's
embedded cluster)."""

from __future__ import annotations

import os

import pytest
from confluent_kafka import AcknowledgeType, KafkaError, KafkaException

import sharetx
from harness import POLL, QUIET, Setup, offsets, poll_some, unique, wait_redelivered, bootstrap

ACCEPT, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.REJECT


def acks_of(msgs, t=ACCEPT):
    return sharetx.ShareAcknowledgements.from_messages(msgs, t)


def transact(p, c, msgs, md, t=ACCEPT):
    p.begin_transaction()
    p.send_share_acknowledgements_to_transaction(acks_of(msgs, t), md)
    sharetx.acknowledge_handed_over(c, msgs)
    p.commit_transaction()


def four_records(c):
    """The 4 records of a Setup(1, 4), in one poll (explicit mode)."""
    msgs = []
    while len(msgs) < 4:
        msgs += poll_some(c)
        assert len(msgs) == 4, "want the 4 records in one poll, got %d" % len(msgs)
    return msgs


def close_fenced(s, zombie):
    """Closes a fenced producer: librdkafka aborts the open transaction on close and may only then
    learn of the fence, which it raises (fatal)."""
    s.closeables.remove(zombie)
    try:
        zombie.close(10)
    except KafkaException as e:
        assert e.args[0].fatal(), e


def count_touches(p):
    """A list that gets an entry for every touch record p makes from now on."""
    touches = []
    real_touch = p._touch

    def counted_touch(deadline):  # type: ignore[no-untyped-def]
        touches.append(1)
        return real_touch(deadline)

    p._touch = counted_touch  # type: ignore[method-assign]
    return touches


def drain(p, c, md, done, total):
    while done < total:
        msgs = poll_some(c, POLL)
        transact(p, c, msgs, md)
        done += len(msgs)


def test_commit_with_output_record_in_same_transaction():
    """commit: the records, their outputs and their ACCEPT in one transaction; the outputs are
    committed, nothing is left."""
    with Setup(1, 1) as s:
        c = s.consumer()
        p = s.producer()
        p.init_transactions(POLL)
        msgs = poll_some(c)
        p.begin_transaction()
        for m in msgs:
            p.produce(s.output, key=m.key(), value=b"out-" + m.value())
        p.send_share_acknowledgements_to_transaction(acks_of(msgs), sharetx.share_group_metadata(c, s.group))
        p.commit_transaction(POLL)
        sharetx.acknowledge_handed_over(c, msgs)
        c.poll(0.5)  # sends the consumer's acknowledgement: absorbed
        assert s.committed_outputs(QUIET) == [b"out-value-0"]
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records delivered again after the commit"


def test_abort_is_redelivered():
    """abort -> redelivered: neither the output nor the ACCEPT survives; the record comes back."""
    with Setup(1, 1) as s:
        c = s.consumer()
        p = s.producer()
        p.init_transactions(POLL)
        md = sharetx.share_group_metadata(c, s.group)
        msgs = poll_some(c)
        p.begin_transaction()
        p.produce(s.output, key=b"k", value=b"aborted-output")
        p.send_share_acknowledgements_to_transaction(acks_of(msgs), md)
        sharetx.acknowledge_handed_over(c, msgs)
        p.abort_transaction(POLL)
        sharetx.release_for_redelivery(c, msgs)  # replaces the ACCEPT; absorbed: the sidecar released it

        def again(redelivered):
            p.begin_transaction()
            p.send_share_acknowledgements_to_transaction(acks_of(redelivered), md)
            p.commit_transaction(POLL)
            sharetx.acknowledge_handed_over(c, redelivered)

        took = wait_redelivered(c, msgs, 30, again)
        print("abort -> redelivered: %.0f ms" % (took * 1000))
        assert s.committed_outputs(QUIET) == []
        c.poll(0.5)
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records left after the redelivery committed"


def test_commit_reject():
    """reject: a committed REJECT archives the record; it is never delivered again."""
    with Setup(1, 1) as s:
        c = s.consumer()
        p = s.producer()
        p.init_transactions(POLL)
        msgs = poll_some(c)
        p.begin_transaction()
        p.send_share_acknowledgements_to_transaction(acks_of(msgs, REJECT), sharetx.share_group_metadata(c, s.group))
        sharetx.acknowledge_handed_over(c, msgs)
        p.commit_transaction(POLL)
        c.poll(0.5)
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "a committed REJECT was delivered again"


def test_acknowledging_committed_records_is_invalid_record_state():
    """Acknowledgements of records no longer acquired (their transaction committed) fail with
    INVALID_RECORD_STATE, an abortable error; commit refuses until the abort; the committed outcome
    stands."""
    with Setup(1, 2) as s:
        c = s.consumer()
        p = s.producer()
        p.init_transactions(POLL)
        md = sharetx.share_group_metadata(c, s.group)
        msgs = poll_some(c)
        transact(p, c, msgs, md)
        p.begin_transaction()
        with pytest.raises(KafkaException) as e:
            p.send_share_acknowledgements_to_transaction(acks_of(msgs), md)
        err = e.value.args[0]
        assert err.code() == KafkaError.INVALID_RECORD_STATE and err.txn_requires_abort() and not err.fatal(), err
        with pytest.raises(KafkaException) as e2:
            p.commit_transaction(POLL)
        assert e2.value.args[0].txn_requires_abort()
        p.abort_transaction(POLL)
        drain(p, c, md, len(msgs), 2)
        c.poll(0.5)
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records left after the commit and the refused second staging"


def test_commit_across_multiple_polls():
    """Several polls in one transaction: each poll staged and handed over, polled on; one commit."""
    with Setup(1, 0) as s:
        c = s.consumer()
        p = s.producer()
        p.init_transactions(POLL)
        md = sharetx.share_group_metadata(c, s.group)
        p.begin_transaction()
        seen = set()
        for i in range(3):
            s.produce(1, i)  # one record at a time: one poll each
            msgs = poll_some(c)
            seen |= offsets(msgs)
            p.send_share_acknowledgements_to_transaction(acks_of(msgs), md)
            sharetx.acknowledge_handed_over(c, msgs)  # so the consumer may poll again
        p.commit_transaction(POLL)
        assert len(seen) == 3
        c.poll(0.5)
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records left after the multi-poll commit"


def test_commit_across_many_partitions():
    """12 partitions, 48 records, one transaction."""
    parts = 12
    with Setup(parts, 4 * parts) as s:
        c = s.consumer()
        p = s.producer()
        p.init_transactions(POLL)
        md = sharetx.share_group_metadata(c, s.group)
        p.begin_transaction()
        partitions = set()
        n = 0
        while n < 4 * parts:
            msgs = poll_some(c)
            p.send_share_acknowledgements_to_transaction(acks_of(msgs), md)
            sharetx.acknowledge_handed_over(c, msgs)
            partitions |= {m.partition() for m in msgs}
            n += len(msgs)
        p.commit_transaction(POLL)
        assert len(partitions) == parts
        assert n == 4 * parts
        c.poll(0.5)
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records left after the 12-partition commit"


def test_fenced_member_epochs():
    """With the member's real id (as the group has it), an epoch one ahead and one behind fail with
    STALE_MEMBER_EPOCH (abortable); with the current epoch the same acknowledgement stages; after the
    abort the record is still to be delivered."""
    with Setup(1, 1) as s:
        client_id = unique("pepoch")
        c = s.consumer(client_id)
        p = s.producer()
        p.init_transactions(POLL)
        msgs = poll_some(c)
        m = s.member_of(client_id)
        acks = acks_of(msgs)
        for epoch in (m.member_epoch + 1, m.member_epoch - 1):
            p.begin_transaction()
            with pytest.raises(KafkaException) as e:
                p.send_share_acknowledgements_to_transaction(acks, sharetx.ShareGroupMetadata(m.group_id, m.member_id,
                                                                                              epoch))
            err = e.value.args[0]
            assert err.code() == KafkaError.STALE_MEMBER_EPOCH and err.txn_requires_abort(), err
            with pytest.raises(KafkaException):
                p.commit_transaction(POLL)
            p.abort_transaction(POLL)
        # The real metadata stages (the epoch may move on meanwhile: a new transaction with the newer one).
        for attempt in range(1, 4):
            p.begin_transaction()
            try:
                p.send_share_acknowledgements_to_transaction(acks, s.member_of(client_id))
                p.abort_transaction(POLL)
                break
            except KafkaException as e:
                p.abort_transaction(POLL)
                if attempt == 3 or e.args[0].code() != KafkaError.STALE_MEMBER_EPOCH:
                    raise
        sharetx.release_for_redelivery(c, msgs)
        s.close_clients()
        left = s.left_for_fresh_member(QUIET)
        assert offsets(left) == offsets(msgs), "after the refused stagings and the abort the record is to be delivered"


def test_zombie_producer_is_fenced():
    """Once a newer instance with the same transactional id initialised, the old one cannot stage:
    its call, naming its output written at the old epoch, is refused (fatal), nothing is staged,
    and the fresh one stages and commits. (The zombie's own librdkafka learns of the fence when
    it closes and aborts.)"""
    with Setup(1, 4) as s:
        c = s.consumer()
        txn_id = unique("pzombie")
        zombie = s.producer(txn_id)
        zombie.init_transactions(POLL)
        msgs = four_records(c)
        zombie.begin_transaction()
        zombie.produce(s.output, key=b"k", value=b"zombie")
        assert zombie.flush(30) == 0
        fresh = s.producer(txn_id)
        fresh.init_transactions(POLL)
        fresh.begin_transaction()
        fresh.produce(s.output, key=b"k", value=b"fresh")
        md = sharetx.share_group_metadata(c, s.group)
        acks = acks_of(msgs)
        with pytest.raises(KafkaException) as e:
            zombie.send_share_acknowledgements_to_transaction(acks, md, timeout=30)
        err = e.value.args[0]
        print("zombie: %s" % err)
        assert err.fatal() and sharetx.is_fatal(e.value), err
        with pytest.raises(KafkaException) as e2:
            zombie.send_share_acknowledgements_to_transaction(acks, md, timeout=30)
        assert e2.value.args[0].fatal(), "fatal: refused again"
        # The fresh instance stages the same records and commits.
        fresh.send_share_acknowledgements_to_transaction(acks, md)
        fresh.commit_transaction(POLL)
        sharetx.acknowledge_handed_over(c, msgs)
        c.poll(0.5)
        assert s.committed_outputs(QUIET) == [b"fresh"]
        close_fenced(s, zombie)
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records left after the fresh producer committed"


def test_zombie_cannot_stage_a_later_call():
    """A zombie whose transaction already staged (its touch record written) before a newer instance
    initialised: its next call in that transaction is refused (fatal) before anything is staged, and
    what it staged first is released by the abort, not committed by the newer instance's
    transaction. (Touching only on a transaction's first call let such a call stage with the -1/-1
    extension into the newer instance's transaction.)"""
    with Setup(1, 4) as s:
        c = s.consumer()
        txn_id = unique("pzombie2")
        zombie = s.producer(txn_id)
        zombie.init_transactions(POLL)
        msgs = four_records(c)
        md = sharetx.share_group_metadata(c, s.group)
        zombie.begin_transaction()
        zombie.send_share_acknowledgements_to_transaction(acks_of(msgs[:2]), md)
        fresh = s.producer(txn_id)
        fresh.init_transactions(POLL)  # fences the zombie and aborts its transaction
        fresh.begin_transaction()
        fresh.produce(s.output, key=b"k", value=b"fresh")
        with pytest.raises(KafkaException) as e:
            zombie.send_share_acknowledgements_to_transaction(acks_of(msgs[2:]), md, timeout=30)
        assert e.value.args[0].fatal(), e.value.args[0]
        fresh.commit_transaction(POLL)  # commits nothing of the zombie's
        sharetx.release_for_redelivery(c, msgs)
        c.poll(0.5)
        close_fenced(s, zombie)
        s.close_clients()
        left = s.left_for_fresh_member(QUIET)
        assert offsets(left) == offsets(msgs), "every record is still to be processed: none was acknowledged"


def test_zombie_window_between_touch_and_call():
    """The window the touch alone left: a zombie's touch accepted just before a newer instance
    initialised, its call just after. The call names its touch (sharetx's TouchOffset extension),
    so the sidecar checks it against the ids that touch was written with and refuses it
    (PRODUCER_FENCED, fatal) instead of resolving -1/-1 to the newer instance's ids and staging the
    zombie's acknowledgements into the newer transaction. The newer instance then stages the same
    records itself and commits. The newer instance initialises from inside the zombie's call,
    between its touch and its TxnShareAcknowledge, so the window is hit every run."""
    with Setup(1, 4) as s:
        c = s.consumer()
        txn_id = unique("pzombie3")
        zombie = s.producer(txn_id)
        zombie.init_transactions(POLL)
        msgs = four_records(c)
        md = sharetx.share_group_metadata(c, s.group)
        fresh = s.producer(txn_id)
        real_touch = zombie._touch

        def touch_then_newer_instance(deadline):  # type: ignore[no-untyped-def]
            offset = real_touch(deadline)
            fresh.init_transactions(POLL)  # the newer instance, between the zombie's touch and its call
            return offset

        zombie._touch = touch_then_newer_instance  # type: ignore[method-assign]
        zombie.begin_transaction()
        with pytest.raises(KafkaException) as e:
            zombie.send_share_acknowledgements_to_transaction(acks_of(msgs[:2]), md, timeout=30)
        err = e.value.args[0]
        assert err.fatal(), "the zombie's call in the window must be fenced, got %s" % err
        fresh.begin_transaction()
        fresh.produce(s.output, key=b"k", value=b"fresh")
        fresh.send_share_acknowledgements_to_transaction(acks_of(msgs), md)  # none of them staged by the zombie
        fresh.commit_transaction(POLL)
        sharetx.acknowledge_handed_over(c, msgs)
        c.poll(0.5)
        assert s.committed_outputs(QUIET) == [b"fresh"]
        close_fenced(s, zombie)
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records left after the newer instance committed"


def test_outputs_name_the_transaction_instead_of_a_touch():
    """A transaction with outputs sends no touch record: the call names its first output (sharetx's
    OutputRecord extension), which the sidecar saw written with the producer's ids, and the
    transaction commits; a transaction with no output still touches. The output's own delivery
    callback runs as before."""
    with Setup(1, 2) as s:
        c = s.consumer()
        p = s.producer()
        p.init_transactions(POLL)
        touches = count_touches(p)
        md = sharetx.share_group_metadata(c, s.group)
        msgs = []
        while len(msgs) < 2:
            msgs += poll_some(c)
        reports = []
        p.begin_transaction()
        p.produce(s.output, key=b"k", value=b"out-1", on_delivery=lambda err, m: reports.append(err))
        p.produce(s.output, key=b"k", value=b"out-2")
        p.send_share_acknowledgements_to_transaction(acks_of(msgs[:1]), md)
        assert touches == [], "a transaction with outputs touched"
        assert reports == [None], "the first output's own delivery callback did not run once: %r" % reports
        p.commit_transaction(POLL)
        sharetx.acknowledge_handed_over(c, msgs[:1])
        p.begin_transaction()  # no output: the touch
        p.send_share_acknowledgements_to_transaction(acks_of(msgs[1:]), md)
        assert touches == [1], "an acknowledgement-only transaction did not touch"
        p.commit_transaction(POLL)
        sharetx.acknowledge_handed_over(c, msgs[1:])
        c.poll(0.5)
        assert sorted(s.committed_outputs(QUIET)) == [b"out-1", b"out-2"]
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records left after both transactions committed"


def test_zombie_window_between_output_and_call():
    """test_zombie_window_between_touch_and_call with an output in place of the touch: the zombie's
    first output is delivered just before a newer instance initialises, its call comes just after
    and names that output, so the sidecar checks it against the ids the output was written with and
    refuses it (PRODUCER_FENCED, fatal). The newer instance then stages the same records and
    commits; the zombie's output is aborted with its transaction."""
    with Setup(1, 4) as s:
        c = s.consumer()
        txn_id = unique("pzombie4")
        zombie = s.producer(txn_id)
        zombie.init_transactions(POLL)
        msgs = four_records(c)
        md = sharetx.share_group_metadata(c, s.group)
        fresh = s.producer(txn_id)
        real_output = zombie._output_ref

        def output_then_newer_instance(deadline):  # type: ignore[no-untyped-def]
            ref = real_output(deadline)
            assert ref is not None, "the zombie's output was not named"
            fresh.init_transactions(POLL)  # the newer instance, between the zombie's output and its call
            return ref

        zombie._output_ref = output_then_newer_instance  # type: ignore[method-assign]
        zombie.begin_transaction()
        zombie.produce(s.output, key=b"k", value=b"zombie")
        with pytest.raises(KafkaException) as e:
            zombie.send_share_acknowledgements_to_transaction(acks_of(msgs[:2]), md, timeout=30)
        err = e.value.args[0]
        assert err.fatal(), "the zombie's call in the window must be fenced, got %s" % err
        fresh.begin_transaction()
        fresh.produce(s.output, key=b"k", value=b"fresh")
        fresh.send_share_acknowledgements_to_transaction(acks_of(msgs), md)  # none of them staged by the zombie
        fresh.commit_transaction(POLL)
        sharetx.acknowledge_handed_over(c, msgs)
        c.poll(0.5)
        assert s.committed_outputs(QUIET) == [b"fresh"]
        close_fenced(s, zombie)
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records left after the newer instance committed"


def test_transaction_timeout():
    """A transaction that never ends is aborted by the coordinator; the sidecar releases its records
    (redelivered), and a new transaction stages and commits them."""
    with Setup(1, 4) as s:
        c = s.consumer()
        stuck = s.producer(unique("pstuck"), {"transaction.timeout.ms": 1000})
        stuck.init_transactions(POLL)
        msgs = poll_some(c)
        md = sharetx.share_group_metadata(c, s.group)
        stuck.begin_transaction()
        stuck.send_share_acknowledgements_to_transaction(acks_of(msgs), md)
        sharetx.acknowledge_handed_over(c, msgs)
        p = s.producer()
        p.init_transactions(POLL)

        def again(redelivered):
            transact(p, c, redelivered, md)

        # No commit, no abort: only the coordinator's time-out ends it.
        took = wait_redelivered(c, msgs, 120, again)
        print("transaction timeout -> redelivered: %.0f ms" % (took * 1000))
        done = len(msgs)
        drain(p, c, md, done, 4)
        c.poll(0.5)
        s.closeables.remove(stuck)
        try:
            stuck.close(10)  # librdkafka aborts the open transaction on close: refused, the coordinator fenced it
        except KafkaException as e:
            assert e.args[0].fatal(), e
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records left after the redelivery committed"


def test_ack_only_transaction_commits():
    """A transaction that produces nothing, only REJECTs whole polls, still commits (the touch record
    makes librdkafka send EndTxn)."""
    n = 10
    with Setup(1, n) as s:
        c = s.consumer()
        p = s.producer()
        p.init_transactions(POLL)
        md = sharetx.share_group_metadata(c, s.group)
        done = 0
        while done < n:
            msgs = poll_some(c)
            p.begin_transaction()
            p.send_share_acknowledgements_to_transaction(acks_of(msgs, REJECT), md)
            p.commit_transaction(POLL)
            sharetx.acknowledge_handed_over(c, msgs)
            done += len(msgs)
        c.poll(0.5)
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records delivered again after ack-only transactions committed"


def test_transactional_share_acknowledger():
    """The acknowledger commits acknowledgements with no Kafka output; acknowledging committed records
    again is refused, aborted and raised."""
    with Setup(1, 4) as s:
        c = s.consumer()
        with sharetx.TransactionalShareAcknowledger(dict(s.conf, **{"transactional.id": unique("packer")})) as acker:
            acker.init_transactions()
            acker.commit_acknowledgements(sharetx.ShareAcknowledgements.empty(), s.group)  # nothing
            done = 0
            first = None
            while done < 4:
                msgs = poll_some(c)
                acker.commit_acknowledgements(acks_of(msgs), s.group)
                sharetx.acknowledge_handed_over(c, msgs)
                first = first or msgs
                done += len(msgs)
            with pytest.raises(KafkaException) as e:
                acker.commit_acknowledgements(acks_of(first), s.group)
            assert e.value.args[0].code() == KafkaError.INVALID_RECORD_STATE
            acker.abort_acknowledgements()  # nothing open any more: a no-op
        c.poll(0.5)
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records left after the acknowledger committed"


def test_no_sidecar_is_unsupported_version():
    """Straight to the cluster (no sidecar): the call fails with a fatal UNSUPPORTED_VERSION before
    anything is written, and commit raises it again."""
    bootstrap()
    kafka = os.environ.get("SHARETX_KAFKA_BOOTSTRAP", "").strip()
    if not kafka:
        pytest.skip("SHARETX_KAFKA_BOOTSTRAP is not set (the cluster's own bootstrap; none with the embedded cluster)")
    p = sharetx.Producer({"bootstrap.servers": kafka, "transactional.id": unique("pdirect")})
    try:
        p.init_transactions(POLL)
        p.begin_transaction()
        acks = sharetx.ShareAcknowledgements({sharetx.TopicIdPartition("whatever", 0): [
            sharetx.ShareAcknowledgementBatch(0, 0, (1,))]})
        with pytest.raises(KafkaException) as e:
            p.send_share_acknowledgements_to_transaction(acks, sharetx.ShareGroupMetadata("g"), timeout=20)
        err = e.value.args[0]
        assert err.code() == KafkaError.UNSUPPORTED_VERSION and err.fatal(), err
        assert "does not serve TxnShareAcknowledge" in err.str()
        with pytest.raises(KafkaException) as e2:
            p.commit_transaction(POLL)
        assert e2.value.args[0].code() == KafkaError.UNSUPPORTED_VERSION
        p.abort_transaction(POLL)
    finally:
        p.close()


def test_nothing_listening_is_a_clear_timeout():
    """No process at the address: the call gives up at its timeout with a retriable _TIMED_OUT that
    says no sidecar was reached and why."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    p = sharetx.Producer({"bootstrap.servers": "127.0.0.1:%d" % port, "transactional.id": unique("pnone")})
    try:
        p._in_txn = True  # no coordinator to begin a transaction with: the library's own check is under test
        acks = sharetx.ShareAcknowledgements({sharetx.TopicIdPartition("t", 0): [sharetx.ShareAcknowledgementBatch(0, 0, (1,))]})
        with pytest.raises(KafkaException) as e:
            p.send_share_acknowledgements_to_transaction(acks, sharetx.ShareGroupMetadata("g"), timeout=2)
        err = e.value.args[0]
        assert err.code() == KafkaError._TIMED_OUT and err.retriable(), err
        assert "no sidecar reached" in err.str() and "refused" in err.str().lower(), err.str()
    finally:
        p.close(0)


def test_deferred_parts_staged_at_commit():
    """A transaction that goes on over more parts defers them (defer=True): the sidecar holds them back
    from the consumer's own acknowledgement without the call waiting for the outputs or touching, and
    commit_transaction stages them all, in one call, before it commits: the outputs committed,
    nothing left."""
    with Setup(1, 4) as s:
        c = s.consumer()
        p = s.producer()
        p.init_transactions(POLL)
        touches = count_touches(p)
        msgs = four_records(c)
        md = sharetx.share_group_metadata(c, s.group)
        p.begin_transaction()
        for part in (msgs[:2], msgs[2:]):
            for m in part:
                p.produce(s.output, key=m.key(), value=b"out-" + m.value())
            p.send_share_acknowledgements_to_transaction(acks_of(part), md, defer=True)
        assert touches == [], "a deferred call touched"
        sharetx.acknowledge_handed_over(c, msgs)
        c.poll(0.5)  # sends the consumer's acknowledgement of the deferred records: held back
        p.commit_transaction(POLL)
        assert sorted(s.committed_outputs(QUIET)) == sorted(b"out-" + m.value() for m in msgs)
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records delivered again after the commit"


def four_in_a_transaction(s, out):
    """A Setup(1, 4)'s consumer, its 4 records polled and a producer with a transaction open that
    produced one output."""
    c = s.consumer()
    p = s.producer()
    p.init_transactions(POLL)
    msgs = four_records(c)
    md = sharetx.share_group_metadata(c, s.group)
    p.begin_transaction()
    p.produce(s.output, key=b"k", value=out)
    return c, p, msgs, md


def test_deferred_part_staged_with_the_next_call():
    """The transaction's next call without defer stages what the earlier one deferred with its own
    acknowledgements; the commit then has nothing left to stage."""
    with Setup(1, 4) as s:
        c, p, msgs, md = four_in_a_transaction(s, b"out")
        p.send_share_acknowledgements_to_transaction(acks_of(msgs[:3]), md, defer=True)
        p.send_share_acknowledgements_to_transaction(acks_of(msgs[3:]), md)
        assert p._deferred == [], "the staging call left deferred acknowledgements behind"
        sharetx.acknowledge_handed_over(c, msgs)
        p.commit_transaction(POLL)
        c.poll(0.5)
        assert s.committed_outputs(QUIET) == [b"out"]
        s.close_clients()
        assert s.left_for_fresh_member(QUIET) == [], "records delivered again after the commit"


def test_deferred_released_by_the_abort():
    """Deferred and handed over, then aborted: the sidecar releases the records at the abort (the
    consumer's own acknowledgement of them was held back), and they are delivered again."""
    with Setup(1, 4) as s:
        c, p, msgs, md = four_in_a_transaction(s, b"aborted")
        p.send_share_acknowledgements_to_transaction(acks_of(msgs), md, defer=True)
        sharetx.acknowledge_handed_over(c, msgs)
        c.poll(0.5)
        p.abort_transaction(POLL)
        assert s.committed_outputs(QUIET) == []
        s.close_clients()
        left = s.left_for_fresh_member(QUIET)
        assert offsets(left) == offsets(msgs), "every deferred record is to be delivered again after the abort"


def test_zombie_deferred_is_fenced_at_commit():
    """A zombie's deferred call is not checked against its output (it does not wait for one), so it
    is answered; the newer instance's InitProducerId releases what it deferred, and the zombie's
    commit, whose staging call names its output written at the old epoch, is refused (fatal):
    nothing of the zombie's is committed."""
    with Setup(1, 4) as s:
        c = s.consumer()
        txn_id = unique("pzombie5")
        zombie = s.producer(txn_id)
        zombie.init_transactions(POLL)
        msgs = four_records(c)
        md = sharetx.share_group_metadata(c, s.group)
        zombie.begin_transaction()
        zombie.produce(s.output, key=b"k", value=b"zombie")
        zombie.send_share_acknowledgements_to_transaction(acks_of(msgs[:2]), md, defer=True)
        fresh = s.producer(txn_id)
        fresh.init_transactions(POLL)  # fences the zombie
        with pytest.raises(KafkaException) as e:
            zombie.commit_transaction(30)
        err = e.value.args[0]
        print("zombie: %s" % err)
        assert err.fatal(), "the zombie's commit must be fenced, got %s" % err
        sharetx.release_for_redelivery(c, msgs)
        c.poll(0.5)
        close_fenced(s, zombie)
        assert s.committed_outputs(QUIET) == []
        s.close_clients()
        left = s.left_for_fresh_member(QUIET)
        assert offsets(left) == offsets(msgs), "every record is still to be processed: none was acknowledged"
