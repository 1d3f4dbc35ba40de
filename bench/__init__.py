"""`make bench`: Tidemark against Spark Structured Streaming (AvailableNow), a plain Spark batch
read and Kafka's own consumer, on the same backlog; fixed costs of empty runs; ledger growth.
Entry point: ``python -m bench.all_parts`` inside ``scripts/with_broker.sh`` (see scripts/bench.sh)."""
