"""Submit-time checks that need the outside world, each refusing before anything starts:
the sync target resolves and answers (from the machine that will sync: here for local jobs,
the host for remote ones) and its run folder is the job's own (storage/runs.py), the disk
budget fits, and a LoRA merge does not land on a quantized base. Run from `jobs.submit`;
the plan stays pure."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher.plan.build import CheckpointSync
from launcher.spec.load import LoadedSpec
from launcher.storage import rclone_config
from launcher.storage.remotes import RemotePath, all_remotes, credentials, parse_remote_path

ENVIRONMENT_GUESS = 3 << 30
"""A pinned torch environment not yet created on the host: about 3 GiB (CPU torch 2.13 plus
transformers measured 1.9 GiB here; CUDA builds are larger)."""


def sync_target(loaded: LoadedSpec) -> RemotePath | None:
    spec = loaded.spec
    if spec.checkpoints.sync_to is None:
        return None
    remotes = all_remotes(spec.storage, loaded.where("storage"))
    where = f"{loaded.where('checkpoints', 'sync_to')}: checkpoints.sync_to"
    return parse_remote_path(spec.checkpoints.sync_to, remotes, where)


def checkpoint_sync(loaded: LoadedSpec, for_hosts: bool, job_id: str) -> CheckpointSync | None:
    """The plan's view of the sync target: the rclone path of the job's run folder under it
    (storage/runs.py) and the variables (keys resolved from the variables the remote names;
    nothing is contacted, so a dry run can call it)."""
    from launcher.storage.runs import run_name, run_prefix

    target = sync_target(loaded)
    if target is None:
        return None
    env = rclone_config.env_vars(target.remote, credentials(target.remote), for_hosts)
    run = run_prefix(target.prefix, run_name(loaded.spec, job_id))
    path = rclone_config.rclone_path(target.remote, run)
    return CheckpointSync(rclone_path=path, env=env)


def env_dir(target: Any, image: Any) -> str | None:
    """The job environment gpujob creates on first use of these pins (bare runtime only)."""
    if image is None or target.runtime != "bare":
        return None
    return f"{target.env_root}/{image.name}-{image.fingerprint}"


def preflight(
    loaded: LoadedSpec, target: Any, image: Any, report: Callable[[str], None], job_id: str
) -> CheckpointSync | None:
    """The checks that read only local files (so a dry run makes them too): merge guard, disk
    budget and /dev/shm of this machine for local jobs; then the sync target for the plan."""
    from launcher.storage.budget import disk_budget, shm_check
    from launcher.storage.merge_guard import check_merge

    check_merge(loaded)
    if target.on_this_machine:
        folder = env_dir(target, image)
        environment = ENVIRONMENT_GUESS if folder and not Path(folder).exists() else 0
        for budget in disk_budget(loaded, target.job_root, environment, folder):
            if loaded.spec.checkpoints.estimated_bytes is not None:
                report(budget.line())
        shm_check(loaded)
    return checkpoint_sync(loaded, not target.on_this_machine, job_id)


def probe_sync_target(
    loaded: LoadedSpec, otherwise: str, report: Callable[[str], None]
) -> RemotePath | None:
    """The sync target, its bucket listed and a probe written and deleted from this machine;
    refused in one line that ends with what did not happen (`otherwise`)."""
    from launcher.storage.s3 import RemoteUnreachable, check

    target = sync_target(loaded)
    if target is None:
        return None
    try:
        result = check(target)
    except RemoteUnreachable as err:
        raise RemoteUnreachable(
            f"checkpoints.sync_to {target}: {err.message}; {otherwise}", err.hint
        ) from None
    report(f"sync target {target}: bucket {result.bucket} reachable from here, write probe ok")
    return target
