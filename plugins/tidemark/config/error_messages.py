"""What a pipeline file's validation errors (pydantic's) say to the user: the key's path, the keys accepted
where it sits (with the closest one when a key is misspelt), and how to write a value of the wrong shape or type."""

from __future__ import annotations

import difflib
import typing

from pydantic import BaseModel


def accepted_keys(loc: tuple, root: type[BaseModel]) -> list[str]:
    """The keys accepted where ``loc`` points: the root model's, or those of the block it is in (``lag``...)."""
    model = root
    for part in loc[:-1]:
        annotation = model.model_fields[str(part)].annotation if str(part) in model.model_fields else None
        nested = [a for a in (*typing.get_args(annotation), annotation)
                  if isinstance(a, type) and issubclass(a, BaseModel)]
        if not nested:
            return []
        model = nested[0]
    return list(model.model_fields)


STRICT_TYPES = {"int_type": "a whole number", "bool_type": "true or false"}
"""The errors of strict fields (``tidemark.config.value_types``: counts and switches), by what they accept."""


def wrong_type(expected: str, value: object) -> str:
    """What a strict count or switch was given instead, and how to write it."""
    if isinstance(value, bool):
        return f", not {str(value).lower()} (a boolean)"
    if isinstance(value, str):
        return f", not '{value}' (a string): write {expected} without quotes"
    return f", not {value!r}: write {expected}"


def shape_hint(error: dict) -> str:
    """How to write a value of the wrong shape where users most often give one: a pipeline's name, a Spark setting,
    the inline value schema."""
    loc, value = tuple(str(p) for p in error["loc"]), error.get("input")
    if error["type"] == "string_pattern_mismatch" and loc == ("name",):
        return (f"'name': {value!r} is not a pipeline name: letters, digits, '_', '.' and '-', up to 200 characters, "
                f"not starting with '.' or '-'")
    if error["type"] == "string_type" and loc[:1] == ("spark_conf",) and isinstance(value, (int, float, bool)):
        shown = str(value).lower() if isinstance(value, bool) else value
        return f"'{'.'.join(loc)}': Spark settings are strings: write the value in quotes, \"{shown}\""
    if error["type"] == "dict_type" and loc == ("value_schema",) and isinstance(value, list):
        return ("'value_schema': Input should be a mapping of field names to types, not a list: write value_schema: "
                "{id: bigint, amount: 'decimal(10,2)', note: 'string?'}")
    return ""


def describe_error(error: dict, root: type[BaseModel]) -> str:
    """One validation error of ``root`` in the user's words."""
    if hint := shape_hint(error):
        return hint
    field = ".".join(str(p) for p in error["loc"]) or "(top level)"
    if error["type"] == "extra_forbidden":
        accepted = accepted_keys(tuple(error["loc"]), root)
        close = difflib.get_close_matches(str(error["loc"][-1]), accepted, n=1)
        hint = f"did you mean '{close[0]}'? " if close else ""
        return f"unknown key '{field}' ({hint}accepted keys: {', '.join(accepted)})"
    if error["type"] == "missing":
        return f"'{field}' is required"
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "list_type" and isinstance(error.get("input"), str):
        message += f"; write it as a list: {field}: [{error['input']}]"
    if error["type"] in STRICT_TYPES and "input" in error:
        message += wrong_type(STRICT_TYPES[error["type"]], error["input"])
    return message if not error["loc"] else f"'{field}': {message}"
