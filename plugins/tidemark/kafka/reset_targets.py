"""Offset resets with the vocabulary of ``kafka-consumer-groups --reset-offsets``: pure decisions
on plain values (the caller looks offsets and timestamps up in Kafka and writes the audited rows).

Scenarios: to-earliest, to-latest, to-offset N, shift-by N, to-datetime T, by-duration D, from-file
CSV. New offsets outside ``[earliest, latest]`` are clamped to it, with a warning, as Kafka's own
tool does.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import re
from dataclasses import dataclass, field
from typing import Literal

from tidemark.errors import ResetError
from tidemark.kafka.offsets import TopicPartition

Scenario = Literal["to-earliest", "to-latest", "to-offset", "shift-by", "to-datetime", "by-duration", "from-file"]
SCENARIOS: tuple[str, ...] = ("to-earliest", "to-latest", "to-offset", "shift-by", "to-datetime", "by-duration",
                              "from-file")

_DURATION = re.compile(r"^P(?:(?P<days>\d+)D)?(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?"
                       r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$")


@dataclass(frozen=True)
class ResetRow:
    tp: TopicPartition
    current: int | None
    new: int

    @property
    def change(self) -> int | None:
        return None if self.current is None else self.new - self.current


@dataclass
class ResetPreview:
    rows: list[ResetRow] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_table(self) -> list[dict]:
        """The dry-run table: topic, partition, current, new, change."""
        return [{"topic": r.tp.topic, "partition": r.tp.partition, "current": r.current, "new": r.new,
                 "change": r.change} for r in self.rows]


def parse_scope(scopes: list[str] | None, partitions: list[TopicPartition], pipeline: str) -> list[TopicPartition]:
    """``None`` = every partition of the pipeline; ``["t"]`` = every partition of topic t;
    ``["t:0,2"]`` = those partitions. Unknown topics and partitions are errors."""
    if not scopes:
        return sorted(partitions)
    known: dict[str, list[int]] = {}
    for tp in sorted(partitions):
        known.setdefault(tp.topic, []).append(tp.partition)
    chosen: set[TopicPartition] = set()
    for scope in scopes:
        topic, _, wanted = scope.partition(":")
        if topic not in known:
            raise ResetError(f"topic '{topic}' is not one of this pipeline's topics ({', '.join(sorted(known))})",
                             pipeline=pipeline)
        if not wanted:
            chosen.update(TopicPartition(topic, p) for p in known[topic])
            continue
        for part in wanted.split(","):
            if not part.strip().isdigit():
                raise ResetError(f"'{scope}': partitions must be numbers, as in {topic}:0,1,2", pipeline=pipeline)
            if int(part) not in known[topic]:
                raise ResetError(f"'{scope}': topic '{topic}' has no partition {int(part)} (it has "
                                 f"{', '.join(map(str, known[topic]))})", pipeline=pipeline)
            chosen.add(TopicPartition(topic, int(part)))
    return sorted(chosen)


def parse_datetime(text: str, pipeline: str) -> dt.datetime:
    """ISO-8601 date-time; without a zone it is UTC (Kafka's tool takes a local time; UTC is
    unambiguous)."""
    try:
        value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ResetError(f"'{text}' is not an ISO-8601 date-time (for example 2026-11-01T08:00:00Z)",
                         pipeline=pipeline) from None
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def parse_duration(text: str, pipeline: str) -> dt.timedelta:
    """ISO-8601 duration as Kafka's tool takes it: ``PT15M``, ``PT2H``, ``P1DT12H``."""
    match = _DURATION.match(text.strip().upper())
    if not match or text.strip().upper() in {"P", "PT"}:
        raise ResetError(f"'{text}' is not an ISO-8601 duration (for example PT30M, PT2H, P1D)", pipeline=pipeline)
    parts = {k: float(v) for k, v in match.groupdict().items() if v}
    return dt.timedelta(**parts)


def parse_offsets_file(text: str, pipeline: str) -> dict[TopicPartition, int]:
    """CSV ``topic,partition,offset`` per line (Kafka's tool's format); blank lines are skipped."""
    offsets: dict[TopicPartition, int] = {}
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if not row or not "".join(row).strip():
            continue
        if len(row) != 3 or not row[1].strip().isdigit() or not row[2].strip().lstrip("-").isdigit():
            raise ResetError(f"offsets file line {number}: expected 'topic,partition,offset', got '{','.join(row)}'",
                             pipeline=pipeline)
        offsets[TopicPartition(row[0].strip(), int(row[1]))] = int(row[2])
    if not offsets:
        raise ResetError("the offsets file has no 'topic,partition,offset' lines", pipeline=pipeline)
    return offsets


def preview_reset(pipeline: str, scenario: str, scope: list[TopicPartition], current: dict[TopicPartition, int],
               earliest: dict[TopicPartition, int], latest: dict[TopicPartition, int], *,
               offset: int | None = None, shift: int | None = None,
               time_offsets: dict[TopicPartition, int | None] | None = None,
               file_offsets: dict[TopicPartition, int] | None = None) -> ResetPreview:
    """The new position of each partition in ``scope``. ``time_offsets`` holds Kafka's answer to
    offsets_for_times (None: no record at or after the time, so the latest offset)."""
    if scenario not in SCENARIOS:
        raise ResetError(f"unknown reset '{scenario}' (one of {', '.join(SCENARIOS)})", pipeline=pipeline)
    if scenario == "from-file":
        unknown = sorted(set(file_offsets or {}) - set(earliest))
        if unknown:
            raise ResetError(f"the offsets file names partitions this pipeline does not read: "
                             f"{', '.join(map(str, unknown))}", pipeline=pipeline)
        scope = sorted(tp for tp in scope if tp in (file_offsets or {}))
    plan = ResetPreview()
    for tp in scope:
        now = current.get(tp)
        wanted = _target(scenario, tp, now, earliest[tp], latest[tp], offset, shift, time_offsets, file_offsets,
                         pipeline)
        new = min(max(wanted, earliest[tp]), latest[tp])
        if new != wanted:
            plan.warnings.append(f"{tp}: {wanted} is outside the offsets Kafka has [{earliest[tp]}, {latest[tp]}]; "
                                 f"using {new}")
        plan.rows.append(ResetRow(tp, now, new))
    return plan


def _target(scenario, tp, now, earliest, latest, offset, shift, time_offsets, file_offsets, pipeline) -> int:
    if scenario == "to-earliest":
        return earliest
    if scenario == "to-latest":
        return latest
    if scenario == "to-offset":
        if offset is None:
            raise ResetError("to-offset needs an offset", pipeline=pipeline)
        return offset
    if scenario == "shift-by":
        if shift is None:
            raise ResetError("shift-by needs a number (negative to go back)", pipeline=pipeline)
        return (now if now is not None else earliest) + shift
    if scenario in ("to-datetime", "by-duration"):
        found = (time_offsets or {}).get(tp)
        return latest if found is None else found
    return (file_offsets or {})[tp]
