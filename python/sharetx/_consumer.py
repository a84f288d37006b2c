"""What confluent-kafka's ShareConsumer cannot give a KIP-1289 application, and what the application
does with the records it handed to a transaction.

The consumer: a stock confluent-kafka ``ShareConsumer`` connected to the sidecar, in **explicit
acknowledgement mode** (``share.acknowledgement.mode=explicit``; :func:`new_share_consumer` sets
it). In that mode the consumer refuses to poll again until every record of the last poll is
acknowledged, and sends those acknowledgements on its next poll or commit. The sidecar holds back the
consumer's own acknowledgement of every record whose acknowledgement is bound to a transaction
(staged, committed, or aborted and released by the sidecar): none of them reaches the broker for
that delivery (docs/design.md §7).

The records handed to a transaction:

- once ``send_share_acknowledgements_to_transaction`` succeeded (before or after the commit):
  :func:`acknowledge_handed_over` (ACCEPT). The sidecar answers it itself; the transaction alone
  decides: after a commit its types are applied, after an abort the sidecar has already released the
  records for redelivery (possibly to another member);
- when it failed, or the transaction aborted: :func:`release_for_redelivery` (RELEASE). Never-staged
  records are redelivered by the broker; staged ones were released by the sidecar at the abort and
  this acknowledgement is absorbed. Before the next poll it may replace an earlier
  ``acknowledge_handed_over`` of the same records;
- never ACCEPT or REJECT on the consumer records whose staging failed: that acknowledgement does reach
  the broker, and the record counts as processed although no transaction processed it.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable

from confluent_kafka import AcknowledgeType, ShareConsumer

from ._acks import ShareGroupMetadata

ACKNOWLEDGEMENT_MODE_CONFIG = "share.acknowledgement.mode"


def share_group_metadata(consumer: Any, group_id: str) -> ShareGroupMetadata:
    """The :class:`ShareGroupMetadata` of ``consumer``, a member of ``group_id``: member id "" and
    epoch -1. confluent-kafka's ShareConsumer does not expose its member id and epoch; the sidecar's
    extension resolves "" to the member that acquired the offsets through it (and does not check the
    epoch)."""
    if consumer is None:
        raise TypeError("consumer cannot be None")
    return ShareGroupMetadata.for_group(group_id)


def explicit_mode(config: Dict[str, Any]) -> Dict[str, Any]:
    conf = dict(config)
    mode = conf.get(ACKNOWLEDGEMENT_MODE_CONFIG)
    if mode is not None and str(mode).strip().lower() != "explicit":
        raise ValueError("%s=%s: transactional acknowledgements need explicit mode (the consumer must not "
                         "acknowledge implicitly)" % (ACKNOWLEDGEMENT_MODE_CONFIG, mode))
    conf[ACKNOWLEDGEMENT_MODE_CONFIG] = "explicit"
    if not str(conf.get("group.id") or "").strip():
        raise ValueError("a share consumer needs group.id")
    return conf


def new_share_consumer(config: Dict[str, Any]) -> ShareConsumer:
    """A confluent-kafka ShareConsumer of ``config`` in explicit acknowledgement mode.

    :raises ValueError: the configuration asks for implicit mode, or has no group.id."""
    return ShareConsumer(explicit_mode(config))


def acknowledge_handed_over(consumer: Any, messages: Iterable[Any]) -> None:
    """Acknowledges, on the consumer, records whose acknowledgements were staged in a transaction
    (``send_share_acknowledgements_to_transaction`` succeeded), so that the consumer may poll again:
    ACCEPT, which the sidecar absorbs whatever the transaction's outcome. Call it before the next
    poll (the consumer only takes acknowledgements of its latest poll)."""
    for m in messages:
        consumer.acknowledge(m, AcknowledgeType.ACCEPT)


def release_for_redelivery(consumer: Any, messages: Iterable[Any]) -> None:
    """Acknowledges ``messages`` with RELEASE after a failed
    ``send_share_acknowledgements_to_transaction`` or an aborted transaction: never-staged records
    are redelivered by the broker; staged ones were already released by the sidecar at the abort,
    and this acknowledgement is absorbed. Call it before the next poll."""
    for m in messages:
        consumer.acknowledge(m, AcknowledgeType.RELEASE)
