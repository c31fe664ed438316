"""Kernel timings as CSV: a header naming the operator's fields (kind, m, n, k, dtype, ...) beside time_s and,
optionally, a row's own engine and source; each data row one timing, read into the JSON body the kernel-timings
write takes, so both forms are validated by the same contract and answer the same locations (timings.N is the
N-th data row, counted from 0)."""

from __future__ import annotations

import csv
import io
import json
import math
from typing import Any

from pydantic import ValidationError

from schemas.calibrations import MAX_TIMINGS, KernelTimingsCreate
from service.runtime.errors import Unprocessable, invalid_nested

TIMING_COLUMNS = ("time_s", "engine", "source")


def _value(cell: str) -> Any:
    """A cell as the JSON body would carry it: an integer, a finite number, a list or object, else the text."""
    text = cell.strip()
    for parse in (int, float):
        try:
            number = parse(text)
        except ValueError:
            continue
        return number if math.isfinite(number) else text
    if text[:1] in "[{":
        try:
            return json.loads(text)
        except (ValueError, RecursionError):  # a cell nested past the parser's depth (20,000 '[') is text too
            return text
    return text


def _refused(message: str) -> Unprocessable:
    return Unprocessable(f"body: {message}", [{"loc": "body", "msg": message}])


def kernel_timings_from_csv(raw: bytes, *, engine: str, source: str) -> KernelTimingsCreate:
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _refused(f"not UTF-8 text (byte {exc.start})") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [name.strip() for name in next(reader, [])]
        if "time_s" not in header or "kind" not in header:
            raise _refused("the first line names the columns, among them kind (the operator's) and time_s")
        if len(set(header)) != len(header):
            raise _refused("a column is named twice")
        timings: list[dict[str, Any]] = []
        for line in reader:
            if not any(cell.strip() for cell in line):
                continue
            if len(timings) == MAX_TIMINGS:
                raise _refused(f"more than {MAX_TIMINGS:,} timings")
            if len(line) != len(header):
                raise _refused(f"data row {len(timings)} has {len(line)} cells for {len(header)} columns")
            cells = {name: _value(cell) for name, cell in zip(header, line, strict=True) if cell.strip()}
            timings.append({"operator": {name: value for name, value in cells.items() if name not in TIMING_COLUMNS},
                            **{name: cells[name] for name in TIMING_COLUMNS if name in cells}})
    except csv.Error as exc:
        raise _refused(f"not CSV: {exc}") from None
    try:
        return KernelTimingsCreate.model_validate({"engine": engine, "source": source, "timings": timings})
    except ValidationError as exc:
        raise invalid_nested(exc, ["body"]) from None
