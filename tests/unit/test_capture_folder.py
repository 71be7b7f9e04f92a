"""`captures/` beside the checkpoints: shipped whole files only, and never a checkpoint."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

# as the agent imports them on a host: siblings on sys.path
sys.path.append(str(Path(__file__).resolve().parents[2] / "launcher" / "agent"))
ckpt_captures: Any = importlib.import_module("ckpt_captures")
ckpt_store: Any = ckpt_captures.ckpt_store


def test_the_captures_folder_is_no_checkpoint_and_no_stray(tmp_path: Path) -> None:
    (tmp_path / "captures" / "rank-1").mkdir(parents=True)
    (tmp_path / "checkpoint-5").mkdir()
    (tmp_path / "other").mkdir()
    assert ckpt_store.unrecognised(tmp_path) == ["other"]
    assert [c.name for c in ckpt_store.scan(tmp_path)] == ["checkpoint-5"]


def test_only_whole_captures_are_shipped(tmp_path: Path) -> None:
    rank = tmp_path / "captures" / "rank-1"
    rank.mkdir(parents=True)
    (rank / "step-7.pt").write_bytes(b"x" * 10)
    (rank / "step-7.json").write_text("{}\n")
    (rank / ".tmp-step-8.pt.123").write_bytes(b"half")
    (rank / "notes.txt").write_text("not ours")
    assert ckpt_captures.found(tmp_path) == {"rank-1/step-7.json": 3, "rank-1/step-7.pt": 10}
    assert ckpt_captures.found(tmp_path / "absent") == {}
