"""A job group's record and rules: which gpujob job runs each task, the group found by its
id, id prefix or name (`cancel GROUP`, `logs GROUP`), each job's group for `status`, and
SkyPilot's end rule, written once.

SkyPilot's rule (sky/jobs/controller.py `_run_job_group` and `_terminate_auxiliary_jobs`):
every task is primary unless the header lists `primary_tasks`; the group runs until every
primary task has ended, each on its own (a failed task does not stop the others); then the
auxiliary tasks still running are stopped, at once when a primary task failed, else after
their `termination_delay`. The group succeeded when every primary task did.

The record is one JSON file per group in the state dir, written atomically (0600): the jobs
themselves are ordinary jobs of the state db, each with its own id, log and keeper.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from launcher.paths import state_dir
from launcher.state.db import JobRecord, StateDB
from launcher.state.job_states import JobState, is_terminal


@dataclass(frozen=True)
class Member:
    task: str
    job_id: str
    primary: bool
    delay_s: float


@dataclass(frozen=True)
class GroupRecord:
    id: str
    name: str
    spec_path: str
    members: tuple[Member, ...]
    created_at: float

    def member(self, job_id: str) -> Member | None:
        return next((m for m in self.members if m.job_id == job_id), None)


def groups_dir() -> Path:
    return state_dir() / "groups"


def save_group(record: GroupRecord) -> None:
    from launcher.remote.local import atomic_write

    text = json.dumps(asdict(record), indent=2).encode()
    atomic_write(groups_dir() / f"{record.id}.json", text, 0o600)


def _read(path: Path) -> GroupRecord | None:
    try:
        data = json.loads(path.read_text())
        members = tuple(Member(**m) for m in data.pop("members"))
        return GroupRecord(members=members, **data)
    except (OSError, ValueError, TypeError, KeyError):
        return None


def all_groups() -> list[GroupRecord]:
    """Newest first."""
    found = [_read(p) for p in groups_dir().glob("*.json")] if groups_dir().is_dir() else []
    return sorted((g for g in found if g is not None), key=lambda g: -g.created_at)


def find_group(reference: str) -> GroupRecord | None:
    """By id, unique id prefix, or name (the newest group of that name), as jobs are."""
    groups = all_groups()
    for group in groups:
        if group.id == reference:
            return group
    prefixed = [g for g in groups if g.id.startswith(reference)]
    if len(prefixed) == 1:
        return prefixed[0]
    return next((g for g in groups if g.name == reference), None)


def group_column(groups: list[GroupRecord]) -> dict[str, str]:
    """`status`'s group column, by job id: `GROUP_ID/task`."""
    return {m.job_id: f"{g.id}/{m.task}" for g in groups for m in g.members}


@dataclass(frozen=True)
class Decision:
    """What the group's rule says now: the tasks to stop (and when), and the group's end."""

    stop: tuple[tuple[str, float], ...]
    """(job id, seconds to wait first)."""
    ended: bool
    exit_code: int | None


def decide(record: GroupRecord, jobs: dict[str, JobRecord | None]) -> Decision:
    """SkyPilot's end rule over the members' current records (pure)."""
    primaries = [m for m in record.members if m.primary]
    states = {m.job_id: (jobs.get(m.job_id).state if jobs.get(m.job_id) else None)  # type: ignore[union-attr]
              for m in record.members}  # fmt: skip
    if not all(is_terminal(states[m.job_id] or "") for m in primaries):
        return Decision((), False, None)
    failed = [m for m in primaries if states[m.job_id] != JobState.SUCCEEDED]
    stop = tuple((m.job_id, 0.0 if failed else m.delay_s) for m in record.members
                 if not m.primary and not is_terminal(states[m.job_id] or ""))  # fmt: skip
    if stop:
        return Decision(stop, False, None)
    if not failed:
        return Decision((), True, 0)
    first = jobs.get(failed[0].job_id)
    code = first.exit_code if first is not None and first.exit_code else 1
    return Decision((), True, code)


def member_jobs(db: StateDB, record: GroupRecord, *, refresh: bool) -> dict[str, JobRecord | None]:
    """Each member's record; `refresh`: asked of its nodes first (jobs/state.py)."""
    found: dict[str, JobRecord | None] = {}
    for member in record.members:
        job = db.job(member.job_id)
        if job is not None and refresh and not job.terminal:
            from launcher.jobs.state import refresh as ask

            ask(db, job)
            job = db.job(member.job_id)
        found[member.job_id] = job
    return found


def cancel_group(record: GroupRecord, grace_s: float, only: set[str] | None = None) -> None:
    """Every member still running stopped (or those in `only`), each through its target."""
    from launcher.jobs.cancel import cancel_job
    from launcher.say import say

    db = StateDB()
    for member in record.members:
        if only is not None and member.job_id not in only:
            continue
        job = db.job(member.job_id)
        if job is None or job.terminal:
            continue
        say(f"group {record.id}: stopping task {member.task} (job {member.job_id})")
        cancel_job(job, grace_s)


def new_group_id(name: str) -> str:
    import secrets

    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(2)}"
