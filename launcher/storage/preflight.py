"""Submit-time checks that need the outside world, each refusing before anything starts:
the sync target resolves and answers (boto3 probe), the disk budget fits, and a LoRA merge
does not land on a quantized base. Run from `jobs.submit`; the plan stays pure."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from launcher.plan.build import CheckpointSync
from launcher.storage import rclone_config
from launcher.storage.remotes import RemotePath, all_remotes, credentials, parse_remote_path

ENVIRONMENT_GUESS = 3 << 30
"""A pinned torch environment not yet created on the host: about 3 GiB (CPU torch 2.13 plus
transformers measured 1.9 GiB here; CUDA builds are larger)."""


def sync_target(loaded: Any) -> RemotePath | None:
    spec = loaded.spec
    if spec.checkpoints.sync_to is None:
        return None
    remotes = all_remotes(spec.storage, loaded.where("storage"))
    where = f"{loaded.where('checkpoints', 'sync_to')}: checkpoints.sync_to"
    return parse_remote_path(spec.checkpoints.sync_to, remotes, where)


def checkpoint_sync(loaded: Any) -> CheckpointSync | None:
    """The plan's view of the sync target: rclone path and variables (keys resolved from the
    variables the remote names; nothing is contacted, so a dry run can call it)."""
    target = sync_target(loaded)
    if target is None:
        return None
    env = rclone_config.env_vars(target.remote, credentials(target.remote))
    return CheckpointSync(
        rclone_path=rclone_config.rclone_path(target.remote, target.prefix), env=env
    )


def preflight(
    loaded: Any, target: Any, image: Any, report: Callable[[str], None]
) -> CheckpointSync | None:
    """The checks that read only local files (so a dry run makes them too): merge guard, disk
    budget, /dev/shm; then the sync target resolved for the plan."""
    from launcher.storage.budget import disk_budget, shm_check
    from launcher.storage.merge_guard import check_merge

    check_merge(loaded)
    environment = 0
    if image is not None and target.runtime == "bare":
        env_dir = Path(target.env_root) / f"{image.name}-{image.fingerprint}"
        environment = 0 if env_dir.exists() else ENVIRONMENT_GUESS
    budget = disk_budget(loaded, target.job_root, environment)
    if loaded.spec.checkpoints.estimated_bytes is not None:
        report(budget.line())
    shm_check(loaded)
    return checkpoint_sync(loaded)


def check_before_start(loaded: Any, report: Callable[[str], None]) -> None:
    """The S3 probe: refused here, before any file reaches a host, with the remote named."""
    from launcher.storage.s3 import RemoteUnreachable, check

    target = sync_target(loaded)
    if target is None:
        return
    try:
        result = check(target)
    except RemoteUnreachable as err:
        raise RemoteUnreachable(
            f"checkpoints.sync_to {target}: {err.message}; the job was not started", err.hint
        ) from None
    report(f"sync target {target}: bucket {result.bucket} reachable, write probe ok")
    note = rclone_config.ca_bundle(target.remote)
    if note:
        report(f"rclone gets the CA bundle {note} as RCLONE_CA_CERT (AWS_CA_BUNDLE unset for it)")
