"""The agent signals only the job's own processes (agent_os.py, runtimes.py): a pid is
signalled only while it is the process that started at the recorded time, another user's
process is passed over, and a job's process is found by the marker in its environment
wherever it sits. Real processes, real signals."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.agent import agent  # noqa: F401  (puts the agent's siblings on the path)
from launcher.agent.agent_os import marked, processes, signal_if_same, start_ticks
from launcher.agent.runtimes import stop_processes

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


@pytest.fixture
def sleeper(request: pytest.FixtureRequest) -> subprocess.Popen:
    proc = subprocess.Popen(SLEEP)
    request.addfinalizer(lambda: (proc.kill(), proc.wait()))
    return proc


def test_a_pid_that_is_another_process_now_is_not_signalled(sleeper: subprocess.Popen) -> None:
    start = start_ticks(sleeper.pid)
    assert start is not None
    assert not signal_if_same(sleeper.pid, start - 1, 9)  # the recorded one was older
    assert not signal_if_same(sleeper.pid, None, 9)  # no start recorded: refused
    assert sleeper.poll() is None
    assert signal_if_same(sleeper.pid, start, 9)
    assert sleeper.wait(timeout=10) == -9


def test_stop_passes_over_a_reused_pid_at_the_kill(sleeper: subprocess.Popen) -> None:
    """The tree was taken with another start time for this pid (the job's process ended and
    the number went to this one): neither TERM nor KILL reaches it."""
    stop_processes(None, [(sleeper.pid, start_ticks(sleeper.pid) - 5)], 0.3)
    time.sleep(0.2)
    assert sleeper.poll() is None


def test_a_process_of_another_user_is_passed_over() -> None:
    """A cancel run as a user finds init (another user's): no PermissionError escapes."""
    code = (
        "from launcher.agent import agent\n"
        "from agent_os import forward, signal_if_same, start_ticks\n"
        "forward(1, 0)\n"
        "print(signal_if_same(1, start_ticks(1), 0))\n"
    )
    if os.geteuid() != 0:
        pytest.skip("needs root to run the check as another user")
    repo = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code],
        capture_output=True, text=True, cwd="/", env=dict(os.environ, PYTHONPATH=repo),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() in ("True", "False")


def test_a_job_process_is_found_by_its_marker_in_a_session_of_its_own(tmp_path: Path) -> None:
    marker = f"GPUJOB_AGENT_NODE={tmp_path}"
    env = dict(os.environ, GPUJOB_AGENT_NODE=str(tmp_path))
    since = start_ticks(os.getpid())
    ours = subprocess.Popen(SLEEP, env=env, start_new_session=True)
    other = subprocess.Popen(SLEEP, env=dict(env, GPUJOB_AGENT_NODE=f"{tmp_path}-other"))
    try:
        found = marked(marker, since, processes())
        assert found == [ours.pid]
        assert marked(marker, start_ticks(ours.pid) + 1, processes()) == []  # started before
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait()


def test_a_cancel_run_from_inside_the_job_does_not_find_itself_or_its_callers(
    tmp_path: Path,
) -> None:
    code = (
        "from launcher.agent import agent\n"
        "from agent_os import marked, processes\n"
        f"print(marked('GPUJOB_AGENT_NODE={tmp_path}', None, processes()))\n"
    )
    env = dict(os.environ, GPUJOB_AGENT_NODE=str(tmp_path))
    done = subprocess.run(["sh", "-c", "\"$0\" -c \"$1\"; :", sys.executable, code],
                          env=env, capture_output=True, text=True, check=True)  # fmt: skip
    assert done.stdout.strip() == "[]", done
