"""A provider call the cloud answers with 429 or a 5xx is retried with backoff, and each wait
is said on stderr, so that a long backoff never looks like a hang (the Lambda fake on a
thread, no hosts)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clouds import point_at

from infra.fakes import RunningFake, serve_lambda
from infra.fakes.null_backend import NullBackend


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, state_dir: Path) -> Iterator[RunningFake]:
    running = serve_lambda(NullBackend())
    point_at(monkeypatch, tmp_path, lam=running)
    yield running
    running.stop()


@pytest.mark.parametrize(("status", "said"), [(429, "429 rate limited"), (503, "503 unavailable")])
def test_each_retry_wait_is_one_line_on_stderr(
    fake: RunningFake, gpujob: Callable, status: int, said: str
) -> None:
    fake.control.fault(op="list_instance_types", status=status, count=2)
    result = gpujob("up", "a100", "--dry-run")  # reads the offers, launches nothing
    assert result.exit_code == 0, result.stderr
    waits = [line for line in result.stderr.splitlines() if "retrying in" in line]
    assert len(waits) == 2, result.stderr
    for attempt, line in enumerate(waits, start=2):
        pattern = rf"gpujob: lambda: {said}; retrying in \d+\.\d s \(attempt {attempt} of 6\)"
        assert re.fullmatch(pattern, line), line
