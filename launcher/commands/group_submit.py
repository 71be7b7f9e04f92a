"""`gpujob submit GROUP.yaml`: a SkyPilot job group (spec/job_group.py), each task one gpujob
job with its own id, started one after the other before anything is followed, recorded as
one group (`status` shows it, `cancel GROUP` stops every task, `logs GROUP` prefixes each
line by its task), with the group's watcher applying SkyPilot's end rule.

Every task is loaded and checked before the first starts (every error of the file at once,
each at its line); a task that fails to start stops those already started: a group starts
whole or not at all. Where: this machine, or `--on` hosts given in task order (node 0 of the
first task first), as many as the tasks have nodes together. Renting (`--up`) for a group is
not done yet.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from launcher.errors import GpujobError, UsageError
from launcher.jobs.group import GroupRecord, Member, cancel_group, new_group_id, save_group
from launcher.say import say
from launcher.spec.job_group import JobGroup, by_line, group_env, read_group
from launcher.targets.base import LaunchRequest, target_for_request

LOOPBACK = "127.0.0.1"
NOT_YET = (
    ("up", "--up", "run it on this machine or give --on hosts, one per node in task order"),
    ("job_id", "--job-id", "leave --job-id out: each task gets its own job id"),
    ("resume_path", "--resume-from", "resume in the task's own `run:` instead"),
    ("ladder", "--ladder", "ladder one task: copy its document to a file of its own"),
)
"""submit's options a group does not take yet: (request field, flag, what to do)."""


def submit_group(request: LaunchRequest, *, ladder: bool = False) -> int:
    for given, flag, hint in NOT_YET:
        if getattr(request, given, None) or (given == "ladder" and ladder):
            raise UsageError(f"{flag} is not supported for a job group yet", hint)
    group = read_group_checked(request)
    hosts = _hosts_by_task(group, request.on)
    env = group_env(group, {task: placed[0] or LOOPBACK for task, placed in hosts.items()})
    env_sets = tuple(f"envs.{name}={json.dumps(value)}" for name, value in env.items())
    requests = [replace(request, sets=(*request.sets, *env_sets), group_task=task.name,
                        on=hosts[task.name][1], detach=True)
                for task in group.tasks]  # fmt: skip
    if request.dry_run:
        return _dry_run(group, requests)
    record = _start_all(group, requests)
    from launcher.supervise.group_watch import follow_group, start_watcher
    from launcher.supervise.group_watch import log_path as watch_log

    if any(not m.primary for m in record.members):  # else each task simply runs to its end
        pid = start_watcher(record)
        say(f"group watcher pid {pid}: once the primary tasks end, it stops the others (its "
            f"log: {watch_log(record.id)})")  # fmt: skip
    if request.detach:
        if request.as_json:
            from dataclasses import asdict

            print(json.dumps(asdict(record)))
        else:
            print(record.id)
        return 0
    say(f"group {record.id}: following its {len(record.members)} tasks; "
        f"`gpujob cancel {record.id}` stops them all")  # fmt: skip
    return follow_group(record, follow=True)


def read_group_checked(request: LaunchRequest) -> JobGroup:
    """The header and every task loaded, every error of every document in one error, with
    what each task's own launch would refuse (a missing workdir, the script's hazards) so
    that no task starts when a later one cannot."""
    from launcher.spec.load import load_job_spec
    from launcher.spec.shell_hazards import script_hazards

    group = read_group(Path(request.spec_path))
    for line in group.warnings:
        say(f"warning: {line}")
    errors = list(group.errors)
    for task in group.tasks:
        try:
            loaded = load_job_spec(request.spec_path, request.sets, envs=request.envs,
                                   secrets=request.secrets, task=task.name)  # fmt: skip
        except GpujobError as err:
            errors += err.lines()
            continue
        errors += script_hazards(loaded)[0]
        if loaded.workdir is not None and not loaded.workdir.is_dir():
            errors.append(f"{loaded.where('workdir')}: workdir: {loaded.workdir} is not a folder")
    if errors:
        raise by_line(errors, group.path)
    return group


Placed = dict[str, tuple[str | None, tuple[str, ...]]]


def _hosts_by_task(group: JobGroup, on: tuple[str, ...]) -> Placed:
    """Each task's (node 0's address, its `--on` hosts): none on this machine; with --on,
    the hosts in task order, one per node, all of them used."""
    if not on:
        return {task.name: (None, ()) for task in group.tasks}
    from launcher.remote.hosts import resolve_host
    from launcher.targets.slurm.on import is_slurm_target

    if is_slurm_target(on):
        raise UsageError("a job group on a SLURM cluster is not supported yet",
                         "give --on hosts, or run the group on this machine")  # fmt: skip
    flat = [host for item in on for host in item.split(",") if host]
    needed = sum(task.nodes for task in group.tasks)
    if len(flat) != needed:
        shape = ", ".join(f"{task.name}: {task.nodes}" for task in group.tasks)
        raise UsageError(f"--on gives {len(flat)} host(s); the group's tasks need {needed} "
                         f"({shape}), one per node in task order",
                         "give one host per node, node 0 of the first task first")  # fmt: skip
    placed: Placed = {}
    for task in group.tasks:
        mine, flat = tuple(flat[: task.nodes]), flat[task.nodes :]
        placed[task.name] = (resolve_host(mine[0]).address, mine)
    return placed


def _dry_run(group: JobGroup, requests: list[LaunchRequest]) -> int:
    """Each task's plan in turn; with --json, one document: the group and each task's plan
    as `submit --dry-run --json` prints a job's."""
    import contextlib
    import io

    from launcher.jobs.launch import launch

    say(f"dry run: job group {group.name}: {len(requests)} task(s) started together")
    plans = []
    for task, request in zip(group.tasks, requests, strict=True):
        role = "primary" if task.primary else f"auxiliary (stopped {group.delay(task.name):g}s "
        role += "" if task.primary else "after the primary tasks end)"
        say(f"task {task.name} ({role}):")
        if not request.as_json:
            launch(request, target_for_request(request))
            continue
        text = io.StringIO()
        with contextlib.redirect_stdout(text):
            launch(request, target_for_request(request))
        plans.append(
            {"task": task.name, "primary": task.primary, "plan": json.loads(text.getvalue())}
        )
    if plans:
        print(json.dumps({"group": group.name, "tasks": plans}, indent=2))
    return 0


def _start_all(group: JobGroup, requests: list[LaunchRequest]) -> GroupRecord:
    """Each task started and handed to its keeper (or recovery controller); one that fails
    to start stops the others first."""
    import time

    from launcher.jobs.launch import launch
    from launcher.state.db import StateDB
    from launcher.supervise.keeper import hand_to_keeper

    group_id = new_group_id(group.name)
    members: list[Member] = []
    record = GroupRecord(group_id, group.name, str(group.path), (), time.time())
    try:
        for task, request in zip(group.tasks, requests, strict=True):
            say(f"group {group.name}: starting task {task.name}")
            started = launch(request, target_for_request(request))
            assert started is not None
            try:
                members.append(Member(task.name, started.job_id, task.primary,
                                      group.delay(task.name)))  # fmt: skip
                record = replace(record, members=tuple(members))
                save_group(record)
                if started.policy is not None:
                    from launcher.supervise.recover import watch_over

                    watch_over(started.job_id, request, started.policy)
                else:
                    hand_to_keeper(StateDB().job(started.job_id))
            finally:
                started.close()
    except BaseException:
        if members:
            say(f"group {group.name}: a task did not start; stopping the {len(members)} "
                "started")  # fmt: skip
            cancel_group(record, 10.0)
        raise
    return record
