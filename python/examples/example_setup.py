"""What both examples share: options, and --seed (create the topics, start the share group at the
earliest offset, produce N inputs) so that no Kafka CLI is needed against the zero-config start."""

from __future__ import annotations

import argparse
from typing import Any, Dict, List

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--bootstrap", default="127.0.0.1:9092", help="the sharetx sidecar (default: the zero-config start)")
    p.add_argument("--group", required=True, help="the share group")
    p.add_argument("--input", required=True, help="the input topic")
    p.add_argument("--txn-id", required=True, help="the transactional id (one per instance)")
    p.add_argument("--seed", type=int, default=0, help="create the topics and produce this many inputs first")
    p.add_argument("--partitions", type=int, default=3, help="the input topic's partitions, with --seed")
    p.add_argument("--max-records", type=int, default=0, help="stop once this many records are done (0: never)")
    p.add_argument("--batch", type=int, default=0,
                   help="at most this many records per transaction (a poll's records in several; 0: one per poll)")
    p.add_argument("--idle-seconds", type=float, default=0, help="stop after this long without records (0: never)")
    return p


def seed(bootstrap: str, group: str, input_topic: str, outputs: List[str], prefix: str, n: int,
         partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(t, partitions if t == input_topic else 1, 1) for t in [input_topic] + outputs]
    for t, f in admin.create_topics(new, operation_timeout=30).items():
        try:
            f.result()
        except Exception as e:  # already there: fine
            if "TOPIC_ALREADY_EXISTS" not in str(e):
                raise
    r = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([r]).values():
        f.result()
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(input_topic, key=b"%s-%d" % (prefix.encode(), i), value=b"%s-%d" % (prefix.encode(), i))
        p.poll(0)
    if p.flush(60) != 0:
        raise SystemExit("seeding: not every input was acknowledged within 60 s")


def client_config(bootstrap: str) -> Dict[str, Any]:
    return {"bootstrap.servers": bootstrap}


def consumer_config(args: argparse.Namespace) -> Dict[str, Any]:
    return dict(client_config(args.bootstrap), **{"group.id": args.group})


def first_delivery(msgs: List[Any]) -> bool:
    """Whether every record of ``msgs`` is delivered for the first time. The examples fail on purpose
    only such transactions: a record that failed over and over would reach the share group's
    delivery count limit (share.delivery.count.limit, 5 by default) and be archived unprocessed,
    which is Kafka's poison-record protection, not a loss of sharetx's."""
    return all((m.delivery_count() or 1) <= 1 for m in msgs)


def batches(msgs: List[Any], size: int) -> List[List[Any]]:
    """A poll's records in transactions of at most ``size`` (all of them when size is 0)."""
    if size <= 0:
        return [msgs]
    return [msgs[i:i + size] for i in range(0, len(msgs), size)]
