"""The recovery controller: follow one job until it ends, restarting it on fresh hosts when
a host is lost (`gpujob recover JOB --foreground`, run detached by supervise/recover.py).

Each poll asks `plan.recovery.decide` what the job's hosts call for. A recovery terminates
what is left of the job's hosts, finds the latest complete checkpoint in S3, and runs
`submit --up`'s own launch again (`jobs.launch`) for the same job id (rent all nodes, all
or nothing; bootstrap; the checkpoint pulled onto the new head, verified; start with
GPUJOB_RESUME_FROM naming it). Renting again is retried a bounded number of times.

Money: every host is rented inside `submit --up`'s rent, so an error, a refusal or a signal
before the new attempt has started terminates what that attempt rented; when the
controller stops for good, or the job ends, it terminates every host of the job.
SIGTERM, SIGINT and SIGHUP while it only watches end it and leave the running job alone:
`gpujob recover JOB` (or `logs -f`) starts it again and it adopts the job.
"""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING, Any

from launcher.errors import GpujobError
from launcher.jobs.state import JobState
from launcher.plan.recovery import (
    Finished,
    NodeSeen,
    Policy,
    Recover,
    Stop,
    Unreachable,
    Watch,
    decide,
)
from launcher.plan.recovery import rent_delay_s as next_delay
from launcher.plan.replace import Replacement
from launcher.say import say
from launcher.state.db import StateDB
from launcher.state.recovery import FINISHED, RECOVERING, STOPPED, WATCHING, RecoveryDB

if TYPE_CHECKING:
    from collections.abc import Callable

    from launcher.supervise.recover_partial import KeptSide
    from launcher.supervise.recover_steps import Checkpoint


def poll_s() -> float:
    """Between two looks at the job's hosts; GPUJOB_POLL_S shortens it in tests."""
    return max(0.2, float(os.environ.get("GPUJOB_POLL_S", "15")))


def retry_base_s() -> float:
    """The first wait before renting again after a failed try (doubling after each)."""
    return float(os.environ.get("GPUJOB_RECOVER_RETRY_S", "30"))


class Ended(Exception):
    """A signal ended the controller while it watched: the job goes on without it."""


def _on_signal(signum: int, frame: object) -> None:
    raise Ended(signal.Signals(signum).name)


def run_controller(job_id: str) -> int:
    from launcher.supervise.recover import hold_lock

    lock = hold_lock(job_id)
    deadline = time.monotonic() + 2.0  # a look from `status` holds it for an instant
    while lock is None and time.monotonic() < deadline:
        time.sleep(0.05)
        lock = hold_lock(job_id)
    if lock is None:
        say(f"job {job_id}: another controller follows it; this one ends")
        return 0
    rdb = RecoveryDB()
    rdb.update(job_id, pid=os.getpid())
    record = rdb.get(job_id)
    assert record is not None
    policy = Policy(**{**record.request["policy"], "on": tuple(record.request["policy"]["on"])})
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    say(f"job {job_id}: controller pid {os.getpid()} follows it (restarts made: "
        f"{record.restarts}/{policy.max_restarts})")  # fmt: skip
    try:
        return _follow(job_id, policy, rdb)
    except Ended as stop:
        say(f"job {job_id}: controller ended by {stop}; the job and its hosts go on "
            f"(`gpujob recover {job_id}` follows it again)")  # fmt: skip
        return 0
    finally:
        os.close(lock)


def _follow(job_id: str, policy: Policy, rdb: RecoveryDB) -> int:
    from launcher.supervise.recover_steps import observe
    from launcher.supervise.recover_warm import warm

    warm()  # what a recovery imports, loaded now rather than after a loss
    db = StateDB()
    unreachable = Unreachable()
    said = ""
    while True:
        record, job = rdb.get(job_id), db.job(job_id)
        assert record is not None and job is not None
        if record.over:
            return 0
        if job.state == JobState.CANCELLED:  # `gpujob cancel` or `down`: the user's word
            return _finish(job, Finished(JobState.CANCELLED, job.exit_code or 1), rdb)
        now = time.monotonic()
        seen = observe(job, unreachable, now)
        decision = decide(policy, record.restarts, seen, now)
        if isinstance(decision, Watch):
            if decision.note and decision.note != said:
                say(decision.note)
            said = decision.note
            time.sleep(poll_s())
        elif isinstance(decision, Finished):
            return _finish(job, decision, rdb)
        elif isinstance(decision, Stop):
            return _stop(job, decision, rdb, record.restarts, record.request)
        elif (db.job(job_id) or job).state == JobState.CANCELLED:  # `down` took the hosts meanwhile
            continue
        else:
            stopped = _recover(job, decision, policy, rdb, record.restarts + 1, record.request,
                               seen)  # fmt: skip
            if stopped is not None:
                return stopped
            unreachable, said = Unreachable(), ""


def _finish(job: Any, decision: Finished, rdb: RecoveryDB) -> int:
    """The job ended on its own: its agents ship what is left, then its hosts go (a
    failure with --keep-on-failure: they stay up for the window, bounded on each host)."""
    from launcher.supervise.recover_steps import keep_or_terminate, wait_for_agents

    wait_for_agents(job)
    record = rdb.get(job.id)
    kept = keep_or_terminate(job, decision.state, record.request if record else {})
    line = (f"job {job.id} {decision.state} (exit code {decision.exit_code}); its hosts are "
            f"{'kept for a look' if kept else 'terminated'}")  # fmt: skip
    StateDB().update_job(job.id, decision.state, exit_code=decision.exit_code)
    rdb.update(job.id, phase=FINISHED)
    rdb.say(job.id, _restarts(rdb, job.id), line)
    say(line)
    return 0


def _stop(job: Any, decision: Stop, rdb: RecoveryDB, restarts: int,
          request: dict[str, Any] | None = None) -> int:  # fmt: skip
    """For good: every host of the job goes; its checkpoints stay in S3. `request`: the
    job's hosts are still its own (a failure it does not restart, not a recovery that
    broke): with --keep-on-failure they stay up for the window instead, as submit's do."""
    from launcher.supervise.recover_steps import keep_or_terminate, terminate_hosts

    with _signals_held():
        if request is None:
            terminate_hosts(job, "recovery stopped")
        kept = request is not None and keep_or_terminate(job, decision.state, request,
                                                         "recovery stopped")  # fmt: skip
        hosts = (f"the hosts of job {job.id} are kept for a look (`gpujob ssh {job.id}`; "
                 f"`gpujob down {job.id}` ends them)" if kept else
                 f"every host of job {job.id} is terminated")  # fmt: skip
        line = f"recovery stopped: {decision.why}; {hosts}, its checkpoints stay in S3"
        StateDB().update_job(job.id, decision.state, exit_code=decision.exit_code,
                             last_line=line)  # fmt: skip
        rdb.update(job.id, phase=STOPPED)
        rdb.say(job.id, restarts, line)
    say(line)
    return 1


def _recover(job: Any, decision: Recover, policy: Policy, rdb: RecoveryDB, restart: int,
             request: dict[str, Any], seen: list[NodeSeen]) -> int | None:  # fmt: skip
    """Terminate (the lost hosts only, where others can be kept: recover_partial.py), find
    the checkpoint, rent and start again; None once the job runs again, else the
    controller's exit code (it stopped)."""
    from launcher.supervise.recover_notify import spent_so_far
    from launcher.supervise.recover_partial import replacement_for
    from launcher.supervise.recover_steps import latest_checkpoint, terminate_hosts

    lost_at, spent = time.monotonic(), spent_so_far(job.id)
    rdb.update(job.id, phase=RECOVERING)
    why = f"{decision.why} on node {decision.rank}: restarting the job"
    said: list[str] = []

    def announce(checkpoint: Checkpoint | None) -> None:
        """The recovery's line, once its checkpoint is known (said once; by a partial
        restart's kept side, on its thread, as soon as it has found it)."""
        if not said:
            said.append(decision.line(restart, policy.max_restarts,
                                      checkpoint.step if checkpoint else None))  # fmt: skip
            StateDB().update_job(job.id, JobState.RECOVERING, last_line=said[0])
            rdb.say(job.id, restart - 1, said[0])
            say(said[0])

    with _signals_held():
        kept = _stop_for(job, replacement_for(job, decision, seen), why, request, restart,
                         announce)  # fmt: skip
    if kept is not None and _replace_lost(job, kept, request, restart, rdb):
        return _running_again(job.id, rdb, restart, lost_at, (request, said[0] if said else "",
                                                              spent))  # fmt: skip
    if kept is not None:
        kept.settle()  # its supervisors have shipped what they had: the checkpoint read next
        with _signals_held():
            terminate_hosts(StateDB().job(job.id) or job, "renting every node again")
    try:
        checkpoint = latest_checkpoint(request, job.id)
    except GpujobError as error:
        return _stop(job, Stop(f"cannot read the checkpoints in S3: {error.one_line()}"), rdb,
                     restart - 1)  # fmt: skip
    announce(checkpoint)
    tries = 0
    while True:
        tries += 1
        if _cancelled_meanwhile(job.id, rdb):
            return 0
        try:
            _start_again(job.id, request, restart, checkpoint)
            break
        except GpujobError as error:
            delay = next_delay(policy, tries, retry_base_s())
            if delay is None:
                why = (f"could not rent and start job {job.id} again after {tries} tries: "
                       f"{error.one_line()}")  # fmt: skip
                return _stop(job, Stop(why), rdb, restart - 1)
            retry = (f"renting again failed (try {tries} of {policy.rent_tries}): "
                     f"{error.one_line()}; next try in {delay:g} s")  # fmt: skip
            rdb.say(job.id, restart - 1, retry, headline=False)
            say(retry)
            time.sleep(delay)
    return _running_again(job.id, rdb, restart, lost_at, (request, said[0], spent))


def _running_again(
    job_id: str, rdb: RecoveryDB, restart: int, lost_at: float,
    told: tuple[dict[str, Any], str, float],
) -> int | None:  # fmt: skip
    """The job runs again: recorded, said, and posted to its webhooks (`recovered`, with
    `told`: the request, the recovery's line and the cost spent before it)."""
    from launcher.supervise.recover_notify import tell_recovered

    if _cancelled_meanwhile(job_id, rdb):  # while it rented: what it started goes too
        return 0
    with _signals_held():
        rdb.update(job_id, phase=WATCHING, restarts=restart)
    say(f"job {job_id}: attempt {restart + 1} runs, {time.monotonic() - lost_at:.1f} s after "
        "the loss was seen")  # fmt: skip
    tell_recovered(job_id, *told)
    return None


def _stop_for(job: Any, plan: Replacement, why: str, request: dict[str, Any], restart: int,
              announce: Callable[[Checkpoint | None], None]) -> KeptSide | None:  # fmt: skip
    """The lost hosts terminated and the kept ones' share of the restart started (on a
    thread: it runs while the replacements are rented); every host terminated (None) when
    the plan keeps none."""
    from launcher.supervise.recover_partial import KeptSide, plan_line, release_lost
    from launcher.supervise.recover_steps import terminate_hosts

    if plan.partial:
        say(plan_line(job, plan))
        release_lost(job, plan.replace, why)
        return KeptSide(job, plan, request, restart, announce)
    terminate_hosts(job, why)
    return None


def _replace_lost(job: Any, kept: KeptSide, request: dict[str, Any], restart: int,
                  rdb: RecoveryDB) -> bool:  # fmt: skip
    """The replacements rented and every node started again (one try: a failure falls back
    to renting every node); False when it failed (what it rented is terminated by then)."""
    from launcher.supervise.recover_partial import hold_autostop, kept_records

    if _cancelled_meanwhile(job.id, rdb):
        return True
    try:
        _start_again(job.id, request, restart, None, kept_records(job, kept.plan), kept)
        hold_autostop(job, kept.plan.keep, held=False)  # its job runs there again
        return True
    except (GpujobError, OSError, EOFError) as error:
        said = error.one_line() if isinstance(error, GpujobError) else repr(error)
        line = f"replacing only the lost node(s) failed: {said}; renting every node again"
        rdb.say(job.id, restart - 1, line, headline=False)
        say(line)
        return False


def _cancelled_meanwhile(job_id: str, rdb: RecoveryDB) -> bool:
    """`gpujob cancel` while the job was being recovered (supervise.recover.cancel_recovering):
    no restart; whatever this attempt started is terminated."""
    from launcher.supervise.recover_steps import terminate_hosts

    record = rdb.get(job_id)
    if record is None or not record.over:
        return False
    db = StateDB()
    job = db.job(job_id)
    if job is not None:
        with _signals_held():
            terminate_hosts(job, "the job was cancelled while it was recovered")
            db.update_job(job_id, JobState.CANCELLED, exit_code=job.exit_code)
    say(f"job {job_id}: cancelled by the user while it was recovered; no restart")
    return True


def _start_again(
    job_id: str,
    request: dict[str, Any],
    restart: int,
    checkpoint: Checkpoint | None,
    keep_hosts: tuple[str, ...] = (),
    kept: KeptSide | None = None,
) -> None:
    """`submit --up`'s own launch for the same job id, in a rent of its own: what this try
    rents is terminated on any way out before the job has started (targets.cloud.rent).
    `kept`: a partial restart's kept side (the checkpoint comes from it once the nodes are
    placed)."""
    from launcher.jobs.launch import launch
    from launcher.supervise.recover_steps import pull_onto_head
    from launcher.targets.base import LaunchRequest, target_for_request
    from launcher.targets.cloud.rent import renting
    from launcher.targets.cloud.target import CloudTarget

    fields = {k: v for k, v in request.items() if k not in ("spec_path", "sets", "policy")}
    again = LaunchRequest(
        spec_path=request["spec_path"], sets=tuple(request["sets"]), job_id=job_id,
        detach=True, attempt=restart, recover=True,
        resume_from=checkpoint.name if checkpoint else None, keep_hosts=keep_hosts, **fields,
    )  # fmt: skip
    with renting("submit --up") as rent:  # its signal handlers hold while it rents
        target = target_for_request(again, rent)
        before_start = pull_onto_head(checkpoint) if checkpoint else None
        if kept is not None:
            assert isinstance(target, CloudTarget)  # only rented hosts are kept (plan/replace.py)
            target.resume, before_start = kept.resume_from, kept.before_start
        started = launch(again, target, before_start)
        if started is not None:
            started.close()


def _restarts(rdb: RecoveryDB, job_id: str) -> int:
    record = rdb.get(job_id)
    return record.restarts if record else 0


class _signals_held:
    """Terminate calls are never cut short by a signal: it is acted on once they are done."""

    def __enter__(self) -> None:
        self.pending: list[int] = []
        self.previous = {sig: signal.getsignal(sig)
                         for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}  # fmt: skip
        for sig in self.previous:
            signal.signal(sig, lambda signum, _: self.pending.append(signum))

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self.previous.items():
            signal.signal(sig, handler)
        if self.pending:
            raise Ended(signal.Signals(self.pending[0]).name)
