"""Recovery with `resources.autostop`: the hosts' watchers and the recovery controller hand
the hosts over between them. A 2-node job on the Lambda fake (real lab hosts, each with its
watcher calling the fake) loses node 1; node 0's host is kept, idle while its job is stopped
and the replacement boots, for longer than its window: held by the recovery, it is not
ended by its watcher, and the replacement gets the same window.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import test_autostop_on_lab as autostop
import test_keep_with_recovery_on_lab as kept_for_a_look
import test_recovery as recovery
from labtools import wait_until

from infra.fakes import RunningFake

pytestmark = pytest.mark.lab
# The keep-with-recovery tests' shell: the recovery tests' (the lab's S3 as remote `lab`, a
# quick controller) with where the hosts reach each fake (the watchers call it).
fixtures = ("backend", "clouds", "lab_env", "with_hosts_api", "bucket", "recovery_env", "env")
globals().update({name: getattr(kept_for_a_look, name) for name in fixtures})
WINDOW = "idle_minutes: 0.1"
"""6 s: shorter than the kept host's idle gap in any recovery (the replacement's rent and
bootstrap, 10 s and more), and longer than the controller's read of the job's end on a loaded
machine: with 3 s, both hosts (two workers of two test runs on 2 cores) had ended themselves,
idle after the job's last step, before the controller read that end."""


def test_a_kept_host_is_not_ended_by_its_autostop_while_the_lost_node_is_replaced(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any, bucket: str,
    tmp_path: Path,
) -> None:  # fmt: skip
    job_id = "rec-2n-autostop"
    fake = clouds["lambda"]
    spec = Path(recovery.job_spec(tmp_path, nodes=2))
    spec.write_text(spec.read_text().replace("resources: {cpus: 2, disk_gb: 1}",
                                             f"resources: {{cpus: 2, disk_gb: 1, autostop: "
                                             f"{{{WINDOW}}}}}"))  # fmt: skip
    submit = recovery.Command(env, "submit", str(spec), "--up", "a100", "--allow-cpu",
                              "--autostop-key-on-host", "--job-id", job_id)  # fmt: skip
    submit.wait_for(rf"step 13/{recovery.STEPS}".encode())
    recovery.pause_job(job_id)
    wait_until(
        lambda: recovery.synced(bucket, job_id, "checkpoint-10"), "checkpoint-10 in S3", every=0.5
    )
    before = [json.loads(r) for r in recovery.job_row_hosts(env, job_id)]
    kept = before[0]["instance"].split(":", 1)[1]
    assert autostop.watcher(backend, kept).get("idle_s") == 6, autostop.watcher(backend, kept)
    launched = len(recovery.launches(fake))
    recovery.lose(fake, "lambda", "terminate", before[1]["instance"].split(":", 1)[1])
    submit.wait_for(rb"resumed from checkpoint-")
    after = [json.loads(r) for r in recovery.job_row_hosts(env, job_id)]
    new = after[1]["instance"].split(":", 1)[1]
    assert autostop.watcher(backend, new).get("idle_s") == 6, autostop.watcher(backend, new)

    assert submit.finish() == 0, submit.text() + recovery.controller_log(env, job_id)
    log = recovery.controller_log(env, job_id)
    assert "renting every node again" not in log, log  # node 0's host was there to restart on
    assert len(recovery.launches(fake)) == launched + 1, log
    assert after[0]["instance"] == before[0]["instance"], log
    assert new != before[1]["instance"].split(":", 1)[1]
    recovery.check_resumed(bytes(submit.out), recovery.STEPS, recovery.resumed_step(submit))
