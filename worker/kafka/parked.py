"""Records of a paused partition that kafka-python parks, and would never give back.

kafka-python 3.0 keeps the records it fetched for a partition that is paused before they are
returned ("parked", KAFKA-7548) and restores them when it is resumed, but only while no other
partition's records are in line: it checks the in-line slot for `None`, and an in-line partition's
records, once all returned, stay there as an empty object until a new fetch replaces them. A parked
partition is not fetched either. So with per-partition backpressure (`loop.py` pauses only the busy
partitions) a partition paused mid-batch stayed silent for good once the others went quiet: its
records were neither returned nor fetched again (seen as answers missing in tests/kafka/test_loop.py).
"""

from __future__ import annotations

from kafka import KafkaConsumer


def release_parked(client: KafkaConsumer) -> None:
    """Empty the in-line slot when its records are all returned, so the next poll restores a resumed
    partition's parked records. Only from the consumer's thread, before `poll()`."""
    fetcher = client._fetcher
    in_line = getattr(fetcher, "_next_partition_records", None)  # absent from a kafka-python that parks nothing
    if in_line is not None and not in_line and getattr(fetcher, "_paused_partition_records", None):
        fetcher._next_partition_records = None
