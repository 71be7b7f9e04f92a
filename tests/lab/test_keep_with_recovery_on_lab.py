"""`--keep-on-failure` with `recovery:`: a failure the controller does not restart (a
nonzero exit, `node_failure` not listed) keeps the host up for the window, armed with a
hard end, as `submit` keeps its own; `gpujob down JOB` ends it. The Lambda fake with a real
lab host behind it, the lab's S3 for the checkpoints that recovery needs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_autostop_on_lab as autostop
import test_keep_on_failure_on_lab as keep
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


@pytest.fixture
def env(with_hosts_api: dict[str, str], tmp_path: Path) -> Iterator[dict[str, str]]:
    """The keep test's shell, plus the lab's S3 as remote `lab` and a quick controller."""
    from infra.lab import s3

    bucket = s3.create_bucket()
    config = tmp_path / "config"
    config.mkdir()
    (config / "config.yaml").write_text(json.dumps({"remotes": {"lab": {
        "provider": "Other", "endpoint": s3.endpoint(), "bucket": bucket,
        "host_endpoint": s3.endpoint(for_hosts=True),
        "access_key_env": "GJ_LAB_KEY", "secret_key_env": "GJ_LAB_SECRET"}}}))  # fmt: skip
    made = {**with_hosts_api, "GPUJOB_CONFIG_DIR": str(config), "GJ_LAB_KEY": s3.ACCESS_KEY,
            "GJ_LAB_SECRET": s3.SECRET_KEY, "GPUJOB_RECOVER_FOLLOW_PATIENCE_S": "3",
            "GPUJOB_RECOVER_RETRY_S": "0.5"}  # fmt: skip
    yield made
    keep.run(made, "down", "--all")


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
