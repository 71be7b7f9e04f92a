"""`recovery:` on the lab's SLURM cluster: the job is queued with `--requeue`, SLURM requeues
it mid-run (`scontrol requeue`, as it does on a node failure or a preemption), and the
batch script's next attempt resumes from the job's newest complete checkpoint.

What a user checks: every step ran once after the checkpoint it resumed from, the job ended
succeeded, `status` and `logs` say which attempt it was and where it resumed, the job's
secret reached both attempts and no copy of it is left afterwards.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from labtools import wait_until
from slurmlab import login_ssh
from test_slurm_jobs import (
    GPUJOB,
    cluster_files,
    env,
    gpujob,
    job_dir,
    no_job_processes,
    sacct,
    slurm_id,
    spec_file,
)

pytestmark = pytest.mark.lab
__all__ = ["cluster_files", "env"]  # the fixtures, used by name

STEPS = 12
COUNTER = f"""
start=0
if [ -n "${{GPUJOB_RESUME_FROM:-}}" ]; then
  start=${{GPUJOB_RESUME_FROM##*-}}
  echo "node $GPUJOB_NODE_RANK resumes after step $start"
fi
echo "node $GPUJOB_NODE_RANK token ${{TOKEN:+given}}"
for step in $(seq $((start + 1)) {STEPS}); do
  sleep 1
  if [ "$GPUJOB_NODE_RANK" = 0 ]; then
    echo "step $step"
    if [ $((step % 3)) = 0 ]; then
      folder=$GPUJOB_CHECKPOINT_DIR/checkpoint-$step
      mkdir -p "$folder.tmp" && echo "$step" > "$folder.tmp/weights" && mv "$folder.tmp" "$folder"
      echo '{{"step": '"$step"'}}' > "$folder/.gpujob-complete"
    fi
  fi
done
"""
SECRET = "requeue-secret-0451"


@pytest.mark.parametrize("lost", ["scontrol requeue", "node 1 down"])
def test_a_requeued_job_resumes_from_its_checkpoint_and_ends_succeeded(
    slurm_cluster, env: dict[str, str], tmp_path: Path, lost: str
) -> None:
    """`node 1 down`: the controller told node 1 is down (`scontrol update state=down`, as
    it decides when a node stops answering): SLURM ends the job NODE_FAIL and requeues it;
    it runs again once the node is back (the lab has two nodes, the job needs both)."""
    block = "".join(f"    {line}\n" for line in COUNTER.strip().splitlines())
    spec = spec_file(tmp_path, "name: requeued\nimage: host\nworkdir: work\nnodes: 2\n"
                               "recovery: {max_restarts: 2}\ncheckpoints: {dir: checkpoints}\n"
                               f"run:\n  shell: |\n{block}")  # fmt: skip
    env = dict(env, TOKEN=SECRET)
    done = gpujob(env, "submit", str(spec), "--on", "slurm:lab", "--secret", "TOKEN", "--detach")
    assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    folder = job_dir(slurm_cluster, job_id)
    assert "#SBATCH --requeue" in (folder / "job.sbatch").read_text()
    log0 = folder / "node-0" / "job.log"
    first = folder / "checkpoints" / "checkpoint-3" / ".gpujob-complete"
    # the user follows the log from before the requeue to the end
    follow = subprocess.Popen([GPUJOB, "logs", job_id, "-f"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        wait_until(first.exists, "checkpoint-3 complete", timeout=120)
        slurm_job = slurm_id(env, job_id)
        node = sorted(slurm_cluster.nodes)[1]
        asked = login_ssh(slurm_cluster, f"scontrol requeue {slurm_job}" if lost.startswith(
            "scontrol") else f"scontrol update nodename={node} state=down reason=lost")  # fmt: skip
        assert asked.returncode == 0, asked.stderr
        wait_until(lambda: "requeued 1 time(s): attempt 2" in _slurm_word(env, job_id),
                   "status saying attempt 2", timeout=120)  # fmt: skip
        if lost == "node 1 down":  # the lab's ReturnToService=2 brings back a node whose
            # slurmd answers by itself (then resume is "invalid"); else this does
            login_ssh(slurm_cluster, f"scontrol update nodename={node} state=resume")
        out, err = follow.communicate(timeout=240)
    finally:
        follow.kill()
        login_ssh(slurm_cluster, f"scontrol update nodename={sorted(slurm_cluster.nodes)[1]} "
                  "state=resume")  # fmt: skip
        login_ssh(slurm_cluster, f"scancel {slurm_id(env, job_id)}")  # leave the nodes idle
    log = log0.read_text()
    assert follow.returncode == 0, err + log[-2000:]
    assert "[node 0] [gpujob] requeued by SLURM (attempt 2): resuming from checkpoint-" in out
    resumed = re.search(r"\[gpujob\] requeued by SLURM \(attempt 2\): resuming from "
                        r"checkpoint-(\d+)\n", log)  # fmt: skip
    assert resumed, log
    at = int(resumed.group(1))
    assert at >= 3 and at % 3 == 0
    after = log[resumed.end() :]
    assert f"node 0 resumes after step {at}" in after
    # every step after the checkpoint ran once, in the attempt that resumed
    steps = [int(s) for s in re.findall(r"^step (\d+)$", after, re.M)]
    assert steps == list(range(at + 1, STEPS + 1)), after
    assert log.count("node 0 token given") == 2, "the secret reached both attempts"
    assert SECRET not in log
    row = next(r for r in json.loads(gpujob(env, "status", "--json").stdout)["jobs"]
               if r["id"] == job_id)  # fmt: skip
    assert row["state"] == "succeeded", row
    assert sacct(slurm_cluster, slurm_job) == ("COMPLETED", "0:0")
    assert (folder / "node-0" / "attempt-1" / "status.json").exists()
    wait_until(lambda: no_job_processes(slurm_cluster, job_id), "no process of either attempt",
               timeout=30, every=0.5)  # fmt: skip
    left = [p for p in folder.rglob("*") if p.name in ("secrets.json", "secrets.env")]
    assert not left and not (folder / "requeue").exists(), left


def _slurm_word(env: dict[str, str], job_id: str) -> str:
    """Node 0's SLURM column in `status --json` (its state, and the attempt once requeued)."""
    rows = json.loads(gpujob(env, "status", "--json").stdout)["jobs"]
    row = next(r for r in rows if r["id"] == job_id)
    return str(row["node_states"][0].get("slurm", ""))
