"""A v2 produce body read one record at a time, inside the byte budget, yielding to the loop.

``json.loads`` of a whole body holds the event loop for as long as it takes (tens of ms for a
few MiB, every other client waiting) and builds every record's dict at once, about 20 times the
body for small records, none of it counted. Here the body's text is walked by hand at the top
level (``{"records": [ ... ], ...}``) and each element of ``records`` is decoded alone with the
strict decoder, turned into a record (key and value bytes) and dropped, so that what is held is
the text, the records so far and one element. Every ``_SLICE`` characters the loop gets a turn
and the budget is charged with what is held now (429 when it cannot be).

The text replaces the body's bytes in one step with no await between: at most one body at a
time is held twice, for the span of a UTF-8 decode.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import sys
from collections.abc import Generator, Iterator
from typing import Any, NamedTuple

from ._errors import RETRY_AFTER_FULL_S, ErrorCode, RestError, invalid_payload
from ._gateway import ByteBudget
from ._records import STRICT_JSON, encode_json, json_problem

__all__ = ["Record", "budget_full", "parse_body", "parse_records", "recharge"]

# What a parsed record costs beyond its key and value bytes (the tuple and two bytes objects),
# charged to the budget with them.
RECORD_OVERHEAD = 128
# Characters of the body walked between two turns of the event loop.
_SLICE = 64 * 1024
_SPACE = re.compile(r"[ \t\n\r]*")
_WHAT = "the request body"


class Record(NamedTuple):
    key: bytes | None
    value: bytes | None
    partition: int | None


# The top-level fields beside "records" that a schema format reads (see _v2_schemas).
SCHEMA_FIELDS = frozenset({"key_schema", "key_schema_id", "value_schema", "value_schema_id"})


class _Parser:
    def __init__(self, body: bytes, embedded: str, max_records: int) -> None:
        if not body.strip():
            raise invalid_payload("the request body is empty; send {\"records\": [...]}")
        try:
            self._text = body.decode(json.detect_encoding(body), "surrogatepass")
        except UnicodeDecodeError as exc:
            raise _problem(exc) from None
        self._embedded = embedded
        self._max_records = max_records
        self.records: list[Record] = []
        self.parsed = 0  # budget bytes of the records so far
        self.fields: dict[str, object] = {}  # SCHEMA_FIELDS given, by name

    @property
    def cost(self) -> int:
        """What the parse holds now: the text (while it is walked) and the records."""
        return self.parsed + (sys.getsizeof(self._text) if self._text else 0)

    def steps(self) -> Iterator[None]:
        """Walk the body, yielding every ``_SLICE`` characters.

        Raises:
            RestError: 400 when it is not strict JSON, 422 for JSON of the wrong shape or a key
                or value that is not base64 (binary format), 413 for too many records.
        """
        text = self._text
        try:
            position = self._space(0)
            if not text.startswith("{", position):
                self._wrong_shape(position)
            position = self._space(position + 1)
            seen = False
            if text.startswith("}", position):
                position += 1
            else:
                while True:
                    if not text.startswith('"', position):
                        self._syntax("Expecting property name enclosed in double quotes", position)
                    name, position = STRICT_JSON.raw_decode(text, position)
                    position = self._space(position)
                    if not text.startswith(":", position):
                        self._syntax("Expecting ':' delimiter", position)
                    position = self._space(position + 1)
                    if name == "records":
                        if seen:
                            raise invalid_payload('the body gives "records" twice')
                        seen = True
                        position = yield from self._records(position)
                    else:
                        given, position = STRICT_JSON.raw_decode(text, position)
                        if name in SCHEMA_FIELDS:
                            self.fields[name] = given
                    position = self._space(position)
                    if text.startswith(",", position):
                        position = self._space(position + 1)
                        continue
                    if text.startswith("}", position):
                        position += 1
                        break
                    self._syntax("Expecting ',' delimiter", position)
            if self._space(position) != len(text):
                self._syntax("Extra data", position)
            if not seen:
                self._wrong_shape(None)
        except (ValueError, RecursionError) as exc:
            raise _problem(exc) from None
        self._text = ""

    def _records(self, position: int) -> Generator[None, None, int]:
        text = self._text
        if not text.startswith("[", position):
            self._wrong_shape(position)
        position = self._space(position + 1)
        if text.startswith("]", position):
            self._wrong_shape(None)
        turn = position + _SLICE
        while True:
            element, position = STRICT_JSON.raw_decode(text, position)
            self._add(element)
            position = self._space(position)
            if position >= turn:
                turn = position + _SLICE
                yield
            if text.startswith(",", position):
                position = self._space(position + 1)
                continue
            if text.startswith("]", position):
                return position + 1
            self._syntax("Expecting ',' delimiter", position)

    def _add(self, record: object) -> None:
        index = len(self.records)
        if index >= self._max_records:
            raise RestError(
                413,
                ErrorCode.PAYLOAD_TOO_LARGE,
                f"the request has more than max.records.per.request={self._max_records} "
                "records: send them in several requests",
            )
        if not isinstance(record, dict):
            raise invalid_payload(f"records[{index}] is {type(record).__name__}, not an object")
        partition = record.get("partition")
        if partition is not None and (type(partition) is not int or partition < 0):
            raise invalid_payload(
                f"records[{index}].partition must be a partition number (an integer >= 0), "
                f"not {partition!r}"
            )
        key = _field(record, "key", self._embedded, index)
        value = _field(record, "value", self._embedded, index)
        self.records.append(Record(key, value, partition))
        self.parsed += len(key or b"") + len(value or b"") + RECORD_OVERHEAD

    def _space(self, position: int) -> int:
        match = _SPACE.match(self._text, position)
        assert match is not None  # the pattern matches the empty string
        return match.end()

    def _syntax(self, message: str, position: int) -> None:
        raise json.JSONDecodeError(message, self._text, position)

    def _wrong_shape(self, position: int | None) -> None:
        if position is not None:
            # Valid JSON of another shape is 422, invalid JSON 400: decode what is there.
            STRICT_JSON.raw_decode(self._text, position)
        raise invalid_payload(
            "the body must be an object with a non-empty list \"records\", e.g. "
            "{\"records\": [{\"value\": ...}]}"
        )


def _problem(exc: Exception) -> RestError:
    problem = json_problem(exc, _WHAT)
    assert problem is not None
    return problem


def _field(record: dict[str, Any], name: str, embedded: str, index: int) -> bytes | None:
    data = record.get(name)
    if data is None:
        return None
    if embedded != "binary":
        # JSON, and the schema formats' JSON values, encoded once their schema is known.
        return encode_json(data, f"records[{index}].{name}")
    if not isinstance(data, str):
        raise invalid_payload(
            f"records[{index}].{name} must be a base64 string in the binary format, not "
            f"{type(data).__name__}; use application/vnd.kafka.json.v2+json to send JSON"
        )
    try:
        return base64.b64decode(data, validate=True)
    except ValueError as exc:  # binascii.Error, or characters beyond ASCII
        raise invalid_payload(f"records[{index}].{name} is not valid base64: {exc}") from None


def parse_records(body: bytes, embedded: str, max_records: int) -> list[Record]:
    """The records of a v2 produce body, at once (no budget, no turns of the loop).

    Raises:
        RestError: As :func:`parse_body`, but never 429.
    """
    parser = _Parser(body, embedded, max_records)
    del body
    for _ in parser.steps():
        pass
    return parser.records


async def parse_body(
    read: tuple[bytes, int],
    embedded: str,
    max_records: int,
    budget: ByteBudget,
    fields: dict[str, object] | None = None,
) -> tuple[list[Record], int]:
    """The records of a body read with ``held`` budget bytes (``read`` is ``(body, held)``),
    and the budget bytes held for them now; on failure nothing is held any more.

    The body comes in a tuple so that the caller keeps no reference to it: its bytes are freed
    as soon as its text is made. ``fields``, when given, receives the body's top-level schema
    fields (:data:`SCHEMA_FIELDS`).

    Raises:
        RestError: 400 when the body is not strict JSON (NaN, Infinity, numbers beyond a
            double, integers beyond the digit limit are refused), 422 for JSON of the wrong
            shape or invalid base64, 413 for too many records, 429 when the budget cannot
            hold the parse.
    """
    body, held = read
    del read
    try:
        parser = _Parser(body, embedded, max_records)
        del body
        held = recharge(budget, held, parser.cost)
        for _ in parser.steps():
            held = recharge(budget, held, parser.cost)
            await asyncio.sleep(0)
        held = recharge(budget, held, parser.cost)
        if fields is not None:
            fields.update(parser.fields)
    except BaseException:
        budget.give(held)
        raise
    return parser.records, held


def recharge(budget: ByteBudget, held: int, size: int) -> int:
    """Hold ``size`` budget bytes instead of ``held``; returns what is held now.

    Raises:
        RestError: 429 when the budget cannot grow to ``size`` (``held`` is still held).
    """
    if size > held:
        if not budget.take_nowait(size - held):
            raise budget_full(budget.total)
    else:
        budget.give(held - size)
    return size


def budget_full(total: int) -> RestError:
    return RestError(
        429,
        ErrorCode.TOO_MANY_REQUESTS,
        f"the server holds {total} bytes of request bodies (body.budget.bytes) already; retry "
        f"after {RETRY_AFTER_FULL_S} s",
        retry_after=RETRY_AFTER_FULL_S,
    )
