"""sharetx.Producer: a confluent-kafka Producer with KIP-1289's send_share_acknowledgements_to_transaction."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from typing import Any, Dict, List, NoReturn, Optional, Tuple

import confluent_kafka
from confluent_kafka import KafkaError, KafkaException, Message

from . import _protocol as P
from ._acks import ShareAcknowledgementBatch, ShareAcknowledgements, ShareGroupMetadata, TopicIdPartition, batches_wire
from ._errors import (ABORTABLE_CODES, COORDINATOR_LOAD_IN_PROGRESS, FENCED_CODES, NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_ID,
                      code_name, error_for, error_of, is_fatal, kafka_exception)
from ._sidecar import (AuthenticationFailed, Deadline, NotASidecar, Settings, SidecarClient, SidecarTimeout,
                       unsupported_version)
from ._touch import TOUCH_HEADERS, TOUCH_VALUE, touch_partition
from ._wire import MalformedResponse

log = logging.getLogger("sharetx")

#: The default of every call's ``timeout`` (seconds), as librdkafka's socket.timeout.ms.
DEFAULT_TIMEOUT = 60.0
_SHADOW_PARTITIONS_TTL = 60.0
# Touch records a call sends again at most, for sidecars that do not know the producer yet.
_MAX_RETOUCHES = 3


class Producer(confluent_kafka.Producer):
    """A confluent-kafka :class:`~confluent_kafka.Producer` (same configuration dict, same methods)
    that binds share-group acknowledgements to its transactions through the sharetx sidecar:
    KIP-1289's ``send_share_acknowledgements_to_transaction``. ``bootstrap.servers`` names the
    sidecar; set a ``transactional.id`` and run transactions as with any transactional producer.

    The consumer pattern (stage, hand over, commit; on failure abort and release)::

        producer = sharetx.Producer({"bootstrap.servers": sidecar, "transactional.id": "worker-1"})
        consumer = sharetx.new_share_consumer({"bootstrap.servers": sidecar, "group.id": "jobs"})
        consumer.subscribe(["jobs"])
        metadata = sharetx.share_group_metadata(consumer, "jobs")
        producer.init_transactions()
        while running:
            msgs = [m for m in consumer.poll(1.0) if m.error() is None]
            if not msgs:
                continue
            producer.begin_transaction()
            try:
                for m in msgs:
                    producer.produce("results", key=m.key(), value=transform(m.value()))
                producer.send_share_acknowledgements_to_transaction(          # stage
                    sharetx.ShareAcknowledgements.from_messages(msgs, AcknowledgeType.ACCEPT), metadata)
                producer.commit_transaction()                                 # commit
                sharetx.acknowledge_handed_over(consumer, msgs)               # hand over (absorbed)
            except KafkaException as e:
                if sharetx.is_fatal(e):
                    raise                                                     # fenced: close the producer
                producer.abort_transaction()
                sharetx.release_for_redelivery(consumer, msgs)                # redelivered

    Errors are confluent-kafka's :class:`~confluent_kafka.KafkaException` carrying a
    :class:`~confluent_kafka.KafkaError`, classified as KIP-1289's reference client does:
    ``retriable()`` (the call timed out: ``_TIMED_OUT``; call it again or abort),
    ``txn_requires_abort()`` (UNKNOWN_MEMBER_ID, STALE_MEMBER_EPOCH, GROUP_ID_NOT_FOUND,
    INVALID_RECORD_STATE, TRANSACTION_ABORTABLE, INVALID_REQUEST, GROUP_AUTHORIZATION_FAILED: abort
    the transaction; ``commit_transaction`` refuses until then) and ``fatal()`` (PRODUCER_FENCED,
    INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, UNSUPPORTED_VERSION — no sidecar
    serves the API key —, authentication failures and every other code: every transactional call
    but ``abort_transaction`` and ``close`` raises it again; close the producer).

    Settings besides confluent-kafka's, taken out of the dict before librdkafka sees it:
    ``sharetx.api.key`` (TxnShareAcknowledge's API key, default 95: the sidecar's
    ``kip1289.api_key``) and ``sharetx.shadow.topic`` (default ``__sharetx_shadow``: its
    ``kip1289.shadow_topic``). The library's own connection to the sidecar uses the dict's
    ``security.protocol``, ``sasl.*`` and ``ssl.*`` settings (see the README's Security section).
    """

    def __init__(self, config: Dict[str, Any], **kwargs: Any) -> None:
        conf = dict(config)
        conf.update(kwargs)
        settings, conf = Settings.of(conf)
        super().__init__(conf)
        self._stx = settings
        self._stx_lock = threading.RLock()
        self._sidecar: Optional[SidecarClient] = None
        self._topics: Dict[str, P.TopicMeta] = {}
        self._brokers: Dict[int, str] = {}
        self._shadow_partitions = 0
        self._shadow_partitions_at = 0.0
        # The transaction as this class sees it.
        self._in_txn = False
        self._abortable: Optional[KafkaException] = None
        self._fatal: Optional[KafkaException] = None
        self._unresolved = False  # a call of this transaction timed out and was not retried successfully
        # The transaction's first output record, whose delivery report the call names instead of a touch.
        self._first_out: Optional[_Delivery] = None
        # Acknowledgements of the open transaction the sidecar holds for a later call (defer=True),
        # with their metadata: the next call of the same member, or commit_transaction, stages them.
        self._deferred: List[Tuple[ShareAcknowledgements, ShareGroupMetadata]] = []

    # ------------------------------------------------------------ the KIP's call

    def send_share_acknowledgements_to_transaction(self, acknowledgements: ShareAcknowledgements,
                                                   metadata: ShareGroupMetadata,
                                                   timeout: float = DEFAULT_TIMEOUT, defer: bool = False) -> None:
        """Binds ``acknowledgements`` to the producer's open transaction: the sidecar stages them
        (TX_PENDING) and applies them to the share group if and only if the transaction commits.
        Blocks until the sidecar answered, at most ``timeout`` seconds.

        ``metadata`` names the share group of the consumer that polled the records; its member id
        may be "" (epoch -1) to let the sidecar resolve the member that acquired them
        (:func:`sharetx.share_group_metadata`). The call first waits for the transaction's first
        output record (the first ``produce`` since ``begin_transaction``) to be delivered, flushing
        the producer's queue, and names it to the sidecar; a transaction without outputs produces a
        touch record instead (a record to the sidecar's shadow topic, with the producer's own id and
        epoch) and waits for it. Either way a fenced producer (a zombie) fails here before anything
        is staged, and a transaction holding only acknowledgements still ends with EndTxn. Each call
        is all or nothing; on any exception abort the transaction (unless it is fatal: then close
        the producer). Empty acknowledgements do nothing.

        ``defer=True`` is for a transaction that goes on over more polls (a part of a poll that does
        not end the transaction): the sidecar checks the acknowledgements and holds them back from the
        consumer's own acknowledgement of the records (so ``acknowledge_handed_over`` and the next
        poll are safe), but writes nothing, and the call neither waits for the outputs nor touches.
        The transaction's next call without ``defer`` for the same group member stages them with its
        own, in one shadow record; ``commit_transaction`` stages any still deferred before it commits.
        What was deferred and never staged is not in the transaction: the sidecar releases it when
        the transaction ends. A fenced producer (a zombie) then learns it at that staging call or at
        ``commit_transaction``, not at the deferred call.

        :raises KafkaException: see the class documentation (``_TIMED_OUT`` is retriable: the
            same call may be made again, the sidecar answers a repeat with the same success).
        :raises TypeError: wrong argument types. :raises ValueError: a negative timeout.
        """
        if not isinstance(acknowledgements, ShareAcknowledgements):
            raise TypeError("acknowledgements must be a sharetx.ShareAcknowledgements")
        if not isinstance(metadata, ShareGroupMetadata):
            raise TypeError("metadata must be a sharetx.ShareGroupMetadata")
        if timeout is None or timeout < 0:
            raise ValueError("timeout must be a number of seconds >= 0")
        with self._stx_lock:
            self._raise_if_fatal()
            if self._stx.transactional_id is None:
                raise kafka_exception(KafkaError._NOT_CONFIGURED, "sharetx: send_share_acknowledgements_to_transaction "
                                      "needs a transactional producer (transactional.id)")
            if not self._in_txn:
                raise kafka_exception(KafkaError._STATE, "sharetx: send_share_acknowledgements_to_transaction needs an "
                                      "open transaction: call begin_transaction first")
            if acknowledgements.is_empty():
                return
            if self._abortable is not None:
                # As the reference client in its abortable state: nothing more in this transaction.
                raise kafka_exception(error_of(self._abortable).code(),  # type: ignore[union-attr]
                                      "sharetx: an earlier call of this transaction failed (%s); abort the transaction"
                                      % error_of(self._abortable).str(), txn_requires_abort=True)  # type: ignore[union-attr]
            deadline = Deadline(timeout)
            try:
                # Is a sidecar there? Before the touch, so that a producer connected straight to the
                # cluster writes nothing (once per connection).
                self._probe(deadline)
                # librdkafka hides the producer id and epoch: a record produced with them in the
                # transaction, delivered before the call, fences a zombie (the broker refuses its
                # epoch) and tells the sidecar the current ids, which the -1/-1 extension then
                # names; the call names that record (its OutputRecord or TouchOffset), so the
                # sidecar checks it against the ids the record was written with. The transaction's
                # first output when it has one, else a touch record. Before every call, not only
                # the transaction's first: the sidecar resolves -1/-1 to the ids it saw last for
                # the transactional id, so a zombie whose transaction wrote before a newer instance
                # initialised would otherwise stage its later calls into the newer instance's
                # transaction (test_zombie_cannot_stage_a_later_call).
                if defer:
                    self._stage(acknowledgements, metadata, deadline, -1, None, defer=True)
                    self._deferred.append((acknowledgements, metadata))
                    self._unresolved = False
                    return
                self._stage_with_deferred(acknowledgements, metadata, deadline)
                self._unresolved = False
            except _Timeout as e:
                self._unresolved = True
                raise kafka_exception(KafkaError._TIMED_OUT, "sharetx: %s" % e, retriable=True) from None
            except (NotASidecar, AuthenticationFailed) as e:
                self._fail_fatally(e)

    # ------------------------------------------------------------ the transaction's life

    def begin_transaction(self, *args: Any, **kwargs: Any) -> None:
        self._raise_if_fatal()
        super().begin_transaction(*args, **kwargs)
        with self._stx_lock:
            self._in_txn = True
            self._abortable = None
            self._unresolved = False
            self._first_out = None
            self._deferred = []

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None:
        """confluent-kafka's ``produce``; the first one of a transaction also notes its delivery
        report (the user's ``on_delivery`` still runs), which the transaction's
        ``send_share_acknowledgements_to_transaction`` names instead of producing a touch record."""
        if not self._in_txn or self._first_out is not None:
            super().produce(topic, *args, **kwargs)
            return
        with self._stx_lock:
            if not self._in_txn or self._first_out is not None:
                super().produce(topic, *args, **kwargs)
                return
            d = _Delivery()
            rest = list(args)
            if len(rest) > 3:  # produce(topic, value, key, partition, on_delivery, ...)
                d.user, rest[3] = rest[3], d.report
            else:
                key = "callback" if "callback" in kwargs else "on_delivery"
                d.user = kwargs.pop(key, None)
                kwargs["on_delivery"] = d.report
            super().produce(topic, *rest, **kwargs)  # raises (BufferError, ...): nothing noted
            self._first_out = d

    def commit_transaction(self, *args: Any, **kwargs: Any) -> None:
        self._raise_if_fatal()
        ab = self._abortable
        if ab is not None:
            raise kafka_exception(error_of(ab).code(),  # type: ignore[union-attr]
                                  "sharetx: cannot commit: sending share acknowledgements to this transaction failed "
                                  "(%s); abort the transaction" % error_of(ab).str(),  # type: ignore[union-attr]
                                  txn_requires_abort=True)
        if self._unresolved:
            raise kafka_exception(KafkaError._STATE, "sharetx: cannot commit: a send_share_acknowledgements_to_transaction "
                                  "of this transaction timed out and was not retried successfully; retry it or abort "
                                  "the transaction")
        if self._deferred:
            self._stage_deferred(_timeout_arg(args, kwargs))
        super().commit_transaction(*args, **kwargs)
        with self._stx_lock:
            self._in_txn = False
            self._first_out = None

    def abort_transaction(self, *args: Any, **kwargs: Any) -> None:
        super().abort_transaction(*args, **kwargs)
        with self._stx_lock:
            self._in_txn = False
            self._abortable = None
            self._unresolved = False
            self._first_out = None
            self._deferred = []

    def close(self, *args: Any, **kwargs: Any) -> Any:
        """Closes the library's connections to the sidecar, then the producer."""
        with self._stx_lock:
            if self._sidecar is not None:
                self._sidecar.close()
                self._sidecar = None
        return super().close(*args, **kwargs)

    @property
    def transactional_id(self) -> Optional[str]:
        """The transactional id, or None for a producer that is not transactional."""
        return self._stx.transactional_id

    def _raise_if_fatal(self) -> None:
        f = self._fatal
        if f is not None:
            raise f

    # ------------------------------------------------------------ the sidecar

    def _client(self) -> SidecarClient:
        if self._sidecar is None:
            self._sidecar = SidecarClient(self._stx)
        return self._sidecar

    def _probe(self, deadline: Deadline) -> None:
        last: Optional[BaseException] = None
        while not deadline.passed():
            addr = self._client().any_bootstrap()
            try:
                self._client().probe(addr, deadline)
                return
            except (OSError, SidecarTimeout, MalformedResponse, KafkaException) as e:
                if isinstance(e, KafkaException) and not error_of(e).retriable():  # type: ignore[union-attr]
                    raise
                last = e
                log.debug("sharetx: sidecar %s not reached, retrying: %s", addr, e)
                _sleep(min(self._stx.retry_backoff_s, deadline.left()))
        raise _Timeout("no sidecar reached within the timeout%s" % (": %s" % last if last else ""))

    def _metadata(self, topics: List[str], deadline: Deadline) -> P.Metadata:
        addr = self._client().any_bootstrap()
        b = self._client().request(addr, P.METADATA, 12, True, P.metadata_v12(topics), deadline)
        md = P.parse_metadata_v12(b)
        if md.brokers:
            self._brokers = md.brokers
        return md

    # ------------------------------------------------------------ the touch record

    def _shadow_partition_count(self, deadline: Deadline) -> int:
        now = time.monotonic()
        if self._shadow_partitions > 0 and now - self._shadow_partitions_at < _SHADOW_PARTITIONS_TTL:
            return self._shadow_partitions
        last: Optional[BaseException] = None
        while not deadline.passed():
            try:
                tm = self._metadata([self._stx.shadow_topic], deadline).topics.get(self._stx.shadow_topic)
                if tm is not None and tm.error_code == 0 and tm.leaders:
                    self._shadow_partitions = len(tm.leaders)
                    self._shadow_partitions_at = now
                    return self._shadow_partitions
                last = Exception("shadow topic %s: %s" % (self._stx.shadow_topic, "not in the metadata response"
                                                          if tm is None else code_name(tm.error_code)))
            except (OSError, SidecarTimeout, MalformedResponse) as e:
                last = e
            _sleep(min(self._stx.retry_backoff_s, deadline.left()))
        raise _Timeout("the shadow topic's partitions were not learnt within the timeout: %s" % last)

    def _output_ref(self, deadline: Deadline) -> Optional[P.OutputRef]:
        """Waits for the transaction's first output record to be delivered (flushing the queue) and
        returns it for the call to name (OutputRecord); None when the transaction produced nothing
        (the call touches instead)."""
        d = self._first_out
        if d is None:
            return None
        self._await_delivery(lambda: d.done, deadline, "the transaction's first output record")
        if d.err is not None:
            self._raise_delivery_failure(d.err, "the transaction's first output record")
        msg = d.msg
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        if not topic or partition is None or partition < 0 or offset is None or offset < 0:
            return None  # nothing to name: touch
        return P.OutputRef(topic, self._known_topic_id(topic, deadline), partition, offset)

    def _known_topic_id(self, topic: str, deadline: Deadline) -> Optional[uuid.UUID]:
        """The topic's id, looked up once (the sidecar matches an output by name or by id, as its
        Produce named it); None when it cannot be learnt now."""
        tm = self._topics.get(topic)
        if tm is None:
            try:
                tm = self._metadata([topic], deadline).topics.get(topic)
            except (OSError, SidecarTimeout, MalformedResponse):
                return None
            if tm is None or tm.error_code != 0 or tm.topic_id == P.ZERO_UUID:
                return None
            self._topics[topic] = tm
        return tm.topic_id

    def _await_delivery(self, delivered: Any, deadline: Deadline, what: str) -> None:
        """Flushes until delivered() holds, at most until the deadline."""
        while not delivered():
            if deadline.passed():
                raise _Timeout("%s was not acknowledged within the timeout" % what)
            try:
                super().flush(max(0.0, min(deadline.left(), 0.5)))
            except KafkaException as e:
                self._raise_flush_failure(e, what)
            except SystemError as e:
                # confluent-kafka 2.16 raises SystemError when librdkafka reports a fatal error (a
                # fenced producer) while it runs a delivery callback: the KafkaException is its cause.
                cause = e.__cause__ or e.__context__
                if isinstance(cause, KafkaException):
                    self._raise_flush_failure(cause, what)
                if not delivered():
                    raise

    def _raise_delivery_failure(self, err: KafkaError, what: str) -> None:
        if err.fatal() or err.code() in FENCED_CODES:
            self._fatal = kafka_exception(err.code(), "sharetx: %s was refused: %s" % (what, err.str()), fatal=True)
            raise self._fatal
        raise kafka_exception(err.code(), "sharetx: producing %s failed: %s" % (what, err.str()),
                              txn_requires_abort=True) from KafkaException(err)

    def _touch(self, deadline: Deadline) -> int:
        """Produces the transaction's touch record and returns its offset, which the call names
        (TouchOffset): the sidecar checks the call against the producer id and epoch the touch was
        written with, so a zombie whose touch came just before a newer instance initialised is
        fenced rather than staged into the newer instance's transaction."""
        n = self._shadow_partition_count(deadline)
        if n < 2:
            raise kafka_exception(KafkaError._INVALID_ARG, "sharetx: shadow topic %s has %d partition(s); it needs at "
                                  "least 2 so the touch record never shares a partition with the sidecar's shadow "
                                  "records" % (self._stx.shadow_topic, n), txn_requires_abort=True)
        part = touch_partition(self._stx.transactional_id or "", n)
        result: List[Optional[KafkaError]] = []
        offsets: List[int] = []

        def delivered(err: Optional[KafkaError], msg: Message) -> None:
            offsets.append(msg.offset() if err is None and msg is not None and msg.offset() is not None else -1)
            result.append(err)

        try:
            super().produce(self._stx.shadow_topic, value=TOUCH_VALUE, partition=part, headers=TOUCH_HEADERS,
                            on_delivery=delivered)
        except KafkaException as e:
            self._raise_flush_failure(e, "the transaction's touch record")
        self._await_delivery(lambda: bool(result), deadline,
                             "the transaction's touch record to %s[%d]" % (self._stx.shadow_topic, part))
        err = result[0]
        if err is not None:
            self._raise_delivery_failure(err, "the transaction's touch record")
        return offsets[0]

    def _raise_flush_failure(self, e: KafkaException, what: str) -> None:
        err = error_of(e)
        if err is not None and is_fatal(e):
            self._fatal = kafka_exception(err.code(), "sharetx: %s was refused: %s" % (what, err.str()), fatal=True)
            raise self._fatal from None
        raise e

    # ------------------------------------------------------------ staging

    def _stage_with_deferred(self, acks: ShareAcknowledgements, md: ShareGroupMetadata, deadline: Deadline) -> None:
        """Stages acks with what earlier calls of the transaction deferred for the same member, in
        one call, named by the transaction's first output (or a touch)."""
        mine = [a for a, m in self._deferred if m == md]
        output = self._output_ref(deadline)
        touch = self._touch(deadline) if output is None else -1
        self._stage(_merged(mine + [acks]) if mine else acks, md, deadline, touch, output)
        self._deferred = [(a, m) for a, m in self._deferred if m != md]

    def _stage_deferred(self, timeout: float) -> None:
        """commit_transaction's first step: stages what calls deferred and no call staged since."""
        with self._stx_lock:
            deadline = Deadline(timeout)
            try:
                while self._deferred:
                    acks, md = self._deferred[-1]
                    self._stage_with_deferred(ShareAcknowledgements.empty(), md, deadline)
            except _Timeout as e:
                raise kafka_exception(KafkaError._TIMED_OUT, "sharetx: staging the deferred acknowledgements: %s" % e,
                                      retriable=True) from None
            except (NotASidecar, AuthenticationFailed) as e:
                self._fail_fatally(e)

    def _fail_fatally(self, e: BaseException) -> NoReturn:
        """No sidecar serves the key (NotASidecar) or the library cannot authenticate to it: nothing
        will work; the producer's fatal error."""
        if isinstance(e, NotASidecar):
            self._fatal = unsupported_version(str(e))
        else:
            self._fatal = kafka_exception(KafkaError._AUTHENTICATION, "sharetx: %s" % e, fatal=True)
        raise self._fatal from None

    def _stage(self, acks: ShareAcknowledgements, md: ShareGroupMetadata, deadline: Deadline, touch: int,
               output: Optional[P.OutputRef], defer: bool = False) -> None:
        left: Dict[TopicIdPartition, Tuple[ShareAcknowledgementBatch, ...]] = dict(acks.items())
        refresh = False
        last: Optional[BaseException] = None
        attempt = 0
        retouches = 0
        while True:
            if attempt > 0:
                wait = min(self._stx.retry_backoff_s, deadline.left())
                if wait <= 0:
                    log.warning("sharetx: TxnShareAcknowledge gave up after %d attempts within the timeout: %s",
                                attempt, last)
                    raise _Timeout("TxnShareAcknowledge did not succeed within the timeout%s"
                                   % (": %s" % last if last else ""))
                _sleep(wait)
            attempt += 1
            try:
                by_leader = self._route(left, refresh, deadline)
            except (OSError, SidecarTimeout, MalformedResponse, _Retry) as e:
                last = e
                refresh = True
                continue
            refresh = False
            for addr, parts in by_leader.items():
                body = P.txn_share_acknowledge(self._stx.transactional_id, md.group_id, -1, -1, md.member_id,
                                               md.member_epoch, [p for _, p in parts],
                                               touch if touch >= 0 else None, output, defer)
                try:
                    b = self._client().request(addr, self._stx.api_key, 0, True, body, deadline)
                except (OSError, SidecarTimeout) as e:
                    # A lost answer is safe to retry: the sidecar answers a repeated call of the same
                    # transaction with the same success, staging nothing twice.
                    last = e
                    refresh = True
                    continue
                except MalformedResponse as e:
                    self._fatal = kafka_exception(KafkaError._BAD_MSG, "sharetx: malformed TxnShareAcknowledge response "
                                                  "from %s: %s" % (addr, e), fatal=True)
                    raise self._fatal from None
                try:
                    resp = P.parse_txn_share_acknowledge(b)
                except MalformedResponse as e:
                    self._fatal = kafka_exception(KafkaError._BAD_MSG, "sharetx: malformed TxnShareAcknowledge response "
                                                  "from %s: %s" % (addr, e), fatal=True)
                    raise self._fatal from None
                code = resp.effective_code()
                if code == 0:
                    for tip, _ in parts:
                        left.pop(tip, None)
                    continue
                ex = error_for(code, resp.message())
                err = error_of(ex)
                assert err is not None
                if err.retriable():
                    last = ex
                    if code == COORDINATOR_LOAD_IN_PROGRESS and retouches < _MAX_RETOUCHES:
                        # This sidecar has not seen the transaction's producer, or the record the
                        # call names (it restarted after it, or the record went through another
                        # one): a touch, through it, tells it the producer id and epoch.
                        retouches += 1
                        touch, output = self._touch(deadline), None
                    if code in (UNKNOWN_TOPIC_ID, NOT_LEADER_OR_FOLLOWER):
                        for _, p in parts:
                            self._forget_topic_id(p.topic_id)
                        refresh = True
                    continue
                if code in ABORTABLE_CODES:
                    self._abortable = ex
                    raise ex
                self._fatal = ex
                raise ex
            if not left:
                return

    def _forget_topic_id(self, tid: uuid.UUID) -> None:
        for name in [n for n, tm in self._topics.items() if tm.topic_id == tid]:
            del self._topics[name]

    def _route(self, acks: Dict[TopicIdPartition, Tuple[ShareAcknowledgementBatch, ...]], refresh: bool,
               deadline: Deadline) -> Dict[str, List[Tuple[TopicIdPartition, P.AckPartition]]]:
        """Groups the partitions by their leader's address (the sidecar's listener for it), looking
        topic ids and leaders up as needed."""
        need = sorted({tip.topic for tip in acks if tip.topic is not None and (refresh or tip.topic not in self._topics)})
        if need:
            md = self._metadata(need, deadline)
            problems = []
            for t in need:
                tm = md.topics.get(t)
                if tm is None or tm.error_code != 0 or tm.topic_id == P.ZERO_UUID:
                    self._topics.pop(t, None)
                    problems.append("%s: %s" % (t, "not in the metadata response" if tm is None else
                                                code_name(tm.error_code) if tm.error_code else "no topic id"))
                else:
                    self._topics[t] = tm
            if problems:
                raise _Retry("looking up topic ids: " + "; ".join(problems))
        out: Dict[str, List[Tuple[TopicIdPartition, P.AckPartition]]] = {}
        for tip, batches in acks.items():
            tm = self._topics.get(tip.topic) if tip.topic is not None else None
            tid = tip.topic_id if tip.topic_id is not None else tm.topic_id  # type: ignore[union-attr]
            addr = None
            if tm is not None and tip.partition in tm.leaders:
                addr = self._brokers.get(tm.leaders[tip.partition])
            if addr is None:
                addr = self._client().any_bootstrap()  # every sidecar listener serves the key
            out.setdefault(addr, []).append((tip, P.AckPartition(tid, tip.partition, batches_wire(batches))))
        return out


def _merged(parts: List[ShareAcknowledgements]) -> ShareAcknowledgements:
    """One ShareAcknowledgements of several calls' (of different records), each partition's batches in
    the order the calls came."""
    m: Dict[TopicIdPartition, List[ShareAcknowledgementBatch]] = {}
    for acks in parts:
        for tip, batches in acks.items():
            m.setdefault(tip, []).extend(batches)
    return ShareAcknowledgements(m)


def _timeout_arg(args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> float:
    """The timeout a commit_transaction was given (confluent-kafka: the first argument, seconds;
    -1 or none: no limit of its own), for the calls it makes first."""
    t = args[0] if args else kwargs.get("timeout")
    if t is None or t < 0:
        return DEFAULT_TIMEOUT
    return float(t)


class _Delivery:
    """The delivery report of a transaction's first output record, and the user's callback."""

    __slots__ = ("done", "err", "msg", "user")

    def __init__(self) -> None:
        self.done = False
        self.err: Optional[KafkaError] = None
        self.msg: Any = None
        self.user: Any = None

    def report(self, err: Optional[KafkaError], msg: Message) -> None:
        self.err, self.msg, self.done = err, msg, True
        if self.user is not None:
            self.user(err, msg)


class _Timeout(Exception):
    pass


class _Retry(Exception):
    pass


def _sleep(s: float) -> None:
    if s > 0:
        time.sleep(s)


__all__ = ["Producer", "DEFAULT_TIMEOUT", "ShareAcknowledgementBatch"]
