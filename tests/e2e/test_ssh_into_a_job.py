"""`gpujob ssh JOB [--node K] [-- CMD]` for a job of this machine (a real local job): the
command runs in the node's folder, its exit code is the command's; a node the job does not
have, or a job that does not exist, is one line and exit 2. The rented-host case is the
lab's (tests/lab/test_keep_on_failure_on_lab.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_local_jobs import gpujob

pytestmark = pytest.mark.e2e


def test_ssh_runs_in_a_local_jobs_folder_and_refuses_a_node_it_lacks(tmp_path: Path) -> None:
    state = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    (tmp_path / "work").mkdir()
    spec = tmp_path / "job.yaml"
    spec.write_text("name: failing\nimage: host\nworkdir: work\n"
                    "run: |\n  echo 'the clue'\n  exit 3\n")  # fmt: skip
    done = gpujob(state, "submit", str(spec), "--job-id", "sj-1")
    assert done.returncode == 3, done.stderr.decode()

    log = gpujob(state, "ssh", "sj-1", "--", "cat", "job.log")
    assert log.returncode == 0 and b"the clue" in log.stdout, log.stderr.decode()
    where = gpujob(state, "ssh", "sj-1", "--node", "0", "--", "pwd")
    assert where.stdout.decode().strip().endswith("/sj-1/node-0"), where.stdout
    assert gpujob(state, "ssh", "sj-1", "--", "exit 7").returncode == 7

    for args, said in ((("sj-1", "--node", "2"), "--node 2: job sj-1 has 1 node(s), 0 to 0"),
                       (("nosuch", "--node", "0"), "no job `nosuch`")):  # fmt: skip
        refused = gpujob(state, "ssh", *args, "--", "true")
        err = refused.stderr.decode()
        assert refused.returncode == 2 and said in err, err
        assert len(err.strip().splitlines()) == 1, err
