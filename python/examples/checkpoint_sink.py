#!/usr/bin/env python3
"""A checkpointing sink, exactly once, with a share group and no Kafka output: records go to a SQLite
database keyed by record id (an idempotent write: a redelivered record replaces its row), and per
checkpoint the database commits first, then the acknowledgements are committed in a transaction of
their own with sharetx.TransactionalShareAcknowledger.

    go run ./cmd/sharetx        # terminal 1: the zero-config start on 127.0.0.1:9092
    python3 python/examples/checkpoint_sink.py --group sink-example --input events \\
        --txn-id sink-example-1 --sink /tmp/sink.db --seed 1000 --max-records 1000 --batch 50 --fail-every 4

--fail-every N fails every N-th checkpoint after the sink wrote and before the acknowledgements'
commit, if it holds only first deliveries (the records come back; the sink writes them again,
idempotently; a record fails on purpose once at most, so that none reaches the group's delivery
count limit and is archived). It ends with a summary:
in (deliveries), acked, checkpoints, failed, sink (rows in the database). Each row counts its
deliveries and how often its acknowledgement was committed (acked: 1 for every row, exactly once).
"""

from __future__ import annotations

import signal
import sqlite3
import sys
import time

from confluent_kafka import AcknowledgeType, KafkaError, KafkaException

import sharetx
from example_setup import batches, client_config, consumer_config, first_delivery, parser, seed


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sink", required=True, help="the SQLite database file")
    p.add_argument("--fail-every", type=int, default=0, help="fail every n-th checkpoint on purpose")
    args = p.parse_args()
    if args.seed:
        seed(args.bootstrap, args.group, args.input, [], "event", args.seed, args.partitions)

    db = sqlite3.connect(args.sink, timeout=60)  # instances may share the database
    db.execute("CREATE TABLE IF NOT EXISTS sink (id TEXT PRIMARY KEY, value BLOB, deliveries INTEGER, acked INTEGER)")
    db.commit()
    conf = client_config(args.bootstrap)
    consumer = sharetx.new_share_consumer(consumer_config(args))
    consumer.subscribe([args.input])
    acker = sharetx.TransactionalShareAcknowledger(dict(conf, **{"transactional.id": args.txn_id}))
    acker.init_transactions()

    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    delivered = acked = checkpoints = failed = 0
    last = time.monotonic()
    try:
        while not stop and (not args.max_records or acked < args.max_records):
            msgs = [m for m in consumer.poll(1.0) if m.error() is None]
            if not msgs:
                if args.idle_seconds and time.monotonic() - last > args.idle_seconds:
                    break
                continue
            last = time.monotonic()
            delivered += len(msgs)
            for batch in batches(msgs, args.batch):
                checkpoints += 1
                # 1. The sink first, durably, idempotent per record id.
                with db:
                    db.executemany("INSERT INTO sink (id, value, deliveries, acked) VALUES (?, ?, 1, 0) ON CONFLICT(id) "
                                   "DO UPDATE SET value = excluded.value, deliveries = deliveries + 1",
                                   [((m.key() or b"").decode(), m.value()) for m in batch])
                acks = sharetx.ShareAcknowledgements.from_messages(batch, AcknowledgeType.ACCEPT)
                try:
                    if args.fail_every and checkpoints % args.fail_every == 0 and first_delivery(batch):
                        raise KafkaException(KafkaError(KafkaError._APPLICATION,
                                                        "failing this checkpoint on purpose (--fail-every %d)"
                                                        % args.fail_every))
                    # 2. Then the acknowledgements: begin, stage through the sidecar, commit.
                    try:
                        acker.commit_acknowledgements(acks, args.group)
                    except KafkaException as e:
                        if e.args[0].code() != KafkaError._TIMED_OUT:
                            raise
                        acker.commit_acknowledgements(acks, args.group)  # outcome unknown: the same call retries it
                    sharetx.acknowledge_handed_over(consumer, batch)  # 3. hand over: the consumer may poll again
                    acked += len(batch)
                    with db:  # for whoever watches the sink: these rows' acknowledgements are committed
                        db.executemany("UPDATE sink SET acked = acked + 1 WHERE id = ?",
                                       [((m.key() or b"").decode(),) for m in batch])
                except KafkaException as e:
                    if sharetx.is_fatal(e):
                        raise  # another instance took over, or no sidecar: stop
                    sharetx.release_for_redelivery(consumer, batch)  # aborted already: they come back
                    failed += 1
    finally:
        consumer.close()
        acker.close()
    rows = db.execute("SELECT COUNT(*) FROM sink").fetchone()[0]
    db.close()
    print("summary: in=%d acked=%d checkpoints=%d failed=%d sink=%d" % (delivered, acked, checkpoints, failed, rows),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
