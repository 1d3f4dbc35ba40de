"""The test modules' order (tests/module_order.py): longest first from the last run's times, merged over
the committed fallback, and each run's times merged into the cache."""

from __future__ import annotations

import json

from tests import module_order


def test_modules_with_a_time_go_longest_first_and_new_ones_after_them_in_collection_order():
    modules = ["unit/test_a.py", "integration/test_slow.py", "unit/test_new.py", "e2e/test_slowest.py",
               "integration/test_slow.py", "integration/test_other_new.py"]
    seconds = {"integration/test_slow.py": 90.0, "e2e/test_slowest.py": 300.0, "unit/test_a.py": 0.4,
               "e2e/test_not_collected.py": 500.0}
    rank = module_order.longest_first(modules, seconds)
    assert sorted(rank, key=rank.get) == ["e2e/test_slowest.py", "integration/test_slow.py", "unit/test_a.py",
                                          "unit/test_new.py", "integration/test_other_new.py"]
    assert module_order.longest_first(["b.py", "a.py"], {}) == {"b.py": 0, "a.py": 1}  # no times: as collected


def test_the_last_runs_times_override_the_committed_ones_and_a_broken_cache_is_ignored(tmp_path):
    fallback, cache = tmp_path / "durations.json", tmp_path / ".cache" / "test-durations.json"
    fallback.write_text(json.dumps({"e2e/test_x.py": 200, "integration/test_y.py": 100}))
    assert module_order.load(cache, fallback) == {"e2e/test_x.py": 200, "integration/test_y.py": 100}
    cache.parent.mkdir()
    cache.write_text(json.dumps({"integration/test_y.py": 300.5, "unit/test_z.py": 1}))
    assert module_order.load(cache, fallback) == {"e2e/test_x.py": 200, "integration/test_y.py": 300.5,
                                                  "unit/test_z.py": 1}
    cache.write_text('{"integration/test_y.py": 3')  # a run killed while another wrote it
    assert module_order.load(cache, fallback) == {"e2e/test_x.py": 200, "integration/test_y.py": 100}
    assert module_order.load(tmp_path / "missing.json", tmp_path / "missing-too.json") == {}


def test_a_run_merges_its_times_into_the_cache_so_a_partial_run_keeps_the_others(tmp_path):
    cache = tmp_path / ".cache" / "test-durations.json"
    module_order.record({"e2e/test_x.py": 120.04, "integration/test_y.py": 50}, cache)
    module_order.record({"integration/test_y.py": 61.26}, cache)
    module_order.record({}, cache)  # nothing ran: nothing changes
    assert json.loads(cache.read_text()) == {"e2e/test_x.py": 120.0, "integration/test_y.py": 61.3}
    assert [p.name for p in cache.parent.iterdir()] == ["test-durations.json"]  # no partial file left behind


def test_the_modules_that_take_the_cluster_to_themselves_are_kept_apart():
    first, later = module_order.APART
    seconds = {first: 300, later: 160, "a.py": 200, "b.py": 150, "c.py": 150, "d.py": 100, "e.py": 50}
    rank = module_order.longest_first([*seconds], seconds)
    order = sorted(rank, key=rank.get)
    assert order == [first, "a.py", "b.py", later, "c.py", "d.py", "e.py"]  # 300 + 200 + 150 >= 2 x 300
