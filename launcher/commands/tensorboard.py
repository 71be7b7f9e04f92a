"""`gpujob tb JOB [--logdir DIR] [--port LOCAL]`: TensorBoard beside a running job on its
head node (started once, in the job's environment, stopped when the job ends:
runtime/tensorboard.py), forwarded here like any port."""

from __future__ import annotations

import json

from launcher.errors import GpujobError, UsageError
from launcher.jobs.forwarding import Show, forward_job, node_of, refuse_unreachable
from launcher.jobs.records import job_and_target
from launcher.runtime.tensorboard import ENDED, NOT_INSTALLED, start_argv
from launcher.say import say
from launcher.state.db import StateDB
from launcher.state.served import ServedDB

DEFAULT_LOCAL = 6006


def tensorboard(reference: str, logdir: str | None, port: int | None, show: Show) -> int:
    from launcher.remote.forward import free_local_port

    job, target = job_and_target(StateDB(), reference)
    served = ServedDB().get(job.id)
    folder = logdir or (served.tensorboard_logdir if served else None)
    if folder is None:
        raise UsageError(f"job {job.id} names no TensorBoard folder",
                         "give --logdir DIR (relative to the job's workdir), or add "
                         "`tensorboard: {logdir: DIR}` to its spec")  # fmt: skip
    if job.terminal:
        raise _ended(job.id, job.state)
    refuse_unreachable(job, target)
    node = node_of(job, target, 0)
    try:
        result = node.connection.run(start_argv(node.agent_python, node.node_dir, folder))
    finally:
        node.connection.close()
    answer = _last_json(result.stdout)
    if result.exit_code == NOT_INSTALLED:
        raise GpujobError(f"tensorboard is not installed in job {job.id}'s environment",
                          "add `tensorboard` to its image's requirements (or `pip install "
                          "tensorboard` in its setup:) and submit it again")  # fmt: skip
    if result.exit_code == ENDED:
        raise _ended(job.id, str(answer.get("state", "ended")))
    if not result.ok or "port" not in answer:
        said = str(answer.get("failed") or result.stderr or result.stdout).strip()
        raise GpujobError(f"TensorBoard did not start on job {job.id}'s node 0: {said[-300:]}",
                          f"its log: {node.node_dir}/tensorboard.log on the host")  # fmt: skip
    started = "started" if answer.get("started") else "already running"
    serves = str(answer.get("logdir") or folder)  # the one running may serve another folder
    other = "" if serves == folder else f", not {folder}: one per job, until the job ends"
    say(f"TensorBoard {started} on job {job.id}'s node 0 over {serves} (port {answer['port']})"
        f"{other}")  # fmt: skip
    remote = int(str(answer["port"]))
    local = port if port is not None else free_local_port(DEFAULT_LOCAL)
    return forward_job(job, target, [(remote, local)], 0, show)


def _ended(job_id: str, state: str) -> GpujobError:
    return GpujobError(f"job {job_id} has ended ({state}): gpujob runs TensorBoard only beside "
                       "a running job, and stops it when the job ends",
                       "run tensorboard here on a copy of the event files")  # fmt: skip


def _last_json(stdout: str) -> dict[str, object]:
    try:
        found = json.loads(stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
