"""`--max-cost` with `--keep-on-failure`: a failed job's hosts bill for the keep window
after it, whatever the spec's autostop window, so the budget's longest bill counts the
longer of the two. The Lambda fake on a thread; refused before the launch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from test_cost_budget import job, lam, nothing_launched

from infra.fakes import RunningFake

__all__ = ["lam"]  # the Lambda fake's fixture


def test_the_budget_counts_a_keep_window_longer_than_the_autostop_one(
    lam: RunningFake, gpujob: Callable, tmp_path: Path
) -> None:
    spec = job(tmp_path, "max_duration: 8h\nresources: {autostop: {idle_minutes: 30}}\n")
    done = gpujob("submit", str(spec), "--up", "a100", "--allow-cpu", "--max-cost", "13",
                  "--autostop-key-on-host", "--keep-on-failure", "2h")  # fmt: skip
    assert done.exit_code == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gpujob: error: --max-cost $13.00: 1 x $1.29/h x 10.83h (start 50m "
                           "+ max_duration 8h + keep_on_failure 2h) = $13.9"), last  # fmt: skip
    nothing_launched(lam)
    within = gpujob("submit", str(spec), "--up", "a100", "--allow-cpu", "--max-cost", "13",
                    "--autostop-key-on-host", "--keep-on-failure", "10m", "--dry-run")  # fmt: skip
    assert "max_duration 8h + autostop 30m) = $12.04" in within.stderr, within.stderr
