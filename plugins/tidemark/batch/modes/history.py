"""History tables (``keyed.history: scd2``): a keyed table that keeps every version of a key. The keyed mode's
skeleton (one pass over Kafka, the tallies checked before anything is written, the widening, the dead letters after
the commit, finalize from the commit's counts) with its own steps (``tidemark.batch.spark.versions``): the batch's
events rebuild the history of the keys it touches, its deletes are kept beside the table, and one MERGE on key and
ordering writes the versions under the batch's marker."""

from __future__ import annotations

from collections.abc import Mapping

from tidemark.batch.modes.keyed import Keyed, create_table
from tidemark.batch.plan import BatchPlan
from tidemark.batch.read_checks import kafka_errors
from tidemark.kafka.offsets import TopicPartition
from tidemark.storage import ObjectStore


class History(Keyed):
    name = "history"

    def applies(self, plan: BatchPlan) -> bool:
        return bool(plan.format.keyed) and plan.format.keyed.keeps_history

    def reduced(self, spark, changes, plan: BatchPlan, applied: Mapping[TopicPartition, int], columns: list[str],
                store: ObjectStore | None):
        from tidemark.batch.spark import versions

        spec = plan.format.keyed
        return versions.history_source(spark, versions.changes(changes, spec, applied), spec, plan.table_uri, columns,
                                      store)

    def materialize(self, reduced, plan: BatchPlan) -> None:
        reduced.count()  # every key has an ordering: no key is refused for being on two partitions

    def remember(self, spark, reduced, plan: BatchPlan, store: ObjectStore | None) -> None:
        from tidemark.batch.spark import versions

        versions.remember_deletes(spark, reduced, plan.format.keyed, plan.table_uri, plan.pipeline, plan.batch_id,
                                  store)

    def commit(self, spark, plan: BatchPlan, reduced, columns: list[str], metadata: str, *, add_columns: bool,
               exists: bool) -> None:
        from tidemark.batch.spark import merge, versions

        with kafka_errors(plan):
            if not exists:
                create_table(plan, reduced.where(f"{merge.OP} = 'u'").select(*columns), metadata)
                return
            if add_columns:  # an ALTER TABLE commit first, without the marker (it changes no value)
                merge.add_missing_columns(spark, reduced, plan.table_uri, columns)
            versions.merge_history(spark, reduced, plan.format.keyed, plan.table_uri, columns, app_id=plan.pipeline,
                                  version=plan.batch_id, metadata=metadata)
