#!/usr/bin/env python3
"""The chaos test's consume-transform-produce worker in Python: confluent-kafka's ShareConsumer
(explicit acknowledgement mode) and the sharetx package's Producer, through a sharetx sidecar. It
behaves as the Go worker (e2e/chaos/worker.go) and the Java one (e2e/chaos/java) and speaks the same
lines with the orchestrator (documented at the top of e2e/chaos/worker.go): lines on stdout, commands
on stdin (stop, hold <point> <duration>; the end of stdin is a stop), SIGTERM and SIGINT a stop.
`go run ./e2e/chaos --worker-lang python` starts it with python/venv.sh's interpreter as

    python e2e/chaos/python/chaos_worker.py --name w1 --bootstrap 127.0.0.1:9092 --group g --in in \\
        --out out --txn-id t1 [--max-poll 50 --abort-rate 0.15 --seed 1 --txn-timeout 20s]

One transaction per poll (a poll larger than --max-poll in several: librdkafka 2.16's share
consumer does not cap a poll): an output record per input (key and value: the input's value); the
records' ACCEPT bound to the transaction (the first half in a deferred call, defer=True, the second
half in the call that stages both: a hold point of its own, "deferred", between the two); the
records acknowledged on the consumer
(acknowledge_handed_over: the sidecar absorbs it, the transaction decides); commit; or, on purpose
(--abort-rate) or on any error, abort and release_for_redelivery. A producer that cannot go on
(fatal, its abort failed, or three transactions failed in a row) is replaced: init_transactions of a
new one with the same transactional id bumps the epoch and aborts whatever the old one left open.
"""

from __future__ import annotations

import argparse
import random
import re
import signal
import sys
import threading
import time
from typing import Any, Dict, List, Optional

from confluent_kafka import AcknowledgeType, KafkaError, KafkaException

import sharetx

TIMEOUT = 60.0  # every blocking call's, as the Java worker's max.block.ms


def go_duration(s: str) -> float:
    """Seconds of a duration in Go's syntax: "0", "20s", "1m30s", "1.5s", "300ms"."""
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


def one_line(s: object) -> str:
    return str(s).replace("\n", " ").replace("\r", " ")


def describe(e: BaseException) -> str:
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        err = e.args[0]
        return one_line("KafkaException %s: %s" % (err.name(), err.str()))
    return one_line("%s: %s" % (type(e).__name__, e))


class Orchestrator:
    """The worker's side of the line protocol: nothing here is about Kafka."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holds: Dict[str, float] = {}
        self.stop = False

    def say(self, fmt: str, *args: Any) -> None:
        with self._lock:
            sys.stdout.write((fmt % args if args else fmt) + "\n")
            sys.stdout.flush()

    def listen(self) -> None:
        def read() -> None:
            try:
                for line in sys.stdin:
                    self._command(line)
            except Exception as e:  # noqa: BLE001 - reported, then treated as the end of stdin
                self.say("ERR reading stdin: %s", one_line(e))
            self.stop = True  # the orchestrator is gone

        threading.Thread(target=read, name="orchestrator-stdin", daemon=True).start()

        def on_signal(*_: Any) -> None:
            self.stop = True

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)

    def _command(self, line: str) -> None:
        f = line.split()
        if not f:
            return
        if f == ["stop"]:
            self.stop = True
            return
        if len(f) == 3 and f[0] == "hold":
            try:
                d = go_duration(f[2])
            except ValueError as e:
                self.say('ERR bad command "%s": %s', line.strip(), e)
                return
            with self._lock:
                self._holds[f[1]] = d
            return
        self.say('ERR unknown command "%s"', line.strip())

    def hold(self, point: str) -> bool:
        with self._lock:
            d = self._holds.pop(point, None)
        if d is None:
            return False
        self.say("HOLD %s", point)
        time.sleep(d)
        self.say("HOLD-END %s", point)
        return True


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.a = args
        self.orch = Orchestrator()
        self.rng = random.Random(args.seed)
        self.consumer: Any = None
        self.producer: Optional[sharetx.Producer] = None
        self.metadata = sharetx.ShareGroupMetadata.for_group(args.group)
        self.commits = self.aborts = self.failed_in_a_row = 0
        self.polled_at = 0.0
        self.last_end = 0.0

    def producer_config(self) -> Dict[str, Any]:
        return {"bootstrap.servers": self.a.bootstrap, "client.id": "chaos-" + self.a.name,
                "transactional.id": self.a.txn_id, "transaction.timeout.ms": int(self.a.txn_timeout * 1000),
                "linger.ms": 0}

    def run(self) -> int:
        self.orch.listen()
        try:
            self.consumer = sharetx.new_share_consumer({
                "bootstrap.servers": self.a.bootstrap, "group.id": self.a.group, "client.id": "chaos-" + self.a.name,
                "max.poll.records": self.a.max_poll, "fetch.wait.max.ms": 500})
            self.consumer.subscribe([self.a.input])
            # The consumer's own acknowledgements: the sidecar absorbs those of handed-over records;
            # a failure (say, after a stall, of records whose lock expired) is logged.
            self.consumer.set_acknowledgement_commit_callback(self._ack_committed)
        except KafkaException as e:
            self.orch.say("ERR consumer: %s", describe(e))
            return 1
        try:
            self.producer = self.new_producer()
        except KafkaException as e:
            self.orch.say("ERR producer: %s", describe(e))
            return 1
        self.orch.say("READY")
        while not self.orch.stop:
            try:
                msgs = [m for m in self.consumer.poll(2.0) if m.error() is None]
            except Exception as e:  # noqa: BLE001 - the worker goes on, as the Java one
                self.orch.say("ERR poll: %s", describe(e))
                time.sleep(0.5)
                continue
            if not msgs:
                continue
            self.polled_at = time.monotonic()
            self.orch.hold("polled")
            for i in range(0, len(msgs), self.a.max_poll):
                batch = msgs[i:i + self.a.max_poll]
                try:
                    self.transact(batch)
                finally:
                    self.last_end = time.monotonic()
        # Every record of the last poll is acknowledged (handed over or released): close sends those
        # acknowledgements; the sidecar absorbs the ones of committed offsets.
        self._close("consumer", self.consumer.close)
        self._close("producer", lambda: self.producer.close(20))  # type: ignore[union-attr]
        self.orch.say("EXIT commits=%d aborts=%d", self.commits, self.aborts)
        return 0

    def _ack_committed(self, offsets: Any, error: Any) -> None:
        if error is not None:
            print("acknowledgement commit failed for %s: %s" % (offsets, error), file=sys.stderr, flush=True)

    def new_producer(self) -> sharetx.Producer:
        """A new transactional producer, initialized at once: init_transactions fences a previous
        incarnation and aborts the transaction it left open. Five tries (fewer if told to stop)."""
        p = sharetx.Producer(self.producer_config())
        attempt = 0
        while True:
            attempt += 1
            try:
                p.init_transactions(TIMEOUT)
                # librdkafka does not expose the producer id and epoch; the sidecar resolves them
                # from the transactional id (the library sends -1/-1).
                self.orch.say("INIT producer_id=-1 epoch=-1 txn_id=%s", self.a.txn_id)
                return p
            except KafkaException as e:
                self.orch.say("ERR InitProducerId (attempt %d): %s", attempt, describe(e))
                if attempt == 5 or self.orch.stop:
                    self._close("producer", lambda: p.close(5))
                    raise
                if not sharetx.is_retriable(e):
                    self._close("producer", lambda: p.close(5))
                    p = sharetx.Producer(self.producer_config())
                time.sleep(1)

    def recreate_producer(self, why: str) -> None:
        self.orch.say("ERR recreating the producer: %s", one_line(why))
        old = self.producer
        self._close("the old producer", lambda: old.close(10))  # type: ignore[union-attr]
        try:
            self.producer = self.new_producer()
        except KafkaException as e:
            self.orch.say("ERR new producer: %s", describe(e))
            sys.exit(1)
        self.failed_in_a_row = 0

    def transact(self, msgs: List[Any]) -> None:
        """One batch in one transaction (see the module documentation)."""
        p = self.producer
        assert p is not None
        n = len(msgs)
        ms = [0, 0, 0, 0]  # poll wait since the previous transaction, produce, TxnShareAcknowledge, end
        ms[0] = 0 if not self.last_end else max(0, int((self.polled_at - self.last_end) * 1000))
        try:
            p.begin_transaction()
        except Exception as e:  # noqa: BLE001 - a producer that cannot begin is broken
            self.recreate_producer("begin: " + describe(e))
            p = self.producer
            assert p is not None
            try:
                p.begin_transaction()
            except Exception as e2:  # noqa: BLE001
                self.orch.say("ERR begin after recreate: %s", describe(e2))
                sharetx.release_for_redelivery(self.consumer, msgs)
                self.aborts += 1
                self.orch.say("TXN abort n=%d commits=%d aborts=%d reason=%s", n, self.commits, self.aborts,
                              "begin: " + describe(e2))
                return
        error: Optional[str] = None
        t = time.monotonic()
        try:
            self.produce(p, msgs)
        except Exception as e:  # noqa: BLE001
            error = "produce: " + describe(e)
        ms[1] = lap(t)
        if error is None:
            t = time.monotonic()
            try:
                # The first half deferred (held by the sidecar, nothing written), then the second
                # half staged with it in one call, as a transaction over two polls does
                # (docs/design.md §4.5); "deferred" holds between the two.
                half = n // 2
                if half:
                    p.send_share_acknowledgements_to_transaction(
                        sharetx.ShareAcknowledgements.from_messages(msgs[:half], AcknowledgeType.ACCEPT), self.metadata,
                        TIMEOUT, defer=True)
                    self.orch.hold("deferred")
                p.send_share_acknowledgements_to_transaction(
                    sharetx.ShareAcknowledgements.from_messages(msgs[half:], AcknowledgeType.ACCEPT), self.metadata, TIMEOUT)
                # Staged: the consumer may let go of the records (absorbed by the sidecar).
                sharetx.acknowledge_handed_over(self.consumer, msgs)
            except Exception as e:  # noqa: BLE001
                error = "TxnShareAcknowledge: " + describe(e)
            ms[2] = lap(t)
        held = error is None and self.orch.hold("staged")
        # A transaction held on purpose always tries to commit: the fault is about what that commit does.
        on_purpose = error is None and not held and self.rng.random() < self.a.abort_rate
        if error is None and not on_purpose:
            t = time.monotonic()
            try:
                p.commit_transaction(TIMEOUT)
                ms[3] = lap(t)
                self.commits += 1
                self.failed_in_a_row = 0
                self.orch.say("TXN commit n=%d commits=%d aborts=%d ms=%s recs=%s", n, self.commits, self.aborts,
                              timings(ms), rec_list(msgs))
                self.orch.hold("committed")
                return
            except Exception as e:  # noqa: BLE001
                ms[3] = lap(t)
                error = "commit: " + describe(e)
        reason = "random"
        if error is not None:
            reason = error
            self.failed_in_a_row += 1
        t = time.monotonic()
        try:
            p.abort_transaction(TIMEOUT)
            ms[3] = lap(t)
            if self.failed_in_a_row >= 3:
                self.recreate_producer("%d transactions failed in a row" % self.failed_in_a_row)
        except Exception as e:  # noqa: BLE001 - fenced, fatal, or a commit whose outcome is unknown
            ms[3] = lap(t)
            self.recreate_producer("abort: " + describe(e))
        # Staged records the sidecar released at the abort (this RELEASE is absorbed); the others go
        # back to the broker for redelivery. Never ACCEPT them: that would count them as processed.
        sharetx.release_for_redelivery(self.consumer, msgs)
        self.aborts += 1
        self.orch.say("TXN abort n=%d commits=%d aborts=%d ms=%s recs=%s reason=%s", n, self.commits, self.aborts,
                      timings(ms), rec_list(msgs), one_line(reason))

    def produce(self, p: sharetx.Producer, msgs: List[Any]) -> None:
        """The outputs: one per input, key and value the input's value (its id); waits until all are written."""
        errors: List[KafkaError] = []
        done = [0]

        def delivered(err: Optional[KafkaError], _msg: Any) -> None:
            done[0] += 1
            if err is not None:
                errors.append(err)

        for m in msgs:
            p.produce(self.a.output, key=m.value(), value=m.value(), on_delivery=delivered)
        end = time.monotonic() + TIMEOUT
        while done[0] < len(msgs):
            if time.monotonic() > end:
                raise KafkaException(KafkaError(KafkaError._TIMED_OUT, "outputs not acknowledged within %.0f s" % TIMEOUT,
                                                retriable=True))
            p.flush(min(1.0, max(0.0, end - time.monotonic())))
        if errors:
            raise KafkaException(errors[0])

    def _close(self, what: str, close: Any) -> None:
        try:
            close()
        except Exception as e:  # noqa: BLE001
            self.orch.say("ERR closing %s: %s", what, describe(e))


def lap(since: float) -> int:
    return int((time.monotonic() - since) * 1000)


def timings(ms: List[int]) -> str:
    return "/".join(str(x) for x in ms)


def rec_list(msgs: List[Any]) -> str:
    """partition:offset:deliveryCount of every record, for the orchestrator's duplicate diagnosis."""
    return ",".join("%d:%d:%d" % (m.partition(), m.offset(), m.delivery_count() or 0) for m in msgs)


def parse(argv: List[str]) -> argparse.Namespace:
    """The Go worker's flags, one or two dashes, --name value or --name=value."""
    argv = ["-" + a if a.startswith("-") and not a.startswith("--") else a for a in argv]
    p = argparse.ArgumentParser(prog="chaos_worker.py", allow_abbrev=False)
    p.add_argument("--name", default="worker")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--in", dest="input", required=True)
    p.add_argument("--out", dest="output", required=True)
    p.add_argument("--txn-id", dest="txn_id", required=True)
    p.add_argument("--max-poll", dest="max_poll", type=int, default=50)
    p.add_argument("--abort-rate", dest="abort_rate", type=float, default=0.15)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--txn-timeout", dest="txn_timeout", type=go_duration, default=20.0)
    p.add_argument("--kgo-log", dest="kgo_log", default="warn", help="the Go worker's; accepted, not used")
    a = p.parse_args(argv)
    if a.max_poll < 1 or not 0 <= a.abort_rate < 1:
        p.error("--max-poll must be >= 1, --abort-rate in [0,1)")
    return a


def main() -> int:
    w = Worker(parse(sys.argv[1:]))
    try:
        return w.run()
    except Exception as e:  # noqa: BLE001
        w.orch.say("ERR %s", describe(e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
