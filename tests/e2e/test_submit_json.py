"""`submit --detach --json` for scripts: the started job's record as one JSON object on
stdout (a real local job), and nothing else there."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_local_jobs import gpujob, status_of, wait_for

pytestmark = pytest.mark.e2e


def test_a_detached_submit_prints_the_job_record_as_json(tmp_path: Path) -> None:
    state = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "hi.py").write_text("print('hi', flush=True)\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: scripted\nimage: host\nworkdir: work\n"
                    "run: {entrypoint: hi.py, launcher: none}\n")  # fmt: skip
    started = gpujob(state, "submit", str(spec), "--detach", "--json", "--job-id", "js-1")
    assert started.returncode == 0, started.stderr.decode()
    record = json.loads(started.stdout)
    assert (record["id"], record["name"], record["provider"]) == ("js-1", "scripted", "local")
    assert record["state"] == "running" and len(record["node_dirs"]) == 1
    wait_for(lambda: status_of(state, "js-1")["state"] == "succeeded")
