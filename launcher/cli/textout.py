"""Plain-text tables for commands that must start fast (rich costs ~50 ms to import)."""

from __future__ import annotations

from typing import Any


def table(rows: list[dict[str, Any]], columns: tuple[str, ...], width: int = 60) -> str:
    cells = [[_cell(row.get(col), width) for col in columns] for row in rows]
    widths = [max(len(col), *(len(line[i]) for line in cells)) for i, col in enumerate(columns)]
    out = ["  ".join(col.upper().ljust(w) for col, w in zip(columns, widths, strict=True))]
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in cells]
    return "\n".join(line.rstrip() for line in out)


def _cell(value: Any, width: int) -> str:
    text = "-" if value is None or value == "" else str(value)
    return text if len(text) <= width else text[: width - 1] + "…"
