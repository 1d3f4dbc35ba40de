"""Kafka as the batch protocol sees it: offset ranges (``[start, end)``), the partitions and offsets a client
reads (kafka-python, under Kafka's own property names, with TLS and SASL), and the pure decisions made on them:
which range to read next (``planner``) and where a reset moves a position (``reset_targets``). Records are read by
Spark (``tidemark.batch.spark``), never here.

- ``offsets``: ``TopicPartition`` and ``OffsetRange``;
- ``client``: earliest and latest (last stable) offsets, topics, consumer-group positions;
- ``tls``, ``login``: TLS contexts and a login that fails at the first refusal;
- ``planner``, ``reset_targets``: range planning and reset targets, pure.
"""

__all__ = ["client", "login", "offsets", "planner", "reset_targets", "tls"]
