"""Setup on every node before any run, as SkyPilot does it: two nodes on loopback (two
agents on this machine), through the real CLI. Node 1's setup is the slow one; node 0's run
needs what it writes. A failed setup on node 1 ends the job naming node 1, and no run starts."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
SETUP = """\
echo "setup done on $GPUJOB_NODE_RANK"
if [ "$GPUJOB_NODE_RANK" = 0 ]; then touch "$NODE0_SETUP"; fi
if [ "$GPUJOB_NODE_RANK" = 1 ]; then
  # after node 0's setup (bounded): node 1 is always the last to finish
  for _ in $(seq 300); do [ -f "$NODE0_SETUP" ] && break; sleep 0.1; done
  test -f "$NODE0_SETUP"
  {last}
fi
"""
RUN = """\
test -f "$MARK" || {{ echo "node $GPUJOB_NODE_RANK: no $MARK"; exit 7; }}
echo "run started on $GPUJOB_NODE_RANK"
"""


def gpujob(tmp_path: Path, *args: str, **env_more: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"), **env_more)
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True,
                          timeout=300, cwd=REPO, check=False)  # fmt: skip


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def two_node_job(tmp_path: Path, setup_last: str, *run_fields: str) -> Path:
    """A job whose run block reads a file that only node 1's setup writes, after node 0's
    setup has ended."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "README").write_text("the run block needs no file of its own\n")
    mark = tmp_path / "node-1-setup-done"
    spec = tmp_path / "job.yaml"
    indent = lambda text: "".join(f"  {line}\n" for line in text.splitlines())  # noqa: E731
    spec.write_text(
        f"name: barrier\nimage: host\nworkdir: work\nnodes: 2\n"
        f"envs: {{MARK: '{mark}', NODE0_SETUP: '{tmp_path / 'node-0-setup-done'}'}}\n"
        f"setup: |\n{indent(SETUP.format(last=setup_last))}"
        f"run:\n  rdzv_port: {free_port()}\n{indent(chr(10).join(run_fields))}"
        "  shell: |\n" + "".join(f"    {line}\n" for line in RUN.format().splitlines())
    )
    return spec


def test_no_node_runs_until_every_node_has_finished_its_setup(tmp_path: Path) -> None:
    spec = two_node_job(tmp_path, 'touch "$MARK"')
    done = gpujob(tmp_path, "submit", str(spec), "--job-id", "barrier-ok")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    for rank in (0, 1):
        assert f"[node {rank}] setup done on {rank}" in done.stdout
        assert f"[node {rank}] run started on {rank}" in done.stdout
    assert "[node 0] [gpujob] setup: done on all 2 nodes; starting the run" in done.stdout
    assert "no " + str(tmp_path) not in done.stdout


def test_a_failed_setup_on_node_1_ends_the_job_naming_it_and_no_run_starts(
    tmp_path: Path,
) -> None:
    spec = two_node_job(tmp_path, 'echo "pip: no matching distribution"; exit 3')
    done = gpujob(tmp_path, "submit", str(spec), "--job-id", "barrier-fail")
    assert done.returncode != 0, done.stdout[-3000:] + done.stderr[-2000:]
    said = done.stdout + done.stderr
    assert "[node 1] pip: no matching distribution" in done.stdout
    assert "[gpujob] setup: failed on node 1 (exit 3): no node starts its run" in said, said[-3000:]
    assert "run started" not in said
    assert "no " + str(tmp_path) not in said
    shown = gpujob(tmp_path, "logs", "barrier-fail", "--node", "0")
    assert "[gpujob] setup: failed on node 1 (exit 3)" in shown.stdout, shown.stdout
    assert "run started" not in shown.stdout


def test_a_node_that_never_reports_its_setup_ends_the_job_on_both_sides(tmp_path: Path) -> None:
    """Detached, and its keeper polling too seldom to step in (it would cancel node 1 once
    node 0 failed): node 0 waits at most run.rdzv_timeout_s after its own setup, naming the
    node it did not hear; that node, finding node 0 gone (its connection refused), gives up
    too, naming node 0. Nothing hangs, even with no keeper; no run starts."""
    spec = two_node_job(tmp_path, 'sleep 8; touch "$MARK"', "rdzv_timeout_s: 5")
    started = gpujob(tmp_path, "submit", str(spec), "--job-id", "barrier-late", "--detach",
                     GPUJOB_KEEPER_POLL_S="600")  # fmt: skip
    assert started.returncode == 0, started.stderr
    keeper = int(re.search(r"keeper pid (\d+)", started.stderr)[1])
    try:
        check_both_gave_up(tmp_path)
    finally:
        os.kill(keeper, signal.SIGTERM)  # asleep for 600 s: ours to end


def check_both_gave_up(tmp_path: Path) -> None:
    job_dir = tmp_path / "state" / "jobs" / "barrier-late"
    deadline = time.monotonic() + 120
    for node in ("node-0", "node-1"):  # each node's own end, as its agent records it
        while (state := json.loads((job_dir / node / "status.json").read_text())["state"]) in (
            "starting", "running"
        ):  # fmt: skip
            assert time.monotonic() < deadline, f"{node} is still {state}"
            time.sleep(0.2)
        assert state == "failed", state
    node0, node1 = (gpujob(tmp_path, "logs", "barrier-late", "--node", n).stdout for n in "01")
    assert (
        "[gpujob] setup: node 0 did not hear node(s) 1 finish setup within 5 s of its own "
        "(their host may be gone; see their logs; run.rdzv_timeout_s sets the bound): no node "
        "starts its run"
    ) in node0, node0
    assert "[gpujob] setup: node 1: node 0 did not answer at " in node1, node1
    assert (
        " in 5 s (Connection refused): it has ended or cannot be reached; see node 0's log. "
        "No run starts"
    ) in node1
    assert "run started" not in node0 + node1
