"""Argument types of the ``tidemark`` command line: a flag's value is checked when the arguments are parsed, so a
bad one exits 2 with one message that names the flag (argparse puts it before the message) and says what to
write, before any pipeline file, ledger or Kafka is read."""

from __future__ import annotations

import argparse
import re

from tidemark.errors import ResetError
from tidemark.kafka.reset_targets import parse_datetime, parse_duration

_SHORT_DURATION = re.compile(r"^(?P<amount>\d+)\s*(?P<unit>[smhd])$", re.IGNORECASE)
_ISO_FORMS = {"s": "PT{}S", "m": "PT{}M", "h": "PT{}H", "d": "P{}D"}


def date_time(text: str) -> str:
    """``--to-datetime``: an ISO-8601 date-time, as ``tidemark.kafka.reset_targets.parse_datetime`` takes it. Returns
    the text unchanged (the reset parses it again, as it does the replay DAG's form)."""
    try:
        parse_datetime(text, pipeline="")
    except ResetError as exc:
        raise argparse.ArgumentTypeError(exc.detail) from None
    return text


def duration(text: str) -> str:
    """``--by-duration``: an ISO-8601 duration, as ``tidemark.kafka.reset_targets.parse_duration`` takes it (``PT2H``);
    a value such as ``2h`` is refused with its ISO-8601 form. Returns the text unchanged."""
    try:
        parse_duration(text, pipeline="")
    except ResetError as exc:
        short = _SHORT_DURATION.match(text.strip())
        hint = (f": for {short['amount']}{short['unit'].lower()} write "
                f"{_ISO_FORMS[short['unit'].lower()].format(short['amount'])}" if short else "")
        raise argparse.ArgumentTypeError(exc.detail + hint) from None
    return text


def _whole_number(text: str, least: int, meaning: str) -> int:
    """``text`` as a whole number >= ``least``, else argparse's error naming ``meaning``."""
    try:
        value = int(text.strip())
    except ValueError:
        value = least - 1
    if value < least:
        raise argparse.ArgumentTypeError(f"'{text}' is not a whole number >= {least} ({meaning})")
    return value


def sample_size(text: str) -> int:
    """``audit --verify-sample``: a whole number >= 0 (0, the default: no sample)."""
    return _whole_number(text, 0, "the committed ranges, or keys of a keyed table, to compare with Kafka; 0, the "
                                  "default, compares none")


def row_count(text: str) -> int:
    """``offsets history --limit``: a whole number >= 1."""
    return _whole_number(text, 1, "the rows to show")
