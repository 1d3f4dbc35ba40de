from __future__ import annotations

import pytest

from tidemark.errors import DataLossError, OffsetsWentBackwardsError, TidemarkError, TopicRecreatedError
from tidemark.kafka.offsets import OffsetRange
from tidemark.kafka.offsets import TopicPartition as TP
from tidemark.kafka.planner import check_topic_ids, plan_ranges, share_cap

A0, A1, A2, B0 = TP("a", 0), TP("a", 1), TP("a", 2), TP("b", 0)


def test_new_partition_starts_at_earliest_by_default():
    plan = plan_ranges("p", {}, {A0: 5}, {A0: 9})
    assert plan.ranges == [OffsetRange("a", 0, 5, 9)]


def test_new_partition_can_start_at_latest():
    plan = plan_ranges("p", {}, {A0: 5}, {A0: 9}, starting_offsets="latest")
    assert plan.ranges == [OffsetRange("a", 0, 9, 9)]
    assert plan.is_empty


def test_committed_partition_continues_where_it_ended():
    plan = plan_ranges("p", {A0: 7, A1: 3}, {A0: 0, A1: 0}, {A0: 10, A1: 3})
    assert plan.ranges == [OffsetRange("a", 0, 7, 10), OffsetRange("a", 1, 3, 3)]
    assert plan.total_offsets == 3


def test_nothing_new_is_an_empty_plan():
    plan = plan_ranges("p", {A0: 10}, {A0: 0}, {A0: 10})
    assert plan.is_empty and plan.total_offsets == 0


def test_partition_added_later_is_picked_up_beside_committed_ones():
    plan = plan_ranges("p", {A0: 10}, {A0: 0, A1: 0}, {A0: 12, A1: 4})
    assert plan.ranges == [OffsetRange("a", 0, 10, 12), OffsetRange("a", 1, 0, 4)]


def test_cap_is_shared_fairly_and_leftovers_go_to_busy_partitions():
    plan = plan_ranges("p", {}, {A0: 0, A1: 0, A2: 0}, {A0: 100, A1: 2, A2: 100}, max_offsets=50)
    sizes = {r.tp: r.size for r in plan.ranges}
    assert sizes == {A0: 24, A1: 2, A2: 24}
    assert plan.total_offsets == 50


def test_cap_larger_than_backlog_reads_everything():
    assert share_cap({A0: 3, A1: 4}, 100) == {A0: 3, A1: 4}


def test_cap_smaller_than_partition_count_still_totals_the_cap():
    granted = share_cap({A0: 10, A1: 10, A2: 10}, 2)
    assert sum(granted.values()) == 2 and max(granted.values()) == 1


def test_data_loss_fails_by_default_and_names_the_range():
    with pytest.raises(DataLossError) as err:
        plan_ranges("orders", {A0: 3}, {A0: 8}, {A0: 20})
    message = str(err.value)
    assert "pipeline 'orders'" in message and "a:0" in message and "[3, 8)" in message
    assert "--to-earliest" in message and "on_data_loss: skip" in message


def test_data_loss_skip_records_a_gap_and_starts_at_earliest():
    plan = plan_ranges("p", {A0: 3}, {A0: 8}, {A0: 20}, on_data_loss="skip")
    assert plan.ranges == [OffsetRange("a", 0, 8, 20)]
    assert [(g.tp, g.start, g.end) for g in plan.gaps] == [(A0, 3, 8)]


def test_offsets_going_backwards_is_refused():
    with pytest.raises(OffsetsWentBackwardsError, match="recreated"):
        plan_ranges("p", {A0: 30}, {A0: 0}, {A0: 5})


# --- retention gaps -------------------------------------------------------------------------------

def test_data_loss_names_every_lost_range_and_both_ways_forward():
    with pytest.raises(DataLossError) as err:
        plan_ranges("orders", {A0: 3, A1: 5, B0: 2}, {A0: 8, A1: 5, B0: 4}, {A0: 20, A1: 9, B0: 4})
    message = str(err.value)
    assert isinstance(err.value, TidemarkError)
    assert message.startswith("pipeline 'orders': offsets a:0 [3, 8), b:0 [2, 4) were deleted by retention")
    assert "(7 offsets lost)" in message and "a:1" not in message
    assert "tidemark offsets reset orders --topic a:0 --topic b:0 --to-earliest --execute --reason" in message
    assert "on_data_loss: skip" in message and "'gap' row" in message


# --- recreated topics -----------------------------------------------------------------------------

def test_a_changed_topic_id_is_refused_naming_the_offsets_and_the_reset():
    with pytest.raises(TopicRecreatedError) as err:
        check_topic_ids("orders", {"a": "old-id", "b": "b-id"}, {"a": "new-id", "b": "b-id"}, {A0: 5, A1: 7, B0: 1},
                        {A0: 9, A1: 12})
    message = str(err.value)
    assert isinstance(err.value, OffsetsWentBackwardsError)
    assert "pipeline 'orders': topic 'a' was deleted and recreated" in message
    assert "now new-id" in message and "belong to topic id old-id" in message
    assert "committed: a:0@5, a:1@7" in message and "latest offsets now: a:0@9, a:1@12" in message
    assert "nothing was read or written" in message
    assert "tidemark offsets reset orders --topic a --to-earliest --execute --reason" in message


def test_unknown_or_unchanged_topic_ids_are_not_refused():
    check_topic_ids("p", {}, {"a": "x"}, {A0: 5})            # a ledger without topic ids (older rows)
    check_topic_ids("p", {"a": "x"}, {}, {A0: 5})            # a broker that gives no topic ids
    check_topic_ids("p", {"a": "x"}, {"a": "x", "b": "y"}, {A0: 5})


def test_a_pending_batch_of_a_recreated_topic_says_it_cannot_be_executed():
    with pytest.raises(TopicRecreatedError, match="Batch 4 was frozen against the old topic and cannot be executed"):
        check_topic_ids("p", {"a": "old"}, {"a": "new"}, {A0: 5}, pending_batch=4)
