"""What the agent of a node reads: job.json (what to run, how to care for checkpoints) and
the secrets, on the start's stdin (`start_input`), or, where the start is not gpujob's to
run (SLURM starts the nodes), in a 0600 file the agent deletes at the start."""

from __future__ import annotations

import hashlib
import json
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from launcher.agent.notify import Hook
from launcher.plan.docker import container_name
from launcher.plan.hook_files import hook_config
from launcher.plan.model import JobLimits, NodeLayout, SecretInput, WriteFile
from launcher.spec.job import JobSpec

if TYPE_CHECKING:
    from launcher.plan.build import CheckpointSync

SECRETS_JSON = "secrets.json"
NOTIFY_JSON = "notify.json"
STORAGE_JSON = "storage.json"
GRACE_S = 30


def logs_path(sync_path: str, job_id: str) -> str:
    """The job's node logs in S3, in its run's folder beside its checkpoints (`sync_path` is
    that folder): `gpujob logs` reads them there once the host is gone. (`storage tree` shows
    the folder as job logs, not a checkpoint.)"""
    return f"{sync_path}/logs/{job_id}"


def run_name(spec: JobSpec, job_id: str) -> str:
    return spec.checkpoints.run or job_id


def spec_hash(spec: JobSpec) -> str:
    """What the manifest records of the spec: enough to tell a different spec apart. Without
    `checkpoints.run`, so that naming the run of an earlier job of the same spec continues it."""
    data = spec.model_dump(mode="json")
    data["checkpoints"].pop("run", None)
    text = json.dumps(data, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_prefix(prefix: str, run: str) -> str:
    return f"{prefix.strip('/')}/{run}".lstrip("/")


def run_record(spec: JobSpec, job_id: str) -> dict[str, str]:
    """The agent's `checkpoints.run` (ckpt_watch.WatchConfig.run): what its manifest says."""
    return {"name": run_name(spec, job_id), "job_id": job_id, "spec_hash": spec_hash(spec)}


def checkpoint_care(
    spec: JobSpec,
    job_dir: str,
    sync: CheckpointSync | None,
    job_id: str,
    job_env: dict[str, str] | None = None,
    storage_file: bool = False,
) -> dict[str, object]:
    """What the agent's checkpoint watcher does on this host (agent/ckpt_watch.py). Hooks
    get `job_env`, the node's own variables (GPUJOB_CHECKPOINT_DIR, the spec's envs...), as
    the job's processes do. The remote's keys come on the start's stdin, or with
    `storage_file` in a 0600 file the agent deletes."""
    ckpt = spec.checkpoints
    run = run_record(spec, job_id)
    care: dict[str, object] = {
        "logs_to": logs_path(sync.rclone_path, job_id) if sync else None,
        "job_dir": job_dir,
        "dir": str(PurePosixPath(job_dir) / ckpt.dir),
        "keep_last": ckpt.keep_last,
        "sync_to": sync.rclone_path if sync else None,
        "sync_remote": f"{ckpt.sync_to.rstrip('/')}/{run['name']}" if ckpt.sync_to else None,
        "on_checkpoint": ckpt.on_checkpoint,
        "complete_when": ckpt.complete_when,
        "hook_env": job_env or {},
        "workdir": f"{job_dir}/workdir",
        "storage_env_file": STORAGE_JSON if storage_file and sync and sync.env else None,
    }
    if ckpt.outputs:  # only when asked: job.json stays as it was without
        care["outputs"] = str(PurePosixPath(f"{job_dir}/workdir") / ckpt.outputs)
    if sync:
        care["run"] = run  # whose checkpoints these are: the agent's manifest says so
    return care


def job_limits(spec: JobSpec, sync: CheckpointSync | None) -> JobLimits | None:
    """`max_duration` and `resources.idle_gpu` as the plan shows them and the agents keep them."""
    idle = spec.resources.idle_gpu
    if spec.max_duration is None and idle is None:
        return None
    return JobLimits(
        max_duration_s=spec.max_duration,
        grace_s=GRACE_S,
        idle_gpu=idle.model_dump() if idle else None,
        sync_to=spec.checkpoints.sync_to if sync else None,
    )


def secrets_file(path: str, secrets: dict[str, str]) -> WriteFile | None:
    """Mode 0600 from the first byte; the agent deletes it once it has read it, at the
    start. Only where gpujob does not run the start itself (SLURM)."""
    if not secrets:
        return None
    return WriteFile(path=path, content=json.dumps(secrets, sort_keys=True) + "\n",
                     mode=0o600, secret=True)  # fmt: skip


def start_input(
    secrets: dict[str, str], storage: dict[str, str], notify: dict[str, str] | None = None
) -> SecretInput | None:
    """The secrets, the S3 remote's keys and the webhooks' URLs on the start's stdin: the
    agent keeps them in memory (a container gets the secrets in `docker run`'s environment),
    so none is ever in a file on the host, and a client killed at any point leaves none
    behind."""
    if not secrets and not storage and not notify:
        return None
    given: dict[str, object] = {"secrets": secrets, "storage": storage}
    if notify:
        given["notify"] = notify
    content = json.dumps(given, sort_keys=True)
    names = (*sorted(secrets), *sorted(storage), *sorted(notify or {}))
    return SecretInput(content=content, names=names)


def notify_care(
    hooks: tuple[Hook, ...], node_dir: str, in_files: bool, price_per_hour: float | None
) -> tuple[dict[str, object] | None, dict[str, str], WriteFile | None]:
    """Node 0's `notify` for job.json (variable names and events, never a URL; the host's
    price where known, for the cost so far), the URLs for the start's stdin, or, where gpujob
    does not run the start (SLURM), their 0600 file the agent deletes once read."""
    if not hooks:
        return None, {}, None
    care: dict[str, object] = {"hooks": [{"env": h.env, "on": list(h.on)} for h in hooks],
                               "price_per_hour": price_per_hour}  # fmt: skip
    urls = {hook.env: hook.url for hook in hooks}
    if in_files:
        return care, {}, secrets_file(f"{node_dir}/{NOTIFY_JSON}", urls)
    return care, urls, None


def agent_config(
    spec: JobSpec,
    target: NodeLayout,
    job_id: str,
    rank: int,
    secrets: dict[str, str],
    argv: list[str],
    care: dict[str, object] | None = None,
    *,
    on_stdin: bool = False,
    start_window_s: int | None = None,
    notify: dict[str, object] | None = None,
) -> str:
    """`on_stdin`: the start brings the secrets on its stdin (`start_input`).
    `start_window_s`: the start comes within it of job.json's writing (a one-node job's, in
    the same batch); past it, a node with no status never started (agent/stopping.py)."""
    docker_runtime = target.runtime == "docker"
    config: dict[str, object] = {
        "job_id": job_id,
        "node_rank": rank,
        "nnodes": spec.nodes,
        "runtime": target.runtime,
        "argv": argv,
        "log": "job.log",
        "secrets_file": SECRETS_JSON if secrets and not on_stdin else None,
        "container": container_name(job_id, rank) if docker_runtime else None,
        "grace_s": GRACE_S,
    }
    if on_stdin:
        config["secrets_on_stdin"] = True
    if start_window_s is not None:
        config["start_window_s"] = start_window_s
    if care:
        config["checkpoints"] = care
    if notify:
        config["notify"] = notify
        config["notify_file"] = NOTIFY_JSON if not on_stdin else None
    if spec.hooks and rank == 0:
        config["lifecycle_hooks"] = hook_config(spec, rank)
    if spec.max_duration is not None:
        config["max_duration_s"] = spec.max_duration
    if spec.resources.idle_gpu is not None:
        config["idle_gpu"] = spec.resources.idle_gpu.model_dump()
    if spec.metrics is not None:
        config["metrics"] = spec.metrics.agent_config()
    return json.dumps(config, indent=2, sort_keys=True) + "\n"
