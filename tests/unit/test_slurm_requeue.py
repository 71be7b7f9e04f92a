"""A SLURM job's `recovery:`, pure: `--requeue`, the script's requeue section run by bash
with fake `scontrol`/`srun` over two attempts and a third past max_restarts, the attempt's
resume choice, and `status`'s reading of an agent's end that a requeue superseded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from planning import spec_of, written

from launcher.agent import AGENT_SOURCE, INIT_LOCK_SOURCE
from launcher.plan.build import Sources
from launcher.plan.recovery import Policy
from launcher.plan.slurm import SlurmCluster, build_slurm_plan
from launcher.remote.base import Result
from launcher.targets.slurm.cluster import SlurmJobView, SlurmNode, node_status
from launcher.targets.slurm.requeue import parse_requeue

AGENT_DIR = Path(AGENT_SOURCE).parent
sys.path.append(str(AGENT_DIR))  # requeue.py imports ckpt_store as its sibling, as on a host

import requeue  # noqa: E402

SHELLCHECK = Path(sys.executable).with_name("shellcheck")
CLUSTER = SlurmCluster(name="hpc", login="hpc", shared="/scratch/me", account="proj",
                       partition="gpu", where="hosts.yaml: hosts[0] (hpc)")  # fmt: skip
SOURCES = Sources(workdir="/src/work", agent=str(AGENT_SOURCE), init_lock=str(INIT_LOCK_SOURCE))
SECRET = "s3cr3t-value"


def plan(max_restarts: int = 2, on: tuple[str, ...] = ("host_lost", "preempted")):
    spec = spec_of(nodes=2, recovery={"max_restarts": max_restarts},
                   checkpoints={"dir": "checkpoints"})  # fmt: skip
    return build_slurm_plan(spec, CLUSTER, "t-1", {"TOKEN": SECRET}, None, SOURCES,
                            python="/usr/bin/python3",
                            recovery=Policy(max_restarts=max_restarts, on=on))  # fmt: skip


def test_a_job_with_recovery_is_queued_requeueable_with_the_module_beside_it() -> None:
    planned = plan()
    assert "--requeue" in planned.options and "--no-requeue" not in planned.options
    shipped = [getattr(s, "path", "") for s in planned.plan.nodes[0].steps]
    assert f"{planned.job_dir}/requeue.py" in shipped
    assert "restarts=${SLURM_RESTART_COUNT:-0}" in planned.script
    for script in (planned.script, plan(on=("node_failure",)).script):
        done = subprocess.run([str(SHELLCHECK), "--shell=bash", "-"], input=script,
                              capture_output=True, text=True, timeout=60)  # fmt: skip
        assert done.returncode == 0, done.stdout


FAKE_SRUN = """#!/bin/bash
# each node's agent, in short: what it was given, then the secrets deleted as at a start
job=$JOB
for rank in 0 1; do
  node=$job/node-$rank
  { echo "resume=${GPUJOB_RESUME_FROM:-none}"
    echo "secrets=$(cat "$node/secrets.json" 2>/dev/null || echo gone)"
    grep -o 'GPUJOB_HEAD_IP=[^ ]*' "$node/run.sh"; } >> "$node/given.txt"
  rm -f "$node/secrets.json"
  if [ "$END_STATE" = cancelled ]; then touch "$node/cancel-requested"; fi
  if [ -e "$node/cancel-requested" ]; then END_STATE=cancelled END_CODE=143; fi
  printf '{"state": "%s", "exit_code": %s, "slurm_restart": %s}\\n' \\
    "$END_STATE" "$END_CODE" "${SLURM_RESTART_COUNT:-0}" > "$node/status.json"
done
if [ "$END_STATE" = cancelled ]; then kill -TERM "$PPID"; sleep 0.2; fi  # SLURM's TERM
exit "$END_CODE"
"""


def _attempt(tmp_path: Path, script: str, root: Path, restarts: int | None, *, address: str,
             end: tuple[str, int]) -> subprocess.CompletedProcess:  # fmt: skip
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scontrol").write_text(
        '#!/bin/sh\ncase "$1 $2" in\n"show hostnames") printf "n1\\nn2\\n";;\n'
        f'"show node") echo "NodeName=$3 NodeAddr={address}.$3";;\n'
        '"show config") echo "KillWait = 5 sec";;\n'
        '"requeue 9") echo asked >> "$JOB/requeue-asked";;\nesac\n'
    )
    (bin_dir / "srun").write_text(FAKE_SRUN)
    for tool in ("scontrol", "srun"):
        (bin_dir / tool).chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", SLURM_JOB_ID="9",
               SLURM_JOB_NODELIST="n[1-2]", JOB=str(root), END_STATE=end[0],
               END_CODE=str(end[1]))  # fmt: skip
    env.pop("GPUJOB_RESUME_FROM", None)
    if restarts is not None:
        env["SLURM_RESTART_COUNT"] = str(restarts)
    return subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True,
                          timeout=30)  # fmt: skip


def _job_folder(tmp_path: Path, planned) -> Path:
    root = tmp_path / Path(planned.job_dir).relative_to("/")
    for node in planned.plan.nodes:
        folder = tmp_path / Path(node.node_dir).relative_to("/")
        folder.mkdir(parents=True)
        for name in ("run.sh", "job.json", "secrets.json"):
            step = written(node, name)
            (folder / name).write_text(step.content)
            (folder / name).chmod(step.mode)
    (root / "node_ips").write_text(written(planned.plan.nodes[0], "node_ips").content)
    for module in ("requeue.py", "ckpt_store.py"):
        shutil.copy(AGENT_DIR / module, root / module)
    return root


def _checkpoint(root: Path, step: int, complete: bool) -> None:
    folder = root / "checkpoints" / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "weights.bin").write_text("w")
    if complete:
        (folder / ".gpujob-complete").write_text(json.dumps({"step": step}))


def test_a_requeued_script_starts_from_the_plan_with_its_secrets_and_newest_checkpoint(
    tmp_path: Path,
) -> None:
    planned = plan(max_restarts=2)
    root = _job_folder(tmp_path, planned)
    script = planned.script.replace(planned.job_dir, str(root))
    # attempt 1: SLURM's TERM of a requeue ends it (the agents record `cancelled`)
    first = _attempt(tmp_path, script, root, None, address="10.1.0", end=("cancelled", 143))
    assert first.returncode == 143, first.stderr
    kept = root / "requeue"
    assert oct(kept.stat().st_mode & 0o777) == "0o700"
    assert oct((kept / "node-1" / "secrets.json").stat().st_mode & 0o777) == "0o600"
    _checkpoint(root, 2, complete=True)
    _checkpoint(root, 4, complete=False)  # the save the requeue cut short
    # attempt 2, on other nodes: the plan's files again, its own addresses, the secrets back
    second = _attempt(tmp_path, script, root, 1, address="10.2.0", end=("succeeded", 0))
    assert second.returncode == 0, second.stderr
    given = (root / "node-1" / "given.txt").read_text().splitlines()
    assert given[0] == "resume=none"
    assert given[3] == f"resume={root}/checkpoints/checkpoint-2"
    assert SECRET in given[4], "the secrets are there again for the second start"
    assert given[5] == "GPUJOB_HEAD_IP=10.2.0.n1"
    assert (root / "node_ips").read_text() == "10.2.0.n1\n10.2.0.n2\n"
    assert json.loads((root / "node-0" / "attempt-1" / "status.json").read_text())[
        "state"] == "cancelled"  # fmt: skip
    log = (root / "node-0" / "job.log").read_text()
    assert "[gpujob] requeued by SLURM (attempt 2): resuming from checkpoint-2\n" in log
    assert "requeued by SLURM (attempt 2): resuming from checkpoint-2" in second.stderr
    # the job's own end: no copy of a secret is left
    assert not kept.exists()
    assert not list(root.rglob("secrets.json"))
    assert SECRET not in second.stdout + second.stderr


def test_a_requeue_past_max_restarts_ends_the_job_failed_and_says_why(tmp_path: Path) -> None:
    planned = plan(max_restarts=1)
    root = _job_folder(tmp_path, planned)
    script = planned.script.replace(planned.job_dir, str(root))
    _attempt(tmp_path, script, root, None, address="10.1.0", end=("cancelled", 143))
    _attempt(tmp_path, script, root, 1, address="10.1.0", end=("cancelled", 143))
    third = _attempt(tmp_path, script, root, 2, address="10.1.0", end=("succeeded", 0))
    assert third.returncode == 1
    said = "requeued by SLURM (attempt 3) but recovery.max_restarts (1) is used up"
    for rank in (0, 1):
        status = json.loads((root / f"node-{rank}" / "status.json").read_text())
        assert status["state"] == "failed" and said in status["reason"]
    assert said in (root / "node-0" / "job.log").read_text()
    assert not (root / "requeue").exists()
    assert (root / "node-0" / "given.txt").read_text().count("resume=") == 2  # no third start


@pytest.mark.parametrize(("on", "requeued"), [(("host_lost",), False),
                                              (("host_lost", "node_failure"), True)])  # fmt: skip
def test_the_jobs_own_failure_is_requeued_only_with_node_failure(
    tmp_path: Path, on: tuple[str, ...], requeued: bool
) -> None:
    planned = plan(max_restarts=1, on=on)
    root = _job_folder(tmp_path, planned)
    script = planned.script.replace(planned.job_dir, str(root))
    failed = _attempt(tmp_path, script, root, None, address="10.1.0", end=("failed", 7))
    assert failed.returncode == 7
    assert (root / "requeue-asked").exists() == requeued
    assert (root / "requeue").exists() == requeued  # kept for the next attempt, else gone
    if requeued:  # the last restart's failure is the job's end
        last = _attempt(tmp_path, script, root, 1, address="10.1.0", end=("failed", 7))
        assert last.returncode == 7
        assert (root / "requeue-asked").read_text() == "asked\n"
        assert not (root / "requeue").exists()


@pytest.mark.parametrize(
    ("checkpoints", "chosen"),
    [
        ([], None),
        ([(2, True)], "checkpoint-2"),
        ([(2, True), (10, True), (4, True)], "checkpoint-10"),
        ([(2, True), (4, False)], "checkpoint-2"),
        ([(4, False)], None),
    ],
)
def test_the_attempts_resume_choice(tmp_path: Path, checkpoints, chosen) -> None:
    for step, complete in checkpoints:
        _checkpoint(tmp_path, step, complete)
    found = requeue.resume_choice(tmp_path / "checkpoints")
    assert (found.name if found else None) == chosen
    line = requeue.requeue_line(3, found)
    assert line.startswith("requeued by SLURM (attempt 3): ")
    assert (f"resuming from {chosen}" if chosen else "from the start") in line


class _View(SlurmJobView):
    def __init__(self, state: str, restarts: int = 0, requeue: bool = True) -> None:
        super().__init__(login=None, job_id="9", state=state, restarts=restarts,  # type: ignore[arg-type]
                         requeue=requeue)  # fmt: skip


@pytest.mark.parametrize(
    ("agent", "view", "state"),
    [
        # the TERM of a requeue, before and after SLURM counted it: not the job's end
        ({"state": "cancelled", "exit_code": 143}, _View("RUNNING"), "starting"),
        ({"state": "cancelled", "exit_code": 143}, _View("PENDING", 1), "pending"),
        ({"state": "cancelled", "slurm_restart": 0}, _View("RUNNING", 1), "starting"),
        ({"state": "failed", "exit_code": 1}, _View("REQUEUED", 1), "pending"),
        ({"state": "failed", "exit_code": 7}, _View("COMPLETING"), "starting"),
        ({"state": "failed", "exit_code": 7}, _View("FAILED"), "failed"),
        # the job's own ends
        ({"state": "cancelled", "exit_code": 143}, _View("CANCELLED", 1), "cancelled"),
        ({"state": "succeeded", "exit_code": 0, "slurm_restart": 1}, _View("COMPLETED", 1),
         "succeeded"),
        ({"state": "cancelled", "exit_code": 143}, _View("RUNNING", requeue=False), "cancelled"),
    ],
)  # fmt: skip
def test_an_end_a_requeue_superseded_is_not_the_jobs(agent, view, state) -> None:
    assert node_status(agent, view)["state"] == state


def test_restarts_from_scontrol() -> None:
    line = "JobId=9 JobState=PENDING Reason=BeginTime Requeue=1 Restarts=2 BatchFlag=1"
    assert parse_requeue(line) == (2, True)
    assert parse_requeue("sacct|9|COMPLETED|0:0|n1") == (0, False)


def test_cancel_removes_a_requeued_jobs_kept_secrets(tmp_path: Path) -> None:
    """`gpujob cancel`'s clean-up on the login host (SECRETS_RM) removes the copies a
    requeueable job keeps for its next attempt: a cancel is the job's end for good."""
    from launcher.targets.slurm.cancel import SECRETS_RM

    planned = plan()
    root = _job_folder(tmp_path, planned)
    requeue.keep(root, 2)
    assert SECRET in (root / "requeue" / "node-0" / "secrets.json").read_text()
    subprocess.run(["sh", "-c", SECRETS_RM, "sh", str(root)], check=True)
    assert not (root / "requeue").exists()
    assert not list(root.rglob("secrets.json"))


class _Login:
    """The login host as a node's stream sees it: `read_log` takes as long as the agent's
    long poll, during which another node's stream refreshes the shared view."""

    host = "login"

    def __init__(self, view: SlurmJobView) -> None:
        self.view, self.squeue = view, "JobState=RUNNING Reason=None ExitCode=0:0 NodeList=n[0-1]"

    def run(self, argv: list[str], **_: object) -> Result:
        return Result(0, self.squeue, "")

    def read_log(self, node_dir: str, offset: int, wait_s: float, sink: object) -> tuple:
        status = {"state": "running"}  # taken now, before node 1 recorded its end
        self.squeue = "JobState=FAILED Reason=NonZeroExitCode ExitCode=7:0 NodeList=n[0-1]"
        self.view.asked_at = -1e9
        self.view.refresh()  # node 0's stream, meanwhile: SLURM has ended the job since
        return b"", status


def test_a_nodes_status_is_never_laid_over_a_newer_slurm_view() -> None:
    """Node 1's status was read before its agent recorded `failed`; the job ended while the
    read waited, and another stream's refresh said so. Taken together they would read as
    SLURM's failure (no exit code of the node's own, not the node that failed first); the
    node is read again instead, and its own end is seen."""
    view = SlurmJobView(login=None, job_id="5")  # type: ignore[arg-type]
    login = _Login(view)
    view.login = login  # type: ignore[assignment]
    node = SlurmNode(login, view, rank=1)  # type: ignore[arg-type]
    _, status = node.read_log("/shared/.gpujob/jobs/j/node-1", 0, 2.0)
    assert status["state"] in ("running", "starting")
    assert view.state == "FAILED"
