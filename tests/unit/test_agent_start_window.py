"""A start that never reached the agent, and a start that races a cancel (agent.py,
stopping.py), with the real agent: a one-node job's start comes right after job.json, so
once its window has passed with no status the node never started, for good; a start and a
cancel of a node not yet started decide under the node folder's lock, and whichever comes
first, nothing of the job is left running and the node ends cancelled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from launcher.agent import agent  # noqa: F401  (puts the agent's siblings on the path)
from launcher.agent.agent_os import marked, processes

AGENT = Path(__file__).resolve().parents[2] / "launcher" / "agent" / "agent.py"


def run_agent(*args: str) -> tuple[int, dict]:
    done = subprocess.run([sys.executable, str(AGENT), *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120, check=False)  # fmt: skip
    return done.returncode, json.loads(done.stdout.splitlines()[-1])


def node(tmp_path: Path, name: str, window: int | None = 30, age_s: float = 0) -> Path:
    node_dir = tmp_path / name
    node_dir.mkdir()
    config = {"argv": ["sleep", "600"], "runtime": "bare", "log": "job.log", "grace_s": 1}
    if window is not None:
        config["start_window_s"] = window
    (node_dir / "job.json").write_text(json.dumps(config))
    then = time.time() - age_s
    os.utime(node_dir / "job.json", (then, then))
    return node_dir


def left_running(node_dir: Path) -> list[int]:
    return marked(f"GPUJOB_AGENT_NODE={node_dir}", None, processes())


@pytest.fixture
def stop_all(request: pytest.FixtureRequest) -> list[Path]:
    dirs: list[Path] = []

    def stop() -> None:
        for node_dir in dirs:
            for pid in left_running(node_dir):
                os.kill(pid, 9)

    request.addfinalizer(stop)
    return dirs


def test_a_start_that_never_came_is_failed_never_started_and_a_late_one_refused(
    tmp_path: Path, stop_all: list[Path]
) -> None:
    node_dir = node(tmp_path, "node-0", age_s=31)
    stop_all.append(node_dir)
    code, said = run_agent("status", str(node_dir))
    assert (said["state"], said["never_started"]) == ("failed", True), said
    assert said["reason"].startswith("never started"), said

    code, said = run_agent("start", str(node_dir))
    assert code == 1 and said["state"] == "failed" and said["never_started"], said
    assert left_running(node_dir) == []
    code, said = run_agent("cancel", str(node_dir), "1")
    assert code == 0 and said["had_ended"] and said["state"] == "failed", said


@pytest.mark.parametrize(
    ("window", "age_s"), [(30, 5), (None, 600)], ids=["in-its-window", "a-node-of-several"]
)
def test_a_node_not_yet_started_is_unknown_and_starts(
    tmp_path: Path, stop_all: list[Path], window: int | None, age_s: float
) -> None:
    """In its window, or a node of several (its start comes once all are prepared, however
    long that takes): no verdict, and its start runs."""
    node_dir = node(tmp_path, "node-0", window, age_s)
    stop_all.append(node_dir)
    assert run_agent("status", str(node_dir))[1]["state"] == "unknown"
    code, said = run_agent("start", str(node_dir))
    assert code == 0 and said["state"] == "running", said
    code, said = run_agent("cancel", str(node_dir), "1")
    assert code == 0 and said["state"] == "cancelled", said
    assert left_running(node_dir) == []


def test_a_start_and_a_cancel_at_once_leave_nothing_running(
    tmp_path: Path, stop_all: list[Path]
) -> None:
    dirs = [node(tmp_path, f"node-{i}") for i in range(8)]
    stop_all.extend(dirs)
    with ThreadPoolExecutor(16) as pool:
        starts = [pool.submit(run_agent, "start", str(d)) for d in dirs]
        cancels = [pool.submit(run_agent, "cancel", str(d), "1") for d in dirs]
        for done in [*starts, *cancels]:
            done.result()
    for node_dir in dirs:
        deadline = time.monotonic() + 30
        while left_running(node_dir) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert left_running(node_dir) == [], node_dir
        status = json.loads((node_dir / "status.json").read_text())
        assert status["state"] == "cancelled", status
