"""The messages the library sends on its own connection, encoded by hand: ApiVersions v0,
SaslHandshake v1, SaslAuthenticate v1, Metadata v12, and TxnShareAcknowledge v0 in the layout of
KIP-1289's reference implementation (docs/protocol.md; the same bytes as the Go codec kip1289 and
the Java library's Protocol)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ._wire import MalformedResponse, Reader, Writer

API_VERSIONS = 18
METADATA = 3
SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36
#: TxnShareAcknowledge's key in the reference's latest revision, and sharetx's default
#: (the sidecar's kip1289.api_key).
DEFAULT_TXN_SHARE_ACKNOWLEDGE_KEY = 95
#: The top-level tagged field of sharetx's RideProduce extension (not sent by this library).
RIDE_PRODUCE_TAG = 10000
#: The top-level tagged field of sharetx's TouchOffset extension (an int64): the offset of the
#: call's own touch record, so that the sidecar checks the call against the producer id and epoch
#: that touch was written with (docs/protocol.md).
TOUCH_OFFSET_TAG = 10001
OUTPUT_RECORD_TAG = 10002
DEFER_TAG = 10003

ZERO_UUID = uuid.UUID(int=0)


def frame(key: int, version: int, correlation_id: int, client_id: Optional[str], flexible: bool, body: bytes) -> bytes:
    """A request frame without its size prefix: header v1 (classic) or v2 (flexible), then the body."""
    w = Writer().int16(key).int16(version).int32(correlation_id).string(client_id)
    if flexible:
        w.no_tags()
    return w.raw(body).getvalue()


# ---------------------------------------------------------------- TxnShareAcknowledge


@dataclass(frozen=True)
class AckPartition:
    """One partition of a TxnShareAcknowledge request: (first offset, last offset, types) batches."""

    topic_id: uuid.UUID
    partition: int
    batches: Sequence[Tuple[int, int, Sequence[int]]]


def txn_share_acknowledge(transactional_id: Optional[str], group_id: str, producer_id: int, producer_epoch: int,
                          member_id: str, member_epoch: int, partitions: Iterable[AckPartition],
                          touch_offset: Optional[int] = None,
                          output_record: Optional["OutputRef"] = None, defer: bool = False) -> bytes:
    """TxnShareAcknowledgeRequest v0, fields in the reference's wire order: TransactionalId, GroupId,
    ProducerId, ProducerEpoch, MemberId, MemberEpoch, Topics[TopicId, Partitions[PartitionIndex,
    AcknowledgementBatches[FirstOffset, LastOffset, AcknowledgeTypes[int8]]]]. Partitions of one
    topic id are grouped, in the order given. touch_offset (sharetx's TouchOffset extension, a
    tagged field) names the call's touch record; output_record (its OutputRecord extension) one of
    the transaction's outputs instead; defer (its Defer extension) asks the sidecar to hold the
    acknowledgements for a later call of the transaction instead of staging them."""
    by_topic: Dict[uuid.UUID, List[AckPartition]] = {}
    for p in partitions:
        by_topic.setdefault(p.topic_id, []).append(p)
    w = (Writer().compact_string(transactional_id).compact_string(group_id).int64(producer_id).int16(producer_epoch)
         .compact_string(member_id).int32(member_epoch).compact_array_len(len(by_topic)))
    for tid, ps in by_topic.items():
        w.uuid(tid).compact_array_len(len(ps))
        for p in ps:
            w.int32(p.partition).compact_array_len(len(p.batches))
            for first, last, types in p.batches:
                w.int64(first).int64(last).compact_array_len(len(types))
                for t in types:
                    w.int8(t)
                w.no_tags()
            w.no_tags()
        w.no_tags()
    tags = int(touch_offset is not None) + int(output_record is not None) + int(defer)
    w.uvarint(tags)  # tagged fields, in increasing tag order
    if touch_offset is not None:
        w.uvarint(TOUCH_OFFSET_TAG).uvarint(8).int64(touch_offset)
    if output_record is not None:
        o = output_record
        v = (Writer().uuid(o.topic_id or ZERO_UUID).compact_string(o.topic).int32(o.partition).int64(o.offset)
             .getvalue())
        w.uvarint(OUTPUT_RECORD_TAG).uvarint(len(v)).raw(v)
    if defer:
        w.uvarint(DEFER_TAG).uvarint(1).int8(1)
    return w.getvalue()


@dataclass(frozen=True)
class OutputRef:
    """One of the transaction's output records (sharetx's OutputRecord extension): topic name, its
    id when known (None otherwise), partition and offset, from the record's delivery report."""

    topic: str
    topic_id: Optional[uuid.UUID]
    partition: int
    offset: int


@dataclass(frozen=True)
class PartitionResult:
    topic_id: uuid.UUID
    partition: int
    error_code: int
    error_message: Optional[str]


@dataclass
class AckResponse:
    """A decoded TxnShareAcknowledgeResponse v0."""

    error_code: int = 0
    partitions: List[PartitionResult] = field(default_factory=list)

    def effective_code(self) -> int:
        """What the reference client reads: the top-level code wins, else the first partition code."""
        if self.error_code:
            return self.error_code
        for p in self.partitions:
            if p.error_code:
                return p.error_code
        return 0

    def message(self) -> Optional[str]:
        """The first message beside the effective code (sharetx repeats the top-level code's
        message on the partitions), else the first message."""
        code = self.effective_code()
        for p in self.partitions:
            if p.error_code == code and p.error_message is not None:
                return p.error_message
        for p in self.partitions:
            if p.error_message is not None:
                return p.error_message
        return None


def parse_txn_share_acknowledge(body: bytes) -> AckResponse:
    """TxnShareAcknowledgeResponse v0 (after the response header v1): ThrottleTimeMs, ErrorCode,
    Responses[TopicId, Partitions[PartitionIndex, ErrorCode, ErrorMessage]]; no top-level message."""
    r = Reader(body)
    out = AckResponse()
    r.int32()  # throttle
    out.error_code = r.int16()
    for _ in range(max(0, r.compact_array_len())):
        tid = r.uuid()
        for _ in range(max(0, r.compact_array_len())):
            part = r.int32()
            code = r.int16()
            msg = r.compact_string()
            r.skip_tags()
            out.partitions.append(PartitionResult(tid, part, code, msg))
        r.skip_tags()
    r.skip_tags()
    r.expect_end("TxnShareAcknowledgeResponse")
    return out


# ---------------------------------------------------------------- ApiVersions v0


def parse_api_versions_v0(body: bytes) -> Tuple[int, Dict[int, Tuple[int, int]]]:
    """ApiVersions v0 response: the error code and key -> (min, max)."""
    r = Reader(body)
    err = r.int16()
    n = r.array_len(6)
    keys: Dict[int, Tuple[int, int]] = {}
    for _ in range(max(0, n)):
        key = r.int16()
        keys[key] = (r.int16(), r.int16())
    return err, keys


# ---------------------------------------------------------------- SASL


def sasl_handshake_v1(mechanism: str) -> bytes:
    return Writer().string(mechanism).getvalue()


def parse_sasl_handshake_v1(body: bytes) -> Tuple[int, List[str]]:
    r = Reader(body)
    err = r.int16()
    mechs = [r.string() or "" for _ in range(max(0, r.array_len(2)))]
    return err, mechs


def sasl_authenticate_v1(auth_bytes: bytes) -> bytes:
    return Writer().bytes_(auth_bytes).getvalue()


def parse_sasl_authenticate_v1(body: bytes) -> Tuple[int, Optional[str], bytes]:
    r = Reader(body)
    err = r.int16()
    msg = r.string()
    auth = r.bytes_() or b""
    r.int64()  # session lifetime
    return err, msg, auth


# ---------------------------------------------------------------- Metadata v12


def metadata_v12(topics: Sequence[str]) -> bytes:
    w = Writer().compact_array_len(len(topics))
    for t in topics:
        w.uuid(ZERO_UUID).compact_string(t).no_tags()
    return w.bool(False).bool(False).no_tags().getvalue()  # allow auto creation, authorized operations


@dataclass
class TopicMeta:
    error_code: int
    topic_id: uuid.UUID
    leaders: Dict[int, int] = field(default_factory=dict)  # partition -> leader node id


@dataclass
class Metadata:
    brokers: Dict[int, str] = field(default_factory=dict)  # node id -> "host:port" (the sidecar's listeners)
    topics: Dict[str, TopicMeta] = field(default_factory=dict)


def parse_metadata_v12(body: bytes) -> Metadata:
    r = Reader(body)
    md = Metadata()
    r.int32()  # throttle
    for _ in range(max(0, r.compact_array_len())):
        node = r.int32()
        host = r.compact_string() or ""
        port = r.int32()
        r.compact_string()  # rack
        r.skip_tags()
        md.brokers[node] = host_port(host, port)
    r.compact_string()  # cluster id
    r.int32()  # controller id
    for _ in range(max(0, r.compact_array_len())):
        code = r.int16()
        name = r.compact_string()
        tid = r.uuid()
        r.bool()  # internal
        tm = TopicMeta(code, tid)
        for _ in range(max(0, r.compact_array_len())):
            r.int16()  # partition error
            part = r.int32()
            leader = r.int32()
            r.int32()  # leader epoch
            for _ in range(3):  # replicas, isr, offline
                for _ in range(max(0, r.compact_array_len())):
                    r.int32()
            r.skip_tags()
            tm.leaders[part] = leader
        r.int32()  # topic authorized operations
        r.skip_tags()
        if name is not None:
            md.topics[name] = tm
    r.skip_tags()
    return md


def host_port(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = "[" + host + "]"
    return "%s:%d" % (host, port)


def split_host_port(address: str) -> Tuple[str, int]:
    host, sep, port = address.strip().rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError("bootstrap.servers: %r is not host:port" % address)
    return host.strip("[]"), int(port)


__all__ = [
    "API_VERSIONS", "METADATA", "SASL_HANDSHAKE", "SASL_AUTHENTICATE", "DEFAULT_TXN_SHARE_ACKNOWLEDGE_KEY",
    "AckPartition", "AckResponse", "PartitionResult", "Metadata", "TopicMeta", "MalformedResponse",
    "frame", "txn_share_acknowledge", "parse_txn_share_acknowledge", "parse_api_versions_v0", "sasl_handshake_v1",
    "parse_sasl_handshake_v1", "sasl_authenticate_v1", "parse_sasl_authenticate_v1", "metadata_v12",
    "parse_metadata_v12", "host_port", "split_host_port", "ZERO_UUID",
]
