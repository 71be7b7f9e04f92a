"""The agent's per-rank peak memory (agent/rank_memory.py) on real processes: two ranks (and a
child of one, which counts for its rank) holding different amounts, a process without RANK
left out of the ranks but not out of the tree's total, and status.json written with both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.agent import agent  # noqa: F401  (puts the agent's siblings on the path)
from launcher.agent.rank_memory import rank_of, sampler

HOLD = "import sys, time; blob = bytearray({mib} << 20); print('ready', flush=True); time.sleep(60)"


@pytest.fixture
def processes() -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    started: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str, mib: int, rank: str | None) -> None:
        env = {k: v for k, v in os.environ.items() if k != "RANK"}
        if rank is not None:
            env["RANK"] = rank
        proc = subprocess.Popen([sys.executable, "-c", HOLD.format(mib=mib)], env=env,
                                stdout=subprocess.PIPE)  # fmt: skip
        assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        started[name] = proc

    start("rank0", 40, "0")
    start("rank1", 160, "1")
    start("rank1-child", 80, "1")
    start("launcher", 8, None)
    yield started
    for proc in started.values():
        proc.kill()
        proc.wait()


def test_each_rank_keeps_its_own_peak(
    tmp_path: Path, processes: dict[str, subprocess.Popen[bytes]]
) -> None:
    pids = {name: proc.pid for name, proc in processes.items()}
    assert (rank_of(pids["rank0"]), rank_of(pids["launcher"])) == ("0", None)
    status: dict = {"state": "running"}
    sample = sampler(tmp_path, status, threading.Lock())
    sample(list(pids.values()))
    ranks = status["peak_rss_by_rank"]
    assert set(ranks) == {"0", "1"}
    assert 40 << 20 < ranks["0"] < 80 << 20
    assert 240 << 20 < ranks["1"] < 320 << 20  # the child counts for its rank
    assert status["peak_rss_bytes"] > ranks["0"] + ranks["1"]  # the launcher counts in the tree
    processes["rank1-child"].kill()
    processes["rank1-child"].wait()
    time.sleep(0.1)
    sample(list(pids.values()))
    assert status["peak_rss_by_rank"]["1"] == ranks["1"]  # a peak, not the present
    written = json.loads((tmp_path / "status.json").read_text())
    assert written["peak_rss_by_rank"]["1"] == ranks["1"]
