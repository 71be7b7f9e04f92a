"""An ended job's last figures kept on this machine (launcher/state/figures.py) for `status`:
the headline, its trend and step outlive the job; its GPUs' busy % does not; a file that is
not ours reads as none."""

from __future__ import annotations

from pathlib import Path

import pytest

from launcher.commands.status import metrics_text
from launcher.state import figures


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUJOB_STATE_DIR", str(tmp_path))
    return tmp_path


def test_the_headline_is_kept_and_shown_without_the_gpus(state: Path) -> None:
    summary = {"name": "loss", "value": 0.8597, "trend": "down", "step": 60,
               "tokens_per_s": 29500.0, "gpu_util": 87}  # fmt: skip
    figures.save("j1", summary)
    kept = figures.load("j1")
    assert kept == {k: v for k, v in summary.items() if k != "gpu_util"}
    assert metrics_text([{"metrics": kept}]) == "loss 0.8597 ↓ @60, 29.5k tok/s"
    assert [p.name for p in (state / "figures").iterdir()] == ["j1.json"]  # no temp file left


def test_nothing_kept_without_a_figure_and_junk_reads_as_none(state: Path) -> None:
    figures.save("j2", {"gpu_util": 50})
    figures.save("j3", None)
    assert figures.load("j2") is None and figures.load("j3") is None
    (state / "figures").mkdir()
    (state / "figures" / "j4.json").write_text("[1, 2")
    assert figures.load("j4") is None
    assert metrics_text([{"metrics": figures.load("j4") or {}}]) == ""
