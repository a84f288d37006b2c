"""The touch record (docs/design.md §9.3, docs/protocol.md): one small record per transaction to the
shadow topic, value ``sharetx-touch``, header ``sharetx: touch``, null key, partition
``(fnv32a(transactional id) mod n + 1) mod n``, never the shadow partition itself. librdkafka sends
no EndTxn for a transaction in which it produced nothing, and hides its producer id and epoch: the
touch record makes an acknowledgement-only transaction end with EndTxn, tells the sidecar the
producer's current ids (the -1/-1 extension), and fences a zombie before anything is staged. The
sidecar relays it with its own credentials: the application needs no WRITE on the shadow topic."""

from __future__ import annotations

from typing import List, Tuple, Union

TOUCH_VALUE = b"sharetx-touch"
TOUCH_HEADERS: List[Tuple[str, Union[str, bytes, None]]] = [("sharetx", b"touch")]


def shadow_partition(transactional_id: str, partitions: int) -> int:
    """FNV-1a, 32 bit, of the id's UTF-8 bytes, mod partitions: where the sidecar stages the id's
    acknowledgements."""
    if partitions <= 0:
        return 0
    h = 0x811C9DC5
    for b in transactional_id.encode("utf-8"):
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h % partitions


def touch_partition(transactional_id: str, partitions: int) -> int:
    """(shadow partition + 1) mod partitions: where the touch record goes."""
    if partitions <= 0:
        return 0
    return (shadow_partition(transactional_id, partitions) + 1) % partitions
