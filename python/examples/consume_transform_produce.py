#!/usr/bin/env python3
"""Consume-transform-produce, exactly once, with a share group: per poll one transaction holding the
outputs (the input's value upper-cased, same key) and the inputs' ACCEPT; commit, or abort and
release them for redelivery.

    go run ./cmd/sharetx        # terminal 1: the zero-config start on 127.0.0.1:9092
    python3 python/examples/consume_transform_produce.py --group ctp-example --input orders \\
        --output orders-upper --txn-id ctp-example-1 --seed 1000 --max-records 1000 --batch 50 --abort-every 5

--abort-every N aborts every N-th transaction on purpose if it holds only first deliveries (its
inputs come back and are processed again; a record is aborted on purpose once at most, so that none
reaches the group's delivery count limit, 5 by default, and is archived unprocessed). It ends with a summary: in (deliveries), out (committed outputs), commits, aborts.
"""

from __future__ import annotations

import signal
import sys
import time

from confluent_kafka import AcknowledgeType, KafkaError, KafkaException

import sharetx
from example_setup import batches, client_config, consumer_config, first_delivery, parser, seed


def main() -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--output", required=True, help="the output topic")
    p.add_argument("--abort-every", type=int, default=0, help="abort every n-th transaction on purpose")
    args = p.parse_args()
    if args.seed:
        seed(args.bootstrap, args.group, args.input, [args.output], "order", args.seed, args.partitions)

    conf = client_config(args.bootstrap)
    consumer = sharetx.new_share_consumer(consumer_config(args))
    consumer.subscribe([args.input])
    producer = sharetx.Producer(dict(conf, **{"transactional.id": args.txn_id}))
    producer.init_transactions(60)
    metadata = sharetx.share_group_metadata(consumer, args.group)

    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    delivered = out = commits = aborts = txns = 0
    last = time.monotonic()
    try:
        while not stop and (not args.max_records or out < args.max_records):
            msgs = [m for m in consumer.poll(1.0) if m.error() is None]
            if not msgs:
                if args.idle_seconds and time.monotonic() - last > args.idle_seconds:
                    break
                continue
            last = time.monotonic()
            delivered += len(msgs)
            for batch in batches(msgs, args.batch):
                txns += 1
                producer.begin_transaction()
                try:
                    for m in batch:
                        producer.produce(args.output, key=m.key(), value=(m.value() or b"").upper())
                    producer.send_share_acknowledgements_to_transaction(                     # 1. stage
                        sharetx.ShareAcknowledgements.from_messages(batch, AcknowledgeType.ACCEPT), metadata)
                    if args.abort_every and txns % args.abort_every == 0 and first_delivery(batch):
                        raise KafkaException(KafkaError(KafkaError._APPLICATION, "aborting this transaction on "
                                                        "purpose (--abort-every %d)" % args.abort_every))
                    producer.commit_transaction(60)                                          # 2. commit
                    sharetx.acknowledge_handed_over(consumer, batch)                         # 3. hand over
                    out += len(batch)
                    commits += 1
                except KafkaException as e:
                    if sharetx.is_fatal(e):
                        raise  # fenced (another instance with this transactional id) or no sidecar: stop
                    producer.abort_transaction(60)                                           # on failure:
                    sharetx.release_for_redelivery(consumer, batch)                          # abort, release
                    aborts += 1
    finally:
        consumer.close()
        producer.close()
    print("summary: in=%d out=%d commits=%d aborts=%d" % (delivered, out, commits, aborts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
