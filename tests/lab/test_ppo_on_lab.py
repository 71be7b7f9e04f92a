"""The issue's must-show runs, through the real CLI: `jobs/ppo.yaml --set profile=cpu` on a
host rented from the Lambda fake (`--up`: provision, bootstrap, run in a container) and on a
Vast-fake instance (the instance is the job image's container: bare runtime). Each ends with
exit 0 and checkpoints on the host; `gpujob down --all` gives the hosts back.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from labtools import gpujob, job_row

from infra.fakes import LAMBDA_API_KEY, VAST_API_KEY, RunningFake, serve_lambda, serve_vast

pytestmark = pytest.mark.lab
REPO = Path(__file__).resolve().parents[2]
PPO = str(REPO / "jobs" / "ppo.yaml")


@pytest.fixture
def clouds(lab: None, tmp_path: Path) -> Iterator[dict[str, RunningFake]]:
    from infra.fakes.lab_backend import LabBackend
    from infra.lab import job_image

    job_image.build(report=lambda line: print(f"lab: {line}"))
    backend = LabBackend(tmp_path / "records.json")
    lam, vast = serve_lambda(backend), serve_vast(backend)
    yield {"lambda": lam, "vast": vast}
    lam.stop()
    vast.stop()
    backend.close()


@pytest.fixture
def env(clouds: dict[str, RunningFake], tmp_path: Path) -> dict[str, str]:
    from infra.lab import registry, user_key

    return {
        **os.environ,
        "GPUJOB_STATE_DIR": str(tmp_path / "state"),
        "GPUJOB_HOSTS_FILE": str(tmp_path / "hosts.yaml"),
        "GPUJOB_SSH_KEY": str(user_key()),
        "GPUJOB_POLL_S": "0.5",
        "GPUJOB_LAMBDA_SSH_USER": "root",
        "LAMBDA_API_KEY": LAMBDA_API_KEY,
        "GPUJOB_LAMBDA_API_URL": clouds["lambda"].url,
        "VAST_API_KEY": VAST_API_KEY,
        "GPUJOB_VAST_API_URL": clouds["vast"].url,
        "GPUJOB_REGISTRY": registry.address(),
        "GPUJOB_IMAGE_REPO": "gpujob-lab/job",
    }


def checkpoint_state(env: dict[str, str], host: str, job_id: str) -> dict[str, Any]:
    """trainer_state.json of the job's last checkpoint, read on the host over SSH."""
    path = f".gpujob/jobs/{job_id}/checkpoints/checkpoint-8/trainer_state.json"
    done = gpujob(env, "ssh", host, "--", "cat", path)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize(("provider", "runtime"), [("lambda", "docker"), ("vast", "bare")])
def test_ppo_on_a_rented_host_runs_streams_and_checkpoints(
    env: dict[str, str], provider: str, runtime: str
) -> None:
    job_id = f"ppo-{provider}"
    try:
        done = gpujob(env, "submit", PPO, "--set", "profile=cpu", "--up", "a100", "--provider",
                      provider, "--allow-cpu", "--job-id", job_id, timeout=900)  # fmt: skip
        out, err = done.stdout.decode(), done.stderr.decode()
        assert done.returncode == 0, err[-4000:] + out[-2000:]
        assert "ppo step 8/8 score" in out and "final score" in out
        assert "rank 1/2: done" in out and "rank 0/2: done" in out
        row = job_row(env, job_id)
        assert (row["state"], row["exit_code"], row["runtime"]) == ("succeeded", 0, runtime)
        host = json.loads(gpujob(env, "status", "--json").stdout)["hosts"][0]["name"]
        assert checkpoint_state(env, host, job_id)["global_step"] == 8
    finally:
        assert gpujob(env, "down", "--all").returncode == 0
