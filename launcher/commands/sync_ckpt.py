"""`gpujob sync-ckpt`: checkpoints pushed to S3 from where a job keeps them, or pulled
(`storage.sync` runs it); a job's side is reached through its target, whatever it is."""

from __future__ import annotations

from launcher.state.db import JobRecord
from launcher.storage.sync import JobSide, SyncRequest
from launcher.storage.sync import sync_ckpt as run_sync
from launcher.targets.base import target_for


def sync_ckpt(request: SyncRequest) -> int:
    return run_sync(request, _job_side)


def _job_side(job: JobRecord) -> JobSide:
    target = target_for(job)
    return JobSide(target.files_host(job), target.traits.agent_python,
                   remote_host=not target.traits.on_this_machine)  # fmt: skip
