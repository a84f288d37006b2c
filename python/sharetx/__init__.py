"""sharetx: exactly-once share groups (KIP-932 queues) for confluent-kafka, through the sharetx sidecar.

KIP-1289's client API in Python's conventions: :class:`Producer` (a confluent-kafka Producer with
``send_share_acknowledgements_to_transaction``), :class:`ShareAcknowledgements`,
:class:`ShareGroupMetadata`, :func:`share_group_metadata`, and :class:`TransactionalShareAcknowledger`
for transactions that hold only acknowledgements. See the README for the consumer pattern: stage,
hand over, commit; on failure abort and release.
"""

from confluent_kafka import AcknowledgeType

from ._acknowledger import TransactionalShareAcknowledger
from ._acks import GAP, ShareAcknowledgementBatch, ShareAcknowledgements, ShareGroupMetadata, TopicIdPartition
from ._consumer import (acknowledge_handed_over, new_share_consumer, release_for_redelivery,
                        share_group_metadata)
from ._errors import is_abortable, is_fatal, is_retriable
from ._producer import DEFAULT_TIMEOUT, Producer
from ._sidecar import API_KEY_CONFIG, DEFAULT_SHADOW_TOPIC, SHADOW_TOPIC_CONFIG
from ._wire import MalformedResponse

__version__ = "0.1.0"

__all__ = [
    "AcknowledgeType", "Producer", "TransactionalShareAcknowledger", "ShareAcknowledgements",
    "ShareAcknowledgementBatch", "ShareGroupMetadata", "TopicIdPartition", "GAP", "share_group_metadata",
    "new_share_consumer", "acknowledge_handed_over", "release_for_redelivery", "is_fatal", "is_abortable",
    "is_retriable", "DEFAULT_TIMEOUT", "API_KEY_CONFIG", "SHADOW_TOPIC_CONFIG", "DEFAULT_SHADOW_TOPIC",
    "MalformedResponse",
]
