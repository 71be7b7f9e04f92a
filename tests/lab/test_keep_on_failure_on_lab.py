"""`--keep-on-failure` through the real CLI on a host from the Lambda fake (a real lab host
behind it): a job that fails leaves its host up, its watcher armed with the window and a
hard end; `gpujob ssh JOB -- CMD` runs in the job's folder there; `gpujob down JOB` ends
it. Without the flag the host is left as before: its rent-time watcher, no hard end, no
`kept/` folder.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import test_autostop_on_lab as autostop
import test_up_hosts as up_hosts
from labtools import GPUJOB, wait_until

from infra.fakes import RunningFake

pytestmark = pytest.mark.lab
backend, clouds, lab_env, env = up_hosts.backend, up_hosts.clouds, up_hosts.env, autostop.env


def failing_job(folder: Path) -> str:
    (folder / "work").mkdir()
    (folder / "work" / "note.txt").write_text("shipped\n")
    spec = folder / "job.yaml"
    spec.write_text("name: keep\nimage: host\nworkdir: work\n"
                    "run: |\n  echo 'the clue: rank 0 saw a NaN'\n  exit 3\n")  # fmt: skip
    return str(spec)


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True, timeout=600)


def config(backend: Any, instance_id: str) -> dict[str, Any]:
    path = autostop.host_root(backend, instance_id) / ".gpujob" / "autostop" / "config.json"
    return json.loads(path.read_text())


def the_instance(fake: RunningFake) -> str:
    (found,) = up_hosts.live(fake, "lambda")
    return str(found["id"])


def test_a_failed_job_kept_stays_up_bounded_and_ssh_and_down_reach_it(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any, tmp_path: Path
) -> None:
    fake = clouds["lambda"]
    before = time.time()
    done = run(env, "submit", failing_job(tmp_path), "--up", "a100", "--allow-cpu", "--runtime",
               "bare", "--autostop-key-on-host", "--keep-on-failure", "30m", "--job-id",
               "keep-1")  # fmt: skip
    said = done.stdout + done.stderr
    assert done.returncode == 3, said
    assert "job keep-1 failed: its hosts stay up 30m for a look" in said, said
    assert "gpujob ssh keep-1" in said and "gpujob down keep-1" in said, said
    instance_id = the_instance(fake)
    assert autostop.alive(fake, "lambda", instance_id)
    armed = config(backend, instance_id)
    assert armed["idle_s"] == 1800 and before + 1800 <= armed["until"] <= time.time() + 1800
    state = autostop.watcher(backend, instance_id)
    assert state["idle_s"] == 1800 and state["deadline"] <= armed["until"], state

    readme = run(env, "ssh", "keep-1", "--", "cat", "kept/README.txt")
    assert readme.returncode == 0, readme.stderr
    assert "failed (exit code 3)" in readme.stdout and "core files: none found" in readme.stdout
    log = run(env, "ssh", "keep-1", "--node", "0", "--", "cat", "job.log")
    assert "the clue: rank 0 saw a NaN" in log.stdout, log.stdout + log.stderr
    where = run(env, "ssh", "keep-1", "--", "pwd")
    assert where.stdout.strip().endswith("/keep-1/node-0"), where.stdout + where.stderr

    ended = run(env, "down", "keep-1")
    assert ended.returncode == 0 and "terminated" in ended.stdout, ended.stdout + ended.stderr
    assert autostop.ended(fake, "lambda", instance_id)
    wait_until(lambda: not backend.records, "the lab host of the instance goes")


def test_without_the_flag_a_failed_jobs_host_is_left_as_before(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any, tmp_path: Path
) -> None:
    fake = clouds["lambda"]
    done = run(env, "submit", failing_job(tmp_path), "--up", "a100", "--allow-cpu", "--runtime",
               "bare", "--job-id", "keep-2")  # fmt: skip
    assert done.returncode == 3, done.stdout + done.stderr
    assert "stay up" not in done.stderr and "for a look" not in done.stderr, done.stderr
    instance_id = the_instance(fake)
    root = autostop.host_root(backend, instance_id)
    assert not (root / ".gpujob" / "autostop" / "config.json").exists()  # no watcher, as before
    assert not list(root.glob(".gpujob/jobs/keep-2/node-0/kept"))
    assert "terminated" in run(env, "down", "keep-2").stdout
    wait_until(lambda: not backend.records, "the lab host of the instance goes")
