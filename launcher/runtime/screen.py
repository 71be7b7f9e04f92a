"""What a job's bytes become on the reader's screen, in bounded memory.

On a terminal the job's control bytes are shown, not obeyed: an escape sequence could retitle
the window, move the cursor over earlier lines or write to the clipboard (OSC 52). What
progress bars need is kept (`\\r`, `\\b`, tab, newline, and the CSI sequences for colours,
erasing the line and moving up one line, as tqdm and rich write them); every other C0 byte
and escape is shown in caret notation (`^[`, `^G`), and every C1 control (U+0080 to U+009F,
as UTF-8 `\\xc2\\x9b` or a stray byte `\\x9b`: the one-byte CSI that a terminal obeys like
`ESC [`) as `cat -v` shows it (`M-^[`). A file or a pipe gets the bytes as the job wrote them.

A line rewritten with `\\r` (a progress bar) can be hundreds of MB before its newline; where
lines are held to be prefixed with their node (`[node 1] `), what is held is compacted to what
a terminal would show, and a line still past `LINE_MAX` is shown in pieces.
"""

from __future__ import annotations

import re

LINE_MAX = 64 * 1024
"""The most bytes of one unfinished line held per node."""

SEQUENCE_MAX = 32
"""An escape sequence cut between two reads is held up to this long, then shown escaped."""

_UTF8 = rb"[\xc3-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{2}|[\xf0-\xf4][\x80-\xbf]{3}"
"""Whole UTF-8 characters, kept: their bytes past the first are 0x80 to 0xBF, not stray C1
bytes. `\\xc2` is left out: followed by 0x80..0x9F it is a C1 control (U+0080..U+009F)."""
_CONTROL = re.compile(
    rb"\x1b\[[0-9;]*[mK]|\x1b\[1?A|"
    + _UTF8
    + rb"|\xc2[\x80-\x9f]|[\x00-\x07\x0b\x0c\x0e-\x1f\x7f-\x9f]"
)
_UNFINISHED = re.compile(
    rb"(\x1b(\[[0-9;]*)?|[\xc2-\xdf]|[\xe0-\xef][\x80-\xbf]?|[\xf0-\xf4][\x80-\xbf]{0,2})\Z"
)


def caret(byte: int) -> bytes:
    """`^[` for ESC, `^G` for BEL, `^?` for DEL: how `cat -v` and terminals' own echo show
    a control byte."""
    return b"^?" if byte == 0x7F else b"^" + bytes([byte + 0x40])


def _shown(match: re.Match[bytes]) -> bytes:
    found = match.group()
    if found[:1] == b"\xc2" and found[1:] < b"\xa0":
        found = found[1:]  # U+0080..U+009F in UTF-8: the C1 control, shown as its byte
    if len(found) > 1:
        return found
    return b"M-" + caret(found[0] - 0x80) if 0x80 <= found[0] < 0xA0 else caret(found[0])


def terminal_safe(data: bytes, held: bytes = b"", final: bool = False) -> tuple[bytes, bytes]:
    """(what to write, what to hold for the next read): `data` after `held` with every
    control byte a terminal would obey shown in caret notation, except progress bars' own.
    `final`: nothing comes after, so nothing is held."""
    data = held + data
    keep = b""
    unfinished = None if final else _UNFINISHED.search(data, max(0, len(data) - SEQUENCE_MAX))
    if unfinished is not None:
        data, keep = data[: unfinished.start()], data[unfinished.start() :]
    if _CONTROL.search(data) is None:
        return data, keep
    return _CONTROL.sub(_shown, data), keep


def collapse_carriage_returns(line: bytes) -> bytes:
    """What a terminal leaves on screen for a line rewritten with `\\r`: each segment
    overwrites the start of the last (`50%\\r100%` shows `100%`; `abcd\\rxy` shows
    `xycd`). A `\\r\\n` ending is a line ending, not a rewrite."""
    body, end = line, b""
    if body.endswith(b"\n"):
        body, end = body[:-1], b"\n"
    if body.endswith(b"\r"):
        body, end = body.rstrip(b"\r"), b"\r" + end
    if b"\r" not in body:
        return line
    screen = ""
    for segment in body.decode(errors="surrogateescape").split("\r"):
        screen = segment + screen[len(segment) :]
    return screen.encode(errors="surrogateescape") + end


def compact(partial: bytes) -> bytes:
    """An unfinished line held as what it shows so far, then `\\r` and the segment being
    written: the same line to `collapse_carriage_returns` once it ends, in the size of the
    screen rather than of every rewrite."""
    cut = partial.rfind(b"\r")
    if cut <= 0:
        return partial
    return collapse_carriage_returns(partial[:cut]).rstrip(b"\r") + partial[cut:]
