"""The agent's own lines in a job log (reserve.say_in_log): each starts a line of its own,
whatever the job's output ended with, so `logs`, the notify tail and a reader of the file
never take one for the job's."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.agent import agent  # noqa: F401  (puts the agent's siblings on the path)
from launcher.agent.reserve import LOG_FLAGS, say_in_log


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (b"", b"[gpujob-agent] cancel: SIGTERM\n"),
        (b"step 10\n", b"step 10\n[gpujob-agent] cancel: SIGTERM\n"),
        (b"50%|#####     |\r", b"50%|#####     |\r\n[gpujob-agent] cancel: SIGTERM\n"),
        (b"loss 2.1", b"loss 2.1\n[gpujob-agent] cancel: SIGTERM\n"),
    ],
)
def test_an_agent_line_never_continues_the_jobs_last_line(
    tmp_path: Path, before: bytes, after: bytes
) -> None:
    log = tmp_path / "job.log"
    log.write_bytes(before)
    fd = os.open(log, LOG_FLAGS, 0o644)
    try:
        say_in_log(fd, ["cancel: SIGTERM"])
    finally:
        os.close(fd)
    assert log.read_bytes() == after
