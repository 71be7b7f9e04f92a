"""`gpujob submit SPEC`: the job launched on its target (`jobs.launch`), then followed, left
to its recovery controller or its keeper, or left running (`--detach`).

`--up` rents inside one `Rent` for the whole command: every way out before the job has
started (an error, a refusal, Ctrl-C, SIGTERM, SIGHUP) terminates what it rented; the start
hands the hosts over to the job.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from launcher.errors import UsageError
from launcher.say import say
from launcher.state.db import StateDB
from launcher.targets.base import LaunchRequest, Started, target_for_request

if TYPE_CHECKING:
    from launcher.targets.cloud.rent import Rent


@dataclass(frozen=True)
class SubmitOptions(LaunchRequest):
    """The command line's options: the launch request itself."""


def submit(options: SubmitOptions) -> int:
    if options.max_cost is not None and not options.up:
        raise UsageError("--max-cost goes with --up (a rental's budget)",
                         "add --up GPU, or leave --max-cost out")  # fmt: skip
    if options.autostop_key_on_host and not options.up:
        raise UsageError("--autostop-key-on-host goes with --up (a rented host's autostop)",
                         "add --up GPU, or leave --autostop-key-on-host out")  # fmt: skip
    if options.keep_on_failure is not None:
        _check_keep(options)
    if options.up and not options.dry_run:
        from launcher.targets.cloud.rent import renting

        with renting("submit --up") as rent:
            return _submit(options, rent)
    return _submit(options, None)


def _submit(request: LaunchRequest, rent: Rent | None) -> int:
    from launcher.jobs.launch import launch

    before_start = None
    if request.resume_path:  # found and checked before anything is contacted or rented
        from launcher.storage.resume import find_resume
        from launcher.supervise.recover_steps import Checkpoint, pull_onto_head

        found = find_resume(request.resume_path, vars(request))
        say(f"resuming from {found.remote}/{found.name} (step {found.step}): pulled onto node "
            "0 before the start, verified")  # fmt: skip
        request = replace(request, resume_from=found.name)
        before_start = pull_onto_head(Checkpoint(found.name, found.step, found.remote))
    if request.up:  # `--up` alone: the spec's candidates quoted, one taken
        from launcher.targets.cloud.candidates import rental_of

        request = rental_of(request)
    started = launch(request, target_for_request(request, rent), before_start)
    if started is None:  # a dry run: printed
        return 0
    try:
        return _after_start(request, started)
    finally:
        started.close()


def _after_start(request: LaunchRequest, started: Started) -> int:
    """Who answers for the job now: its recovery controller, its keeper, or this command's
    follow (which hands it to its keeper if stopped)."""
    db = StateDB()
    job = db.job(started.job_id)
    assert job is not None
    kept, policy = started.kept, started.policy
    if policy is not None and not request.attempt:
        from launcher.supervise.recover import watch_over

        watch_over(job.id, request, policy)  # the controller, detached: it outlives us
        kept = []  # the controller answers for the hosts now
    elif policy is None and request.detach and not request.attempt:
        from launcher.supervise.keeper import hand_to_keeper

        hand_to_keeper(job)  # nobody follows: one node failing must stop the rest
    if request.detach:
        from launcher.targets.base import target_for

        say(f"{target_for(job).traits.follow_hint}; follow it with: gpujob logs {job.id} -f")
        if request.as_json:  # for scripts: the record as the job starts
            import dataclasses
            import json

            print(json.dumps(dataclasses.asdict(job)))
        else:
            print(job.id)
        return 0
    from launcher.jobs.forwarding import forwarded_while
    from launcher.state.served import ServedDB
    from launcher.supervise.watch import follow_job
    from launcher.targets.base import target_for

    served = ServedDB().get(job.id)
    try:
        with forwarded_while(job, target_for(job), served.ports if served else [], say):
            code = follow_job(
                job,
                follow=True,
                opened=started.opened,
                first_reads=started.first_reads,
                dump_hung=bool(kept and started.keep_s),
            )  # kept: its ranks dumped first
    finally:
        if kept:
            _hosts_stay(db, job.id, kept)
    if kept and started.keep_s:
        _keep_if_failed(db, job.id, started.keep_s)
    return code


def _check_keep(options: SubmitOptions) -> None:
    """--keep-on-failure: a window, for hosts this submit rents, that can end themselves."""
    from launcher.spec.keep import window_seconds
    from launcher.targets.cloud.keep import check_keep

    window = window_seconds(options.keep_on_failure)
    if not options.up:
        raise UsageError("--keep-on-failure goes with --up (hosts rented for the job); "
                         "hosts you have stay up anyway",
                         "add --up GPU, or leave it out: `gpujob ssh JOB` gets into any "
                         "job's folder")  # fmt: skip
    check_keep(options.provider, options.autostop_key_on_host, window)


def _keep_if_failed(db: StateDB, job_id: str, window_s: float) -> None:
    """The follow saw the job end: a failure keeps its hosts up for the window, armed on
    each host (targets/cloud/keep.py); any other end leaves them as without the flag."""
    from launcher.jobs.keep import keeps_hosts

    job = db.job(job_id)
    if job is not None and keeps_hosts(job.state, window_s):
        from launcher.jobs.keep import failed_node
        from launcher.targets.cloud.keep import keep_failed

        node = failed_node(job)
        if node is None:  # a node failed for want of one the user had cancelled
            say(f"job {job.id} was cancelled first: its hosts are not kept for a look")
            return
        keep_failed(job, window_s, say, node)


def _hosts_stay(db: StateDB, job_id: str, hosts: list[str]) -> None:
    """Following ended (Ctrl-C, SIGTERM, SIGHUP, a lost connection) with the job still
    running: its hosts are not terminated under it, and still cost money; say so."""
    from launcher.jobs.state import is_terminal

    job = db.job(job_id)
    if job is not None and not is_terminal(job.state):
        down = f"gpujob down {hosts[0]}" if len(hosts) == 1 else "gpujob down HOST"
        say(f"its hosts keep running (and billing) for it: {', '.join(hosts)}; reattach "
            f"with `gpujob logs {job_id} -f`; `{down}` removes them")  # fmt: skip
