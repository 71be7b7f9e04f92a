"""Scalars from TensorBoard event files, read with the standard library alone (the agent's
contract): the figures a job writes with `SummaryWriter.add_scalar` or `tf.summary.scalar`,
for metrics.py.

An event file is a sequence of TFRecords (a little-endian u64 length, a u32 CRC of it, the
bytes, a u32 CRC of them); each record is an `Event` protobuf: `step` (field 2) and a
`summary` (field 5) of `value`s (field 1), each a `tag` (1) and either a `simple_value` (2,
float32: PyTorch's and TF1's way) or a `tensor` (8: TF2's) whose one number is in
`float_val` (5), `double_val` (6), `int64_val` (10) or `tensor_content` (4) by its dtype.
Anything else (images, histograms, graphs) is skipped. A record still being written (too
short for its length) waits for the next read; the CRCs are not checked (CRC-32C is not in
the standard library), so a length past `MAX_RECORD` ends the file's reading instead.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

MAX_RECORD = 64 << 20
READ_AT_MOST = 8 << 20
DT_FLOAT, DT_DOUBLE, DT_INT32, DT_INT64 = 1, 2, 3, 9
Fields = dict[int, list[int | bytes]]


def varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise ValueError("a varint runs past its message")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def fields(data: bytes) -> Fields:
    """A message's fields by number: varints as ints; fixed64, fixed32 and length-delimited
    values as their bytes."""
    found: Fields = {}
    at = 0
    while at < len(data):
        key, at = varint(data, at)
        number, wire = key >> 3, key & 7
        value: int | bytes
        if wire == 0:
            value, at = varint(data, at)
        elif wire == 1:
            value, at = data[at : at + 8], at + 8
        elif wire == 2:
            size, at = varint(data, at)
            value, at = data[at : at + size], at + size
        elif wire == 5:
            value, at = data[at : at + 4], at + 4
        else:
            raise ValueError(f"wire type {wire} is not read here")
        if at > len(data):
            raise ValueError("a field runs past its message")
        found.setdefault(number, []).append(value)
    return found


def _tensor_number(tensor: bytes) -> float | None:
    """The one number of a scalar TensorProto, by its dtype."""
    parts = fields(tensor)
    dtype = parts.get(1, [DT_FLOAT])[0]
    for number, code, fmt in ((5, DT_FLOAT, "<f"), (6, DT_DOUBLE, "<d")):
        for raw in parts.get(number, []):  # packed (bytes) as written; never a varint here
            if dtype == code and isinstance(raw, bytes) and len(raw) >= struct.calcsize(fmt):
                return float(struct.unpack_from(fmt, raw)[0])
    for raw in parts.get(10, []) + parts.get(7, []):  # int64_val, int_val
        if isinstance(raw, int):
            return float(raw)
        if isinstance(raw, bytes) and raw:
            return float(varint(raw, 0)[0])
    content = parts.get(4, [b""])[0]
    formats = {DT_FLOAT: "<f", DT_DOUBLE: "<d", DT_INT32: "<i", DT_INT64: "<q"}
    fmt = formats.get(dtype if isinstance(dtype, int) else 0)
    if fmt and isinstance(content, bytes) and len(content) == struct.calcsize(fmt):
        return float(struct.unpack(fmt, content)[0])
    return None


def scalars(event: bytes) -> tuple[int | None, dict[str, float]]:
    """An Event's step and its scalars by tag (none for an event of another kind)."""
    parts = fields(event)
    step = parts.get(2, [None])[0]
    found: dict[str, float] = {}
    for summary in parts.get(5, []):
        if not isinstance(summary, bytes):
            continue
        for value in fields(summary).get(1, []):
            if not isinstance(value, bytes):
                continue
            item = fields(value)
            tag = item.get(1, [b""])[0]
            if not isinstance(tag, bytes) or not tag:
                continue
            number: float | None = None
            simple = item.get(2)
            if simple and isinstance(simple[0], bytes) and len(simple[0]) == 4:
                number = struct.unpack("<f", simple[0])[0]
            elif item.get(8) and isinstance(item[8][0], bytes):
                number = _tensor_number(item[8][0])
            if number is not None and math.isfinite(number):
                found[tag.decode(errors="replace")[:64]] = number
    return (step if isinstance(step, int) else None), found


def records(data: bytes) -> tuple[list[bytes], int]:
    """The whole records at the start of `data`, and how many bytes they took."""
    found, at = [], 0
    while len(data) - at >= 12:
        (size,) = struct.unpack_from("<Q", data, at)
        if size > MAX_RECORD:
            raise ValueError(f"a record of {size} bytes: not an event file")
        end = at + 12 + size + 4
        if end > len(data):
            break
        found.append(data[at + 12 : at + 12 + size])
        at = end
    return found, at


class EventFolder:
    """The scalars added since the last read, from every event file under `folder`, one
    object per step (`{"step": 10, "train/loss": 0.5, ...}`), in the order written."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.offsets: dict[Path, int] = {}
        self.broken: set[Path] = set()

    def steps(self) -> list[dict[str, float | int]]:
        out: list[dict[str, float | int]] = []
        try:
            files = sorted(self.folder.rglob("*tfevents*"))
        except OSError:
            return out
        for path in files:
            if path in self.broken or not path.is_file():
                continue
            try:
                out.extend(self._read(path))
            except (OSError, ValueError, struct.error):
                self.broken.add(path)  # not an event file after all: left alone from now on
        return out

    def _read(self, path: Path) -> list[dict[str, float | int]]:
        with open(path, "rb") as source:
            source.seek(self.offsets.get(path, 0))
            data = source.read(READ_AT_MOST)
        found, used = records(data)
        self.offsets[path] = self.offsets.get(path, 0) + used
        by_step: dict[int | None, dict[str, float | int]] = {}
        for record in found:
            step, values = scalars(record)
            if values:
                entry = by_step.setdefault(step, {} if step is None else {"step": step})
                entry.update(values)
        return list(by_step.values())
