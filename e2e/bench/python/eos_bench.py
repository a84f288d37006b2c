#!/usr/bin/env python3
"""The bench's Python consume-transform-produce (e2e/bench, section python-eos), the Java EosBench's
twin on confluent-kafka: one transaction holds up to --batch records, one output per input (the
input's value, keyed "partition:offset", the id the bench's exactly-once check counts).

Every mode commits transactions of exactly --batch records (the last one of a run may hold fewer),
taking them from as many polls as it needs: librdkafka's share consumer does not cap a poll (its
max.poll.records is best-effort and whole record batches, 1013-1974 records at 1000 here), and
cutting each poll into transactions of at most --batch records made transactions of about 520 at
1000 (a full one and the poll's remainder) against the consumer group's 1000. A transaction left
open at the end of a poll takes its first records from the next poll; an empty poll commits it, and so
does the record that reaches --target.

- --mode share: confluent-kafka's ShareConsumer in explicit mode and a sharetx.Producer through the
  sharetx sidecar, the inputs' ACCEPTs bound to the transaction
  (send_share_acknowledgements_to_transaction once for each poll's part of it, deferred when the
  transaction goes on over the next poll, then acknowledge_handed_over before the next poll), the
  pattern of python/README.md; --no-defer stages every part on its own call.
- --mode group: confluent-kafka's own consumer-group exactly-once, direct: a Consumer
  (read_committed, no auto-commit, consume(--batch)) and a transactional Producer with
  send_offsets_to_transaction(the transaction's next offsets, consumer_group_metadata()).
- --mode share-txn: the same ShareConsumer and a transactional confluent-kafka Producer, direct, the
  ACCEPTs after the commit: Kafka transactions alone, at-least-once, what the share consumer and the
  broker do with no sharetx in the path (the twin of the Go bench's kafka-txn direct). The part of a
  transaction still open when the next poll comes is ACCEPTed before that poll (the consumer takes
  acknowledgements of its latest poll only), so those records are at-most-once; the bench injects
  no faults, and the mode stays the ceiling of the same loop without sharetx.

Flags: --mode share|group|share-txn --bootstrap --in --out --group --transactional-id --batch (1000) --target
(stop once that many inputs are committed) --max-seconds (or that long after the first record).
Prints one line on stdout at the end, as EosBench:
RESULT mode=.. records=.. transactions=.. aborts=.. seconds=.. records_per_s=.. cpu_s=.. commit_p50_ms=..
commit_p99_ms=.. poll_.. send_.. stage_.. (cpu_s: the process's CPU from the first record to the last
commit, without the interpreter's start-up), or ERROR <message> and exits 1. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from typing import Any, Callable, Dict, List

from confluent_kafka import AcknowledgeType, Consumer, KafkaException, Producer, TopicPartition

import sharetx


class Result:
    """What a run counts; the clock runs from the first record to the last commit."""

    def __init__(self) -> None:
        self.records = self.transactions = self.aborts = 0
        self.first = self.last = 0.0
        # The process's CPU (time.process_time: every thread, librdkafka's too) at the first record
        # and at the last commit.
        self.cpu_first = self.cpu_last = 0.0
        self.ms: Dict[str, List[float]] = {"commit": [], "poll": [], "send": [], "stage": []}
        self.txn_ms: Dict[str, float] = {}  # the open transaction's phases, summed over its polls

    def line(self, mode: str) -> str:
        secs = max(self.last - self.first, 1e-9)
        out = "RESULT mode=%s records=%d transactions=%d aborts=%d seconds=%.3f records_per_s=%.1f" % (
            mode, self.records, self.transactions, self.aborts, secs, self.records / secs)
        if self.cpu_last > self.cpu_first > 0:
            out += " cpu_s=%.3f" % (self.cpu_last - self.cpu_first)
        for k, v in self.ms.items():
            if not v:
                continue  # a phase the mode has not (share-txn stages nothing)
            s = sorted(v)
            out += " %s_p50_ms=%.3f %s_p99_ms=%.3f" % (k, quantile(s, 0.5), k, quantile(s, 0.99))
        return out

    def timed(self, what: str, step: Callable[[], Any]) -> Any:
        """Runs a phase of the open transaction; end_txn records its time (one value per
        transaction, however many polls fed it)."""
        t = time.monotonic()
        try:
            return step()
        finally:
            self.txn_ms[what] = self.txn_ms.get(what, 0.0) + (time.monotonic() - t) * 1000

    def end_txn(self) -> None:
        for what, ms in self.txn_ms.items():
            self.ms[what].append(ms)
        self.txn_ms = {}

    def done(self, target: int, max_seconds: float) -> bool:
        return self.records >= target or (self.first != 0 and time.monotonic() - self.first > max_seconds)


def quantile(s: List[float], q: float) -> float:
    if not s:
        return 0.0
    i = int(math.ceil(q * len(s))) - 1  # nearest rank
    return s[max(0, min(len(s) - 1, i))]


def rid(m: Any) -> bytes:
    return b"%d:%d" % (m.partition(), m.offset())


def producer_config(a: argparse.Namespace) -> Dict[str, Any]:
    # As EosBench and the Go pipelines: uncompressed (the bytes produced are the bytes sent).
    return {"bootstrap.servers": a.bootstrap, "transactional.id": a.transactional_id, "compression.type": "none",
            "linger.ms": 5, "batch.size": 1048576}


def produce_all(p: Producer, topic: str, msgs: List[Any]) -> None:
    for m in msgs:
        while True:
            try:
                p.produce(topic, key=rid(m), value=m.value())
                break
            except BufferError:
                p.poll(0.01)  # the local queue is full: let it drain


class Mode:
    """What a mode does with its transaction; the loop decides when (see the module doc).

    add: the outputs of ``part`` (records of the current poll) into the open transaction, and
    whatever binds the inputs to it; ``last`` says whether the part ends the transaction (it is
    committed next) or the transaction goes on over the next poll. carry: the open transaction's records of this poll, before
    the next poll. commit and abort: the whole transaction (``txn``), ``this_poll`` its records of
    the current poll that the consumer has not been told about yet. abort returns whether the
    rest of the poll may still be processed (False: the consumer will deliver it again)."""

    def begin(self) -> None:
        raise NotImplementedError

    def add(self, part: List[Any], last: bool) -> None:
        raise NotImplementedError

    def carry(self, this_poll: List[Any]) -> None:
        pass

    def commit(self, txn: List[Any], this_poll: List[Any]) -> None:
        raise NotImplementedError

    def abort(self, txn: List[Any], this_poll: List[Any]) -> bool:
        raise NotImplementedError


def loop(a: argparse.Namespace, r: Result, poll: Callable[[], List[Any]], mode: Mode) -> None:
    deadline = time.monotonic() + a.max_seconds + 60  # the join may take a while
    failed_in_a_row = 0
    txn: List[Any] = []  # the open transaction's records
    this_poll: List[Any] = []  # its records of the current poll not yet acknowledged on the consumer

    def attempt(step: Callable[[], None], finishing: bool) -> bool:
        """Runs step (a part's add, or the commit); on failure aborts the transaction. Returns
        whether the rest of the current poll may be processed."""
        nonlocal txn, this_poll, failed_in_a_row
        try:
            step()
        except KafkaException as e:
            if sharetx.is_fatal(e):
                raise
            go_on = mode.abort(txn, this_poll)
            r.aborts += 1
            r.txn_ms = {}
            print("aborted a transaction of %d records: %s" % (len(txn), e), file=sys.stderr, flush=True)
            txn, this_poll = [], []
            failed_in_a_row += 1
            if failed_in_a_row >= 5:
                raise RuntimeError("5 transactions in a row failed, the last: %s" % e) from e
            return go_on
        if finishing:
            r.records += len(txn)
            r.transactions += 1
            r.last = time.monotonic()
            r.cpu_last = time.process_time()
            r.end_txn()
            failed_in_a_row = 0
            txn, this_poll = [], []
        return True

    while not r.done(a.target, a.max_seconds):
        if time.monotonic() > deadline:
            raise RuntimeError("%d records before the deadline" % r.records)
        t = time.monotonic()
        msgs = poll()
        if not msgs:
            if txn:  # the input paused or ended: do not hold the open transaction
                attempt(lambda: mode.commit(txn, this_poll), True)
            continue
        r.ms["poll"].append((time.monotonic() - t) * 1000)
        if not r.first:
            r.first = time.monotonic()
            r.cpu_first = time.process_time()
        i = 0
        while i < len(msgs):
            if not txn:
                mode.begin()
            part = msgs[i:i + a.batch - len(txn)]
            i += len(part)
            txn += part
            this_poll += part
            full = len(txn) >= a.batch or r.records + len(txn) >= a.target  # the run's last one: now
            if not attempt(lambda: mode.add(part, full), False):
                break
            if full and not attempt(lambda: mode.commit(txn, this_poll), True):
                break
        if txn:
            mode.carry(this_poll)
            this_poll = []
    if txn:
        attempt(lambda: mode.commit(txn, this_poll), True)


def share_consumer_config(a: argparse.Namespace) -> Dict[str, Any]:
    """The share consumer's configuration: max.poll.records at the batch size, as the consumer
    group's poll is capped at it (librdkafka's default, 500, made transactions of about 520 records
    at --batch 1000 against the consumer group's 1000; the cap is best-effort, batch-aligned)."""
    return {"bootstrap.servers": a.bootstrap, "group.id": a.group, "max.poll.records": a.batch}


def share(a: argparse.Namespace) -> Result:
    """Share-group exactly-once through sharetx."""
    r = Result()
    consumer = sharetx.new_share_consumer(share_consumer_config(a))
    producer = sharetx.Producer(producer_config(a))
    try:
        consumer.subscribe([a.input])
        producer.init_transactions(60)
        md = sharetx.share_group_metadata(consumer, a.group)

        class Share(Mode):
            def begin(self) -> None:
                producer.begin_transaction()

            def add(self, part: List[Any], last: bool) -> None:
                r.timed("send", lambda: produce_all(producer, a.output, part))
                # A part the transaction goes on after is deferred: its acknowledgements are held
                # for the transaction's next call (or its commit), one shadow record for the lot.
                r.timed("stage", lambda: producer.send_share_acknowledgements_to_transaction(
                    sharetx.ShareAcknowledgements.from_messages(part, AcknowledgeType.ACCEPT), md,
                    defer=a.defer and not last))
                sharetx.acknowledge_handed_over(consumer, part)

            def commit(self, txn: List[Any], this_poll: List[Any]) -> None:
                r.timed("commit", lambda: producer.commit_transaction(60))

            def abort(self, txn: List[Any], this_poll: List[Any]) -> bool:
                producer.abort_transaction(60)
                # The staged records of earlier polls the sidecar released at the abort; this
                # poll's, staged or not, RELEASE (replacing their handed-over ACCEPT).
                sharetx.release_for_redelivery(consumer, this_poll)
                return True

        loop(a, r, lambda: [m for m in consumer.poll(1.0) if m.error() is None], Share())
    finally:
        consumer.close()
        producer.close(10)
    return r


def share_txn(a: argparse.Namespace) -> Result:
    """Kafka transactions alone with the share consumer, direct: the outputs in a transaction, the
    inputs ACCEPTed after it committed (at-least-once: a crash between the two redelivers)."""
    r = Result()
    consumer = sharetx.new_share_consumer(share_consumer_config(a))
    producer = Producer(producer_config(a))
    try:
        consumer.subscribe([a.input])
        producer.init_transactions(60)

        class ShareTxn(Mode):
            def begin(self) -> None:
                producer.begin_transaction()

            def add(self, part: List[Any], last: bool) -> None:
                r.timed("send", lambda: produce_all(producer, a.output, part))

            def carry(self, this_poll: List[Any]) -> None:
                sharetx.acknowledge_handed_over(consumer, this_poll)  # before the next poll (module doc)

            def commit(self, txn: List[Any], this_poll: List[Any]) -> None:
                r.timed("commit", lambda: producer.commit_transaction(60))
                sharetx.acknowledge_handed_over(consumer, this_poll)

            def abort(self, txn: List[Any], this_poll: List[Any]) -> bool:
                producer.abort_transaction(60)
                sharetx.release_for_redelivery(consumer, this_poll)
                return True

        loop(a, r, lambda: [m for m in consumer.poll(1.0) if m.error() is None], ShareTxn())
    finally:
        consumer.close()
    return r


def group(a: argparse.Namespace) -> Result:
    """Consumer-group exactly-once, direct: send_offsets_to_transaction."""
    r = Result()
    consumer = Consumer({"bootstrap.servers": a.bootstrap, "group.id": a.group, "isolation.level": "read_committed",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    producer = Producer(producer_config(a))
    try:
        consumer.subscribe([a.input])
        producer.init_transactions(60)

        class Group(Mode):
            def begin(self) -> None:
                producer.begin_transaction()

            def add(self, part: List[Any], last: bool) -> None:
                r.timed("send", lambda: produce_all(producer, a.output, part))

            def commit(self, txn: List[Any], this_poll: List[Any]) -> None:
                nxt: Dict[Any, int] = {}
                for m in txn:
                    nxt[(m.topic(), m.partition())] = m.offset() + 1
                offsets = [TopicPartition(t, p, o) for (t, p), o in nxt.items()]
                r.timed("stage", lambda: producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 60))
                r.timed("commit", lambda: producer.commit_transaction(60))

            def abort(self, txn: List[Any], this_poll: List[Any]) -> bool:
                producer.abort_transaction(60)
                first: Dict[Any, int] = {}
                for m in txn:  # process them again
                    first.setdefault((m.topic(), m.partition()), m.offset())
                for (t, p), o in first.items():
                    consumer.seek(TopicPartition(t, p, o))
                return False  # the rest of the poll comes again after the seek

        loop(a, r, lambda: [m for m in consumer.consume(a.batch, 1.0) if m.error() is None], Group())
    finally:
        consumer.close()
    return r


def main() -> int:
    p = argparse.ArgumentParser(prog="eos_bench.py", allow_abbrev=False)
    p.add_argument("--mode", default="share", choices=["share", "group", "share-txn"])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--in", dest="input", required=True)
    p.add_argument("--out", dest="output", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--transactional-id", dest="transactional_id", required=True)
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--target", type=int, default=100000)
    p.add_argument("--max-seconds", dest="max_seconds", type=float, default=10.0)
    p.add_argument("--no-defer", dest="defer", action="store_false",
                   help="share mode: stage every part of a transaction on its own call, as before defer=True")
    a = p.parse_args()
    try:
        r = {"share": share, "group": group, "share-txn": share_txn}[a.mode](a)
    except Exception as e:  # noqa: BLE001 - reported as the run's ERROR line
        print("ERROR %s" % str(e).replace("\n", " "), flush=True)
        return 1
    print(r.line(a.mode), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
