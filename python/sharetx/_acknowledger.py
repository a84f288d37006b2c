"""TransactionalShareAcknowledger: share-group acknowledgements in Kafka transactions of their own."""

from __future__ import annotations

from typing import Any, Dict, Optional, Union

from confluent_kafka import KafkaError, KafkaException

from ._acks import ShareAcknowledgements, ShareGroupMetadata
from ._errors import error_of, is_fatal, kafka_exception
from ._producer import DEFAULT_TIMEOUT, Producer


class TransactionalShareAcknowledger:
    """Commits share-group acknowledgements in Kafka transactions of their own (KIP-1289 §3.2), for
    pipelines without Kafka output: a sink writing to a database, a checkpoint. Each
    :meth:`commit_acknowledgements` begins a transaction, stages the acknowledgements through the
    sidecar and commits; the transaction holds only the touch record and the sidecar's shadow
    record, and still ends with EndTxn.

    ::

        with sharetx.TransactionalShareAcknowledger({"bootstrap.servers": sidecar,
                                                     "transactional.id": "sink-1"}) as acker:
            acker.init_transactions()
            while running:
                msgs = [m for m in consumer.poll(1.0) if m.error() is None]
                if not msgs:
                    continue
                database.write(msgs)                                   # idempotent by record id
                acks = sharetx.ShareAcknowledgements.from_messages(msgs, AcknowledgeType.ACCEPT)
                try:
                    acker.commit_acknowledgements(acks, "jobs")         # stage and commit
                    sharetx.acknowledge_handed_over(consumer, msgs)     # hand over (absorbed)
                except KafkaException as e:
                    if sharetx.is_fatal(e):
                        raise                                           # another instance took over
                    if e.args[0].code() == KafkaError._TIMED_OUT:       # commit outcome unknown:
                        acker.commit_acknowledgements(acks, "jobs")     # the same call retries it
                        sharetx.acknowledge_handed_over(consumer, msgs)
                    else:                                               # aborted already
                        sharetx.release_for_redelivery(consumer, msgs)

    Not thread safe.
    """

    def __init__(self, config_or_producer: Union[Dict[str, Any], Producer]) -> None:
        if isinstance(config_or_producer, Producer):
            self._producer, self._owned = config_or_producer, False
        else:
            self._producer, self._owned = Producer(config_or_producer), True
        if self._producer.transactional_id is None:
            if self._owned:
                self._producer.close(0)
            raise ValueError("a TransactionalShareAcknowledger needs a transactional producer (transactional.id)")
        self._open = False
        self._pending: Optional[ShareAcknowledgements] = None  # acknowledgements whose commit timed out

    @property
    def producer(self) -> Producer:
        return self._producer

    def init_transactions(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        """init_transactions of the producer: fences earlier instances with the same transactional id."""
        self._producer.init_transactions(timeout)

    def commit_acknowledgements(self, acknowledgements: ShareAcknowledgements,
                                metadata: Union[ShareGroupMetadata, str], timeout: float = DEFAULT_TIMEOUT) -> None:
        """Begins a transaction, stages ``acknowledgements`` in it and commits it: when it returns,
        the acknowledgements are committed. ``metadata`` is a ShareGroupMetadata or a group id (the
        member left to the sidecar). Empty acknowledgements do nothing. Each step takes at most
        ``timeout`` seconds.

        On failure the transaction is aborted (nothing takes effect; records staged by the call are
        released by the sidecar) and the error is raised, except after fatal errors (close the
        acknowledger) and a timeout (``_TIMED_OUT``, retriable) of the commit itself, whose outcome
        is unknown. After that timeout the commit is pending: call ``commit_acknowledgements`` again:
        with the same acknowledgements it retries the commit and returns once it is done; with others
        it first completes the pending commit, then commits them in a transaction of their own."""
        md = metadata if isinstance(metadata, ShareGroupMetadata) else ShareGroupMetadata.for_group(metadata)
        if not isinstance(acknowledgements, ShareAcknowledgements):
            raise TypeError("acknowledgements must be a sharetx.ShareAcknowledgements")
        p = self._producer
        if self._pending is not None:
            pending = self._pending
            try:
                p.commit_transaction(timeout)  # librdkafka completes the commit that timed out
            except KafkaException as e:
                err = error_of(e)
                if err is not None and err.retriable():
                    raise  # still pending
                self._pending = None
                self._abort_unless_fatal(e)
                raise
            self._pending = None
            self._open = False
            if pending == acknowledgements:
                return
        if acknowledgements.is_empty():
            return
        if self._open:
            self.abort_acknowledgements(timeout)
        p.begin_transaction()
        self._open = True
        try:
            p.send_share_acknowledgements_to_transaction(acknowledgements, md, timeout)
        except KafkaException as e:
            self._abort_unless_fatal(e, timeout)
            raise
        try:
            p.commit_transaction(timeout)
            self._open = False
        except KafkaException as e:
            err = error_of(e)
            if err is not None and err.retriable() and not err.txn_requires_abort():
                self._pending = acknowledgements  # outcome unknown: the next call retries it
                raise
            self._abort_unless_fatal(e, timeout)
            raise

    def _abort_unless_fatal(self, e: KafkaException, timeout: float = DEFAULT_TIMEOUT) -> None:
        if is_fatal(e) or (error_of(e) is not None and error_of(e).code() in (  # type: ignore[union-attr]
                KafkaError._AUTHENTICATION, KafkaError.UNSUPPORTED_VERSION)):
            return
        try:
            self.abort_acknowledgements(timeout)
        except KafkaException as suppressed:
            e.__context__ = suppressed

    def abort_acknowledgements(self, timeout: float = DEFAULT_TIMEOUT) -> None:
        """Aborts the acknowledger's open transaction, if any: nothing of it takes effect.

        :raises KafkaException: (``_STATE``) if its commit timed out: a commit in flight cannot be
            aborted; retry it with :meth:`commit_acknowledgements`, or close."""
        if not self._open:
            return
        if self._pending is not None:
            raise kafka_exception(KafkaError._STATE, "sharetx: the last commit_acknowledgements timed out and its commit "
                                  "is pending; call commit_acknowledgements again (with the same acknowledgements to "
                                  "retry it), or close the acknowledger")
        self._producer.abort_transaction(timeout)
        self._open = False

    def close(self, timeout: float = 30.0) -> None:
        """Aborts what is open and closes the producer if the acknowledger built it."""
        try:
            if self._open and self._pending is None:
                self.abort_acknowledgements(timeout)
        except KafkaException:
            pass  # closing: the coordinator aborts the transaction when it times out
        finally:
            if self._owned:
                self._producer.close(timeout)

    def __enter__(self) -> "TransactionalShareAcknowledger":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
