"""`--keep-on-failure` with `recovery:`: a failure the controller does not restart (a
nonzero exit, `node_failure` not listed) keeps the host up for the window, armed with a
hard end, as `submit` keeps its own; `gpujob down JOB` ends it. The Lambda fake with a real
lab host behind it, the lab's S3 for the checkpoints that recovery needs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import test_autostop_on_lab as autostop
import test_keep_on_failure_on_lab as keep
import test_recovery as recovery
import test_up_hosts as up_hosts
from labtools import wait_until

from infra.fakes import RunningFake

pytestmark = pytest.mark.lab
backend, clouds, lab_env, with_hosts_api = (
    up_hosts.backend,
    up_hosts.clouds,
    up_hosts.env,
    autostop.env,
)
bucket, recovery_env = recovery.bucket, recovery.env


@pytest.fixture
def env(recovery_env: dict[str, str], with_hosts_api: dict[str, str]) -> dict[str, str]:
    """The recovery tests' shell (the lab's S3 as remote `lab`, a quick controller), with
    where the hosts reach each fake (a kept host's watcher calls it)."""
    return {**recovery_env, **{k: v for k, v in with_hosts_api.items() if "HOST_API" in k}}


def test_a_failure_recovery_does_not_restart_keeps_the_host_for_the_window(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any, tmp_path: Path
) -> None:
    spec = Path(keep.failing_job(tmp_path))
    spec.write_text(spec.read_text() + "checkpoints: {dir: checkpoints, sync_to: 'lab:runs/kr'}\n"
                    "recovery: {max_restarts: 1}\n")  # fmt: skip
    fake = clouds["lambda"]
    before = time.time()
    done = keep.run(env, "submit", str(spec), "--up", "a100", "--allow-cpu", "--runtime",
                    "bare", "--autostop-key-on-host", "--keep-on-failure", "30m", "--job-id",
                    "kr-1")  # fmt: skip
    said = done.stdout + done.stderr
    assert "recovery stopped: node_failure on node 0" in said, said
    assert "the hosts of job kr-1 are kept for a look" in said, said
    instance_id = keep.the_instance(fake)
    assert autostop.alive(fake, "lambda", instance_id), said
    armed = keep.config(backend, instance_id)
    assert armed["idle_s"] == 1800 and before + 1800 <= armed["until"] <= time.time() + 1800
    readme = keep.run(env, "ssh", "kr-1", "--", "cat", "kept/README.txt")
    assert "failed (exit code 3)" in readme.stdout, readme.stdout + readme.stderr

    ended = keep.run(env, "down", "kr-1")
    assert ended.returncode == 0 and "terminated" in ended.stdout, ended.stdout + ended.stderr
    assert autostop.ended(fake, "lambda", instance_id)
    wait_until(lambda: not backend.records, "the lab host of the instance goes")
