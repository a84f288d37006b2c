"""Errors as confluent-kafka raises them (KafkaException wrapping a KafkaError), classified as
KIP-1289's reference client classifies TxnShareAcknowledge's error codes (docs/protocol.md, Errors):
retriable, abortable (txn_requires_abort) or fatal (every other code)."""

from __future__ import annotations

from typing import Optional

from confluent_kafka import KafkaError, KafkaException

# Kafka's retriable error codes (org.apache.kafka.common.errors.RetriableException subclasses)
# among those a TxnShareAcknowledge answer can carry.
RETRIABLE_CODES = frozenset({
    2,    # CORRUPT_MESSAGE
    3,    # UNKNOWN_TOPIC_OR_PARTITION
    5,    # LEADER_NOT_AVAILABLE
    6,    # NOT_LEADER_OR_FOLLOWER
    7,    # REQUEST_TIMED_OUT
    13,   # NETWORK_EXCEPTION
    14,   # COORDINATOR_LOAD_IN_PROGRESS
    15,   # COORDINATOR_NOT_AVAILABLE
    16,   # NOT_COORDINATOR
    19,   # NOT_ENOUGH_REPLICAS
    20,   # NOT_ENOUGH_REPLICAS_AFTER_APPEND
    51,   # CONCURRENT_TRANSACTIONS
    56,   # KAFKA_STORAGE_ERROR
    74,   # FENCED_LEADER_EPOCH
    75,   # UNKNOWN_LEADER_EPOCH
    78,   # OFFSET_NOT_AVAILABLE
    89,   # THROTTLING_QUOTA_EXCEEDED
    100,  # UNKNOWN_TOPIC_ID
})

# The codes after which the reference client makes the transaction abortable, not fatal; the last
# three it raises as CommitFailedException (the member's acknowledgements cannot be committed).
ABORTABLE_CODES = frozenset({
    30,   # GROUP_AUTHORIZATION_FAILED
    120,  # TRANSACTION_ABORTABLE
    121,  # INVALID_RECORD_STATE
    42,   # INVALID_REQUEST
    25,   # UNKNOWN_MEMBER_ID
    69,   # GROUP_ID_NOT_FOUND
    113,  # STALE_MEMBER_EPOCH
})

COORDINATOR_LOAD_IN_PROGRESS = 14
UNKNOWN_TOPIC_ID = 100
NOT_LEADER_OR_FOLLOWER = 6
UNSUPPORTED_VERSION = 35

# A producer that got one of these can never stage again.
# librdkafka raises _FATAL ("Local: Fatal error") from produce() once its producer is fenced.
FENCED_CODES = frozenset({KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH, KafkaError._FENCED,
                          KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, KafkaError._FATAL})


def code_name(code: int) -> str:
    try:
        return KafkaError(code).name()
    except Exception:  # an unknown code: KafkaError still names it, but never fail here
        return "error code %d" % code


def error_for(code: int, message: Optional[str]) -> KafkaException:
    """The exception for a TxnShareAcknowledge answer's effective code."""
    name = code_name(code)
    msg = "sharetx: TxnShareAcknowledge failed: %s%s" % (name, ": " + message if message else "")
    if code in RETRIABLE_CODES:
        return KafkaException(KafkaError(code, msg, retriable=True))
    if code in ABORTABLE_CODES:
        return KafkaException(KafkaError(code, msg, txn_requires_abort=True))
    return KafkaException(KafkaError(code, msg, fatal=True))


def kafka_exception(code: int, msg: str, *, fatal: bool = False, retriable: bool = False,
                    txn_requires_abort: bool = False) -> KafkaException:
    return KafkaException(KafkaError(code, msg, fatal=fatal, retriable=retriable,
                                     txn_requires_abort=txn_requires_abort))


def error_of(e: BaseException) -> Optional[KafkaError]:
    """The KafkaError a KafkaException carries, if any."""
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        return e.args[0]
    return None


def is_retriable(e: BaseException) -> bool:
    err = error_of(e)
    return err is not None and err.retriable()


def is_fatal(e: BaseException) -> bool:
    err = error_of(e)
    return err is not None and (err.fatal() or err.code() in FENCED_CODES)


def is_abortable(e: BaseException) -> bool:
    err = error_of(e)
    return err is not None and err.txn_requires_abort()
