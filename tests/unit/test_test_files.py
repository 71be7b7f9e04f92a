"""The suite collects as one: pytest imports test files by their basename (rootdir-relative
imports are off), so two folders holding a `test_x.py` stop the whole run at collection
(`make test` ended in 3 s with `import file mismatch` when two branches each added one)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_files_share_a_basename() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []
