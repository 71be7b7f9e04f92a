"""A multi-node job keeps the failure rule with nobody following (submitted with --detach, or
its follow stopped by Ctrl-C): node 0 fails, and its keeper (a process of this machine in a
session of its own) cancels node 1, records the job's end with node 0's exit code, and exits.
Two real agents on this machine (the local provider), a shell `run:` block, the real CLI."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

import pytest
from test_local_jobs import GPUJOB, alive, descendants, gpujob, status_of, wait_for

pytestmark = pytest.mark.e2e

FAILS_ON_NODE_0 = """\
name: keeper
image: host
workdir: work
nodes: 2
run: |
  if [ "$GPUJOB_NODE_RANK" = 0 ]; then
    until [ -e fail-now ]; do sleep 0.2; done
    echo "node 0 gives up"; exit 3
  fi
  echo "node 1 runs on"; sleep 600
"""


@pytest.fixture
def state(tmp_path: Path) -> dict[str, str]:
    import os

    return dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"), GPUJOB_KEEPER_POLL_S="1")


def test_node_0_failing_detached_stops_node_1_and_records_the_end(
    tmp_path: Path, state: dict[str, str]
) -> None:
    spec = job_spec(tmp_path)
    started = gpujob(state, "submit", str(spec), "--detach", "--job-id", "kept")
    assert started.returncode == 0, started.stderr.decode()
    check_kept(state, "kept", keeper_pid(started.stderr.decode()))


def test_a_stopped_follow_hands_the_job_to_its_keeper(
    tmp_path: Path, state: dict[str, str]
) -> None:
    spec = job_spec(tmp_path)
    follow = subprocess.Popen([GPUJOB, "submit", str(spec), "--job-id", "followed"], env=state,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert follow.stdout is not None
    for line in follow.stdout:  # the follow shows node 1's line: it follows now
        if b"node 1 runs on" in line:
            break
    follow.send_signal(signal.SIGINT)
    _, err = follow.communicate(timeout=60)
    assert follow.returncode == 130, err.decode()
    assert "stopped following; the job goes on" in err.decode()
    check_kept(state, "followed", keeper_pid(err.decode()))


def job_spec(folder: Path) -> Path:
    (folder / "work").mkdir()
    spec = folder / "job.yaml"
    spec.write_text(FAILS_ON_NODE_0)
    return spec


def keeper_pid(stderr: str) -> int:
    found = re.search(r"keeper pid (\d+): if a node fails, it stops the others", stderr)
    assert found, stderr
    return int(found[1])


def check_kept(state: dict[str, str], job_id: str, keeper: int) -> None:
    """Node 0 made to fail while node 1 runs: node 1 cancelled, its processes gone, the
    keeper's log saying why, the job failed with node 0's code, the keeper ended."""
    jobs = Path(state["GPUJOB_STATE_DIR"]) / "jobs" / job_id
    wait_for(lambda: b"node 1 runs on" in (jobs / "node-1" / "job.log").read_bytes())
    pid = json.loads((jobs / "node-1" / "status.json").read_text())["pid"]
    tree = [pid, *descendants(pid)]
    assert alive(keeper)
    (jobs / "workdir" / "fail-now").touch()

    def ended(rank: int) -> dict:
        return json.loads((jobs / f"node-{rank}" / "status.json").read_text())

    wait_for(lambda: ended(1)["state"] == "cancelled")
    assert (ended(0)["state"], ended(0)["exit_code"]) == ("failed", 3)
    wait_for(lambda: not alive(keeper))  # it ends once every node has
    assert not [p for p in tree if alive(p)], "node 1's processes outlived the failure"
    log = (Path(state["GPUJOB_STATE_DIR"]) / "keeper" / f"{job_id}.log").read_text()
    assert "node 0 failed (exit code 3); stopping node(s) 1" in log, log
    assert f"job {job_id} failed (exit code 3)" in log, log
    row = status_of(state, job_id)
    assert (row["state"], row["exit_code"]) == ("failed", 3)


def test_a_single_node_job_has_no_keeper(tmp_path: Path, state: dict[str, str]) -> None:
    (tmp_path / "work").mkdir()
    spec = tmp_path / "job.yaml"
    spec.write_text("name: one\nimage: host\nworkdir: work\nrun: echo alone\n")
    started = gpujob(state, "submit", str(spec), "--detach", "--job-id", "one")
    assert started.returncode == 0, started.stderr
    assert b"keeper" not in started.stderr
    assert not (Path(state["GPUJOB_STATE_DIR"]) / "keeper").exists()


def test_a_users_cancel_stays_a_cancel(tmp_path: Path, state: dict[str, str]) -> None:
    """The keeper leaves a job its user cancelled: recorded cancelled, never failed."""
    spec = job_spec(tmp_path)
    started = gpujob(state, "submit", str(spec), "--detach", "--job-id", "stopped")
    assert started.returncode == 0, started.stderr.decode()
    keeper = keeper_pid(started.stderr.decode())
    log = Path(state["GPUJOB_STATE_DIR"]) / "jobs" / "stopped" / "node-1" / "job.log"
    wait_for(lambda: b"node 1 runs on" in log.read_bytes())
    cancelled = gpujob(state, "cancel", "stopped", "--grace", "5")
    assert cancelled.returncode == 0, cancelled.stderr.decode()
    wait_for(lambda: not alive(keeper))
    row = status_of(state, "stopped")
    assert row["state"] == "cancelled", row
    said = (Path(state["GPUJOB_STATE_DIR"]) / "keeper" / "stopped.log").read_text()
    assert "stopping node" not in said, said


BOTH_RUN = """\
name: keeper
image: host
workdir: work
nodes: 2
run: |
  echo "node $GPUJOB_NODE_RANK runs on"; sleep 600
"""


@pytest.mark.parametrize("detached", [True, False], ids=["keeper", "follow"])
def test_a_lost_node_is_cancelled_with_the_others(
    tmp_path: Path, state: dict[str, str], detached: bool, request: pytest.FixtureRequest
) -> None:
    """Node 1's supervisor killed (an OOM killer): node 1 is lost, its processes run on.
    The keeper (detached) or the follow stops node 0 and cancels the lost node 1 too, so no
    process of either node is left (issue 25)."""
    import os

    (tmp_path / "work").mkdir()
    spec = tmp_path / "job.yaml"
    spec.write_text(BOTH_RUN)
    job_id = "lost1"
    argv = [GPUJOB, "submit", str(spec), "--job-id", job_id, *(["--detach"] if detached else [])]
    submit = subprocess.Popen(argv, env=state, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    jobs = Path(state["GPUJOB_STATE_DIR"]) / "jobs" / job_id
    for rank in (0, 1):
        wait_for(lambda r=rank: b"runs on" in (jobs / f"node-{r}" / "job.log").read_bytes())
    trees = []
    for rank in (0, 1):
        pid = json.loads((jobs / f"node-{rank}" / "status.json").read_text())["pid"]
        trees += [pid, *descendants(pid)]
    request.addfinalizer(lambda: [os.kill(p, signal.SIGKILL) for p in trees if alive(p)])
    supervisor = json.loads((jobs / "node-1" / "status.json").read_text())["supervisor_pid"]
    os.kill(supervisor, signal.SIGKILL)
    _, err = submit.communicate(timeout=120)
    wait_for(lambda: not [p for p in trees if alive(p)], timeout=60)
    if detached:
        log = (Path(state["GPUJOB_STATE_DIR"]) / "keeper" / f"{job_id}.log").read_text()
        assert "node 1 lost" in log and "stopping node(s) 0, 1" in log, log
    else:
        assert "node 1 lost" in err.decode() and "stopping the other nodes" in err.decode()
    assert status_of(state, job_id)["state"] in ("lost", "cancelled")
