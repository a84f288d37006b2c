#!/usr/bin/env python3
"""The demo's worker (examples/demo/worker.go) in Python: the same flags and the same line protocol,
on confluent-kafka and the sharetx package (python/). `go run ./examples/demo --worker-lang python`
starts it with python/venv.sh's interpreter.

Mode exactly-once: confluent-kafka's ShareConsumer in explicit mode and a sharetx.Producer, both
through sharetx. Per poll one transaction: an output per input, the inputs' ACCEPT bound to it
(send_share_acknowledgements_to_transaction), commit and acknowledge_handed_over — or, now and then
on purpose, abort and release_for_redelivery.

Mode at-least-once: the same application without transactions: a plain Producer; per poll, produce
the outputs, then ACCEPT the inputs explicitly (acknowledge and commit_sync).

    stdout  READY | TXN begin | PRODUCED n= | TXN commit n= commits= aborts= | TXN abort n= commits= aborts= reason=
            | ACK n= batches= | AT point | ERR what | EXIT
    stdin   crash-at produced|committed | stop (EOF, SIGTERM, SIGINT: the same)
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import sys
import threading
import time
from typing import Any, List, Optional

from confluent_kafka import AcknowledgeType, KafkaError, KafkaException, Producer

import sharetx

EOS, ALO = "exactly-once", "at-least-once"


def go_duration(s: str) -> float:
    if s == "0":
        return 0.0
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
    total, at = 0.0, 0
    for m in re.finditer(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)", s):
        if m.start() != at:
            break
        total += float(m.group(1)) * units[m.group(2)]
        at = m.end()
    if at == 0 or at != len(s):
        raise ValueError('invalid duration "%s"' % s)
    return total


def one_line(o: object) -> str:
    return str(o).replace("\n", " ")


class Worker:
    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.rng = random.Random(a.seed)
        self.stop = False
        self.crash_at: Optional[str] = None
        self.lock = threading.Lock()
        self.commits = self.aborts = self.batches = 0
        self.md = sharetx.ShareGroupMetadata.for_group(a.group)
        self.consumer: Any = None
        self.txn: Optional[sharetx.Producer] = None
        self.plain: Optional[Producer] = None

    def say(self, fmt: str, *args: Any) -> None:
        with self.lock:
            sys.stdout.write((fmt % args if args else fmt) + "\n")
            sys.stdout.flush()

    def listen(self) -> None:
        def read() -> None:
            try:
                for line in sys.stdin:
                    f = line.split()
                    if f == ["stop"]:
                        self.stop = True
                    elif len(f) == 2 and f[0] == "crash-at":
                        with self.lock:
                            self.crash_at = f[1]
                    elif f:
                        self.say('ERR unknown command "%s"', line.strip())
            except OSError:
                pass
            self.stop = True

        threading.Thread(target=read, name="stdin", daemon=True).start()

        def on_signal(*_: Any) -> None:
            self.stop = True

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def point(self, name: str) -> None:
        """If the demo asked to crash here, say so and wait for the kill -9."""
        with self.lock:
            hit = self.crash_at == name
            if hit:
                self.crash_at = None
        if hit:
            self.say("AT %s", name)
            time.sleep(30)  # killed long before

    def common(self) -> dict:
        return {"bootstrap.servers": self.a.bootstrap, "client.id": "demo-worker"}

    def run(self) -> int:
        self.listen()
        try:
            # Explicit mode in both modes: exactly-once needs it; at-least-once ACCEPTs explicitly.
            self.consumer = sharetx.new_share_consumer(dict(self.common(), **{
                "group.id": self.a.group, "max.poll.records": self.a.max_poll, "fetch.wait.max.ms": 500}))
            self.consumer.subscribe([self.a.input])
            if self.a.mode == EOS:
                self.txn = self.new_txn_producer()
            else:
                self.plain = Producer(dict(self.common(), **{"linger.ms": 0}))
        except KafkaException as e:
            self.say("ERR clients: %s", one_line(e))
            return 1
        self.say("READY")
        while not self.stop:
            try:
                msgs = [m for m in self.consumer.poll(1.0) if m.error() is None]
            except KafkaException as e:
                self.say("ERR poll: %s", one_line(e))
                continue
            if not msgs:
                continue
            # The "transformation": simulated work, so that the run lasts long enough for the
            # crashes to land in it. librdkafka does not cap a poll: --max-poll records per batch.
            for i in range(0, len(msgs), self.a.max_poll):
                batch = msgs[i:i + self.a.max_poll]
                time.sleep(len(batch) * self.a.record_time)
                if self.a.mode == EOS:
                    self.transact(batch)
                else:
                    self.produce_then_ack(batch)
        self.close_clients(20)
        self.say("EXIT")
        return 0

    def close_clients(self, timeout: float) -> None:
        try:
            self.consumer.close()  # sends the last acknowledgements, releases what was not acknowledged
        except KafkaException as e:
            self.say("ERR closing the consumer: %s", one_line(e))
        p = self.txn or self.plain
        if p is not None:
            try:
                p.close(timeout) if isinstance(p, sharetx.Producer) else p.flush(timeout)
            except KafkaException as e:
                self.say("ERR closing the producer: %s", one_line(e))

    # ------------------------------------------------------------ exactly-once

    def new_txn_producer(self) -> sharetx.Producer:
        """This incarnation's transactional producer, initialized at once: init_transactions fences
        the previous incarnation of the same transactional id and aborts the transaction it left open."""
        conf = dict(self.common(), **{"transactional.id": self.a.txn_id, "transaction.timeout.ms": 20000,
                                      "linger.ms": 0})
        attempt = 0
        while True:
            attempt += 1
            p = sharetx.Producer(conf)
            try:
                p.init_transactions(20)
                return p
            except KafkaException as e:
                self.say("ERR init_transactions (attempt %d): %s", attempt, one_line(e))
                try:
                    p.close(5)
                except KafkaException:
                    pass
                if attempt == 5:
                    raise
                time.sleep(1)

    def recreate_producer(self, why: str) -> None:
        self.say("ERR recreating the producer: %s", one_line(why))
        try:
            self.txn.close(5)  # type: ignore[union-attr]
        except KafkaException:
            pass
        try:
            self.txn = self.new_txn_producer()
        except KafkaException as e:
            self.say("ERR new producer: %s", one_line(e))
            sys.exit(1)

    def transact(self, msgs: List[Any]) -> None:
        n = len(msgs)
        try:
            self.txn.begin_transaction()  # type: ignore[union-attr]
        except KafkaException as e:
            self.recreate_producer("begin: %s" % e)
            try:
                self.txn.begin_transaction()  # type: ignore[union-attr]
            except KafkaException as e2:
                sharetx.release_for_redelivery(self.consumer, msgs)
                self.aborts += 1
                self.say("TXN abort n=%d commits=%d aborts=%d reason=%s", n, self.commits, self.aborts,
                         one_line("begin: %s" % e2))
                return
        p = self.txn
        assert p is not None
        self.say("TXN begin")
        err: Optional[str] = None
        try:
            produce_all(p, self.a.output, msgs, 20)
            self.say("PRODUCED n=%d", n)
            # The inputs' ACCEPT, bound to the transaction: applied if and only if it commits.
            try:
                p.send_share_acknowledgements_to_transaction(
                    sharetx.ShareAcknowledgements.from_messages(msgs, AcknowledgeType.ACCEPT), self.md, 20)
            except KafkaException as e:
                err = "TxnShareAcknowledge: %s" % e
        except KafkaException as e:
            err = "produce: %s" % e
        if err is None:
            self.point("produced")
        if err is None and self.rng.random() >= self.a.abort_rate:
            try:
                p.commit_transaction(20)
                self.commits += 1
                sharetx.acknowledge_handed_over(self.consumer, msgs)  # absorbed by sharetx
                self.say("TXN commit n=%d commits=%d aborts=%d", n, self.commits, self.aborts)
                self.point("committed")
                return
            except KafkaException as e:
                err = "commit: %s" % e
        reason = err or "random abort"
        try:
            p.abort_transaction(20)
        except KafkaException as e:
            # Fenced, or a commit that timed out: a new producer's init_transactions completes or
            # aborts the transaction.
            self.recreate_producer("abort: %s" % e)
        # Aborted: the records must be redelivered (absorbed if they were staged: sharetx released them).
        sharetx.release_for_redelivery(self.consumer, msgs)
        self.aborts += 1
        self.say("TXN abort n=%d commits=%d aborts=%d reason=%s", n, self.commits, self.aborts, one_line(reason))

    # ------------------------------------------------------------ at-least-once

    def produce_then_ack(self, msgs: List[Any]) -> None:
        """Produce the outputs, then acknowledge the inputs: a crash in between means duplicates."""
        n = len(msgs)
        try:
            produce_all(self.plain, self.a.output, msgs, 30)  # type: ignore[arg-type]
        except KafkaException as e:
            self.say("ERR produce: %s", one_line(e))
            for m in msgs:
                self.consumer.acknowledge(m, AcknowledgeType.RELEASE)  # redeliver
            return
        self.say("PRODUCED n=%d", n)
        self.point("produced")
        for m in msgs:
            self.consumer.acknowledge(m, AcknowledgeType.ACCEPT)
        try:
            for tp, e in self.consumer.commit_sync(30).items():
                if e is not None:
                    self.say("ERR commit acks %s: %s", tp, one_line(e))
        except KafkaException as e:
            self.say("ERR commit acks: %s", one_line(e))
        self.batches += 1
        self.say("ACK n=%d batches=%d", n, self.batches)
        self.point("committed")


def produce_all(p: Any, topic: str, msgs: List[Any], timeout: float) -> None:
    """One output per input (key and value: the input's value); waits until all are written."""
    errors: List[KafkaError] = []
    done = [0]

    def delivered(err: Optional[KafkaError], _m: Any) -> None:
        done[0] += 1
        if err is not None:
            errors.append(err)

    for m in msgs:
        p.produce(topic, key=m.value(), value=m.value(), on_delivery=delivered)
    end = time.monotonic() + timeout
    while done[0] < len(msgs):
        if time.monotonic() > end:
            raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "outputs not acknowledged in time", retriable=True))
        p.flush(min(1.0, max(0.0, end - time.monotonic())))
    if errors:
        raise KafkaException(errors[0])


def parse(argv: List[str]) -> argparse.Namespace:
    if argv and argv[0] == "worker":
        argv = argv[1:]  # as the Go worker is started: `demo worker --mode ...`
    argv = ["-" + a if a.startswith("-") and not a.startswith("--") else a for a in argv]
    p = argparse.ArgumentParser(prog="demo_worker.py", allow_abbrev=False)
    p.add_argument("--mode", default=EOS, choices=[EOS, ALO])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--in", dest="input", required=True)
    p.add_argument("--out", dest="output", required=True)
    p.add_argument("--txn-id", dest="txn_id", default="")
    p.add_argument("--max-poll", dest="max_poll", type=int, default=20)
    p.add_argument("--abort-rate", dest="abort_rate", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--record-time", dest="record_time", type=go_duration, default=0.03)
    a = p.parse_args(argv)
    if a.mode == EOS and not a.txn_id:
        p.error("--txn-id is required in mode exactly-once")
    if a.max_poll < 1:
        p.error("--max-poll must be >= 1")
    return a


def main() -> int:
    return Worker(parse(sys.argv[1:])).run()


if __name__ == "__main__":
    sys.exit(main())
