"""The sidecar (and the cluster behind it) the scenario tests run against, from SHARETX_BOOTSTRAP and
friends (python/test-with-proxy.sh sets them). Without SHARETX_BOOTSTRAP the tests that need it skip,
saying why, unless SHARETX_REQUIRE_SIDECAR=1 (make test-python sets it): then they fail."""

from __future__ import annotations

import os
import time
import uuid
from typing import Any, Dict, Iterable, List, Optional, Set, Tuple

import pytest
from confluent_kafka import Consumer, KafkaException, Producer as PlainProducer
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic,
                                   ResourceType)

import sharetx
from sharetx._sidecar import Deadline, Settings, SidecarClient
from sharetx._wire import Reader, Writer

POLL = 60.0
QUIET = 3.0
RUN = uuid.uuid4().hex[:6]
_seq = [0]


def unique(prefix: str) -> str:
    _seq[0] += 1
    return "%s-%s-%d" % (prefix, RUN, _seq[0])


def env(name: str, what: str) -> str:
    v = os.environ.get(name, "").strip()
    if not v:
        msg = "%s is not set: %s (python/test-with-proxy.sh sets it)" % (name, what)
        if os.environ.get("SHARETX_REQUIRE_SIDECAR") == "1" and name == "SHARETX_BOOTSTRAP":
            pytest.fail(msg + "; SHARETX_REQUIRE_SIDECAR=1 forbids skipping")
        pytest.skip(msg)
    return v


def bootstrap() -> str:
    return env("SHARETX_BOOTSTRAP", "these tests need a sharetx proxy in front of a real Kafka cluster")


def plain() -> Dict[str, Any]:
    return {"bootstrap.servers": bootstrap()}


def sasl(mechanism: str, user: str, password: str) -> Dict[str, Any]:
    bootstrap()
    bs = env("SHARETX_SASL_BOOTSTRAP", "no proxy in front of a SASL listener")
    return {"bootstrap.servers": bs, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": mechanism,
            "sasl.username": user, "sasl.password": password}


def tls(mechanism: Optional[str], user: str = "", password: str = "") -> Dict[str, Any]:
    bootstrap()
    name = "SHARETX_TLS_BOOTSTRAP" if mechanism is None else "SHARETX_SASL_TLS_BOOTSTRAP"
    bs = env(name, "no proxy with TLS listeners" + ("" if mechanism is None else " in front of a SASL listener"))
    ca = env("SHARETX_TLS_CA", "no CA file for the TLS proxies")
    conf: Dict[str, Any] = {} if mechanism is None else sasl(mechanism, user, password)
    conf.update({"bootstrap.servers": bs, "security.protocol": "SSL" if mechanism is None else "SASL_SSL",
                 "ssl.ca.location": ca})
    return conf


def real_messages(msgs: Iterable[Any]) -> List[Any]:
    out = []
    for m in msgs:
        if m.error() is not None:
            if m.error().fatal():
                raise KafkaException(m.error())
            continue
        out.append(m)
    return out


def poll_some(c: Any, within: float = POLL) -> List[Any]:
    """The next non-empty poll, within ``within`` seconds."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        msgs = real_messages(c.poll(0.5))
        if msgs:
            return msgs
    raise AssertionError("no records polled within %.0f s" % within)


def offsets(msgs: Iterable[Any]) -> Set[Tuple[int, int]]:
    return {(m.partition(), m.offset()) for m in msgs}


class Setup:
    """A topic with ``partitions`` partitions and ``records`` records value-0.., an output topic, and a
    share group reading from the start; every client configured with ``conf``."""

    def __init__(self, partitions: int, records: int, conf: Optional[Dict[str, Any]] = None) -> None:
        self.conf = dict(conf if conf is not None else plain())
        self.admin = AdminClient(dict(self.conf))
        self.input = unique("pin")
        self.output = unique("pout")
        self.group = unique("pgroup")
        self.closeables: List[Any] = []
        for f in self.admin.create_topics([NewTopic(self.input, partitions, 1), NewTopic(self.output, 1, 1)],
                                          operation_timeout=30).values():
            f.result()
        r = ConfigResource(ResourceType.GROUP, self.group, incremental_configs=[
            ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
        for f in self.admin.incremental_alter_configs([r]).values():
            f.result()
        self.produce(records, 0)

    def produce(self, n: int, start: int) -> None:
        if n == 0:
            return
        p = PlainProducer(dict(self.conf, **{"linger.ms": 0}))
        for i in range(start, start + n):
            p.produce(self.input, key=b"key-%d" % i, value=b"value-%d" % i)
        assert p.flush(30) == 0

    def consumer(self, client_id: Optional[str] = None, extra: Optional[Dict[str, Any]] = None) -> Any:
        c = sharetx.new_share_consumer(dict(self.conf, **{"group.id": self.group,
                                                          "client.id": client_id or unique("pmember")},
                                            **(extra or {})))
        c.subscribe([self.input])
        self.closeables.append(c)
        return c

    def producer(self, txn_id: Optional[str] = None, extra: Optional[Dict[str, Any]] = None) -> sharetx.Producer:
        p = sharetx.Producer(dict(self.conf, **{"transactional.id": txn_id or unique("ptxn")}, **(extra or {})))
        self.closeables.append(p)
        return p

    def committed_outputs(self, quiet: float = QUIET) -> List[bytes]:
        """The committed values of the output topic (read_committed), read for ``quiet`` seconds after
        the consumer got its assignment."""
        c = Consumer(dict(self.conf, **{"group.id": unique("pread"), "isolation.level": "read_committed",
                                        "auto.offset.reset": "earliest", "enable.auto.commit": False}))
        got: List[bytes] = []
        try:
            c.subscribe([self.output])
            start = time.monotonic()
            last = start
            while time.monotonic() - last < quiet or (not c.assignment() and time.monotonic() - start < 30):
                m = c.poll(0.5)
                if m is not None and m.error() is None:
                    got.append(m.value())
                    last = time.monotonic()
                elif not c.assignment():
                    last = time.monotonic()
        finally:
            c.close()
        return got

    def left_for_fresh_member(self, quiet: float = QUIET) -> List[Any]:
        """What a new member of the group is handed until the group has been quiet for ``quiet`` seconds
        (joining takes a heartbeat or two first). Records the broker acknowledged are never
        delivered again."""
        c = sharetx.new_share_consumer(dict(self.conf, **{"group.id": self.group, "client.id": unique("pfresh")}))
        got: List[Any] = []
        try:
            c.subscribe([self.input])
            start = time.monotonic()
            last = start
            join = 6.0
            while time.monotonic() - last < quiet or time.monotonic() - start < quiet + join:
                msgs = real_messages(c.poll(0.5))
                for m in msgs:
                    c.acknowledge(m, sharetx.AcknowledgeType.RELEASE)
                if msgs:
                    got.extend(msgs)
                    last = time.monotonic()
        finally:
            c.close()
        return got

    def member_of(self, client_id: str) -> sharetx.ShareGroupMetadata:
        """The member as the group coordinator has it (ShareGroupDescribe v1 through the sidecar)."""
        end = time.monotonic() + 30
        while time.monotonic() < end:
            for member_id, epoch, cid in describe_share_group(self.conf, self.group):
                if cid == client_id:
                    return sharetx.ShareGroupMetadata(self.group, member_id, epoch)
            time.sleep(0.2)
        raise AssertionError("member %s not in group %s" % (client_id, self.group))

    def close_clients(self) -> None:
        while self.closeables:
            c = self.closeables.pop()
            c.close()

    def close(self) -> None:
        try:
            self.close_clients()
        finally:
            try:
                for f in self.admin.delete_topics([self.input, self.output], operation_timeout=10).values():
                    f.result()
            except Exception:
                pass  # best effort

    def __enter__(self) -> "Setup":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def describe_share_group(conf: Dict[str, Any], group: str) -> List[Tuple[str, int, str]]:
    """(member id, member epoch, client id) of every member of ``group``: ShareGroupDescribe v1
    (key 77), on the library's own connection (confluent-kafka has no share-group describe)."""
    s, _ = Settings.of(conf)
    c = SidecarClient(s)
    try:
        body = Writer().compact_array_len(1).compact_string(group).bool(False).no_tags().getvalue()
        b = c.request(s.bootstrap[0], 77, 1, True, body, Deadline(10))
    finally:
        c.close()
    r = Reader(b)
    r.int32()
    out = []
    for _ in range(r.compact_array_len()):
        code = r.int16()
        r.compact_string()  # message
        r.compact_string()  # group id
        r.compact_string()  # state
        r.int32()
        r.int32()
        r.compact_string()  # assignor
        for _ in range(r.compact_array_len()):
            member_id = r.compact_string() or ""
            r.compact_string()  # rack
            epoch = r.int32()
            client_id = r.compact_string() or ""
            r.compact_string()  # host
            for _ in range(r.compact_array_len()):
                r.compact_string()
            for _ in range(r.compact_array_len()):  # assignment
                r.uuid()
                r.compact_string()
                for _ in range(r.compact_array_len()):
                    r.int32()
                r.skip_tags()
            r.skip_tags()  # assignment
            r.skip_tags()  # member
            out.append((member_id, epoch, client_id))
        r.int32()
        r.skip_tags()
        if code:
            raise AssertionError("ShareGroupDescribe %s: error code %d" % (group, code))
    return out


def wait_redelivered(c: Any, want: List[Any], within: float, handler: Any) -> float:
    """Polls until every record of ``want`` is delivered again (delivery count at least 2), handing
    each poll's redeliveries to ``handler`` (which must acknowledge them before the next poll);
    returns how long it took. Others are released."""
    t0 = time.monotonic()
    left = offsets(want)
    while left:
        if time.monotonic() - t0 > within:
            raise AssertionError("%d of %d records not redelivered within %.0f s" % (len(left), len(want), within))
        mine = []
        for m in real_messages(c.poll(0.5)):
            if (m.partition(), m.offset()) in left:
                left.discard((m.partition(), m.offset()))
                dc = m.delivery_count()
                assert dc is not None and dc >= 2, "redelivered with delivery count %r" % dc
                mine.append(m)
            else:
                c.acknowledge(m, sharetx.AcknowledgeType.RELEASE)  # not one of ours
        if mine:
            handler(mine)
    return time.monotonic() - t0
