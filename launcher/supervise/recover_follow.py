"""`logs -f` of a job with recovery: the log of each attempt in turn, one line per recovery
between them, until the controller says the job is over (ended, or recovery stopped).

The controller decides; the follow only reads. A host that stops answering ends this
attempt's follow quickly (the controller's window, not the follow's, says whether it is
lost), and the follow then waits for the controller's word: a new attempt (its log from
byte 0: a new host, a new log), the end, or nothing new, and it reads the same hosts again.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Mapping

from launcher.errors import GpujobError
from launcher.jobs.state import JobState, recorded_exit_code
from launcher.remote.base import Connection
from launcher.say import say
from launcher.state.db import JobRecord, StateDB
from launcher.state.recovery import RECOVERING, RecoveryDB

LOOK_AGAIN_S = 5.0
"""With no word from the controller for this long, the same attempt's hosts are read again."""


def under_recovery(job_id: str) -> bool:
    return RecoveryDB().get(job_id) is not None


def follow_attempts(
    job: JobRecord,
    node: int | None = None,
    opened: Mapping[str, Connection] | None = None,
    first_reads: dict[int, tuple[bytes, dict[str, object]]] | None = None,
) -> int:
    """`opened`: connections by host name submit already has (its first attempt's)."""
    from launcher.runtime.logs import stopped_exit_code
    from launcher.supervise.recover import ensure_controller

    db, rdb = StateDB(), RecoveryDB()
    ensure_controller(job.id)
    shown = max((e.seq for e in rdb.events(job.id)), default=0)
    record = rdb.get(job.id)
    if record is not None and record.phase == RECOVERING and record.line:
        say(record.line)
    while True:
        record, current = rdb.get(job.id), db.job(job.id)
        assert record is not None and current is not None
        if record.over:
            shown = _say_events(rdb, job.id, shown)
            return _exit_code(current)
        if record.phase != RECOVERING and current.state != JobState.RECOVERING:
            attempt = record.restarts
            try:
                _follow_attempt(db, current, node, opened, first_reads)
            except KeyboardInterrupt as stop:
                say(f"stopped following; the job and its recovery controller go on "
                    f"(gpujob logs {job.id} -f)")  # fmt: skip
                return stopped_exit_code(stop)
            finally:
                opened, first_reads = None, None
            shown = _wait_for_word(rdb, job.id, attempt, shown)
        else:
            shown = _wait_for_word(rdb, job.id, None, shown)


def _say_events(rdb: RecoveryDB, job_id: str, shown: int) -> int:
    for event in rdb.events(job_id, after=shown):
        say(event.line)
        shown = event.seq
    return shown


def _wait_for_word(rdb: RecoveryDB, job_id: str, attempt: int | None, shown: int) -> int:
    """Until the controller has something to say: a new attempt runs, the job is over, or
    (`attempt` given) a few seconds with nothing new, to read the same hosts again."""
    from launcher.supervise.recover import ensure_controller

    deadline = time.monotonic() + LOOK_AGAIN_S
    while True:
        shown = _say_events(rdb, job_id, shown)
        record = rdb.get(job_id)
        assert record is not None
        if record.over:
            return shown
        if record.phase != RECOVERING and attempt is not None and record.restarts != attempt:
            return shown
        if record.phase != RECOVERING and (attempt is None or time.monotonic() > deadline):
            return shown
        ensure_controller(job_id)
        time.sleep(0.5)


def _follow_attempt(
    db: StateDB,
    job: JobRecord,
    node: int | None,
    opened: Mapping[str, Connection] | None,
    first: dict[int, tuple[bytes, dict[str, object]]] | None,
) -> None:
    """This attempt's logs, from where the last follow of it stopped, until every node has
    ended or a host stops answering."""
    from launcher.runtime.logs import NodeStream, follow_logs, output_for, stop_on_signals
    from launcher.targets.base import close_all, target_for

    rdb, attempt = RecoveryDB(), _attempt(job.id)
    try:
        conns = [n.connection for n in target_for(job).nodes(job, opened)]
    except (GpujobError, OSError, EOFError) as error:
        if not _superseded(rdb, job.id, attempt):
            say(f"job {job.id}: {_one_line(error)}; waiting for its recovery controller's word")
        return
    patience = float(os.environ.get("GPUJOB_RECOVER_FOLLOW_PATIENCE_S", "10"))
    streams = []
    for rank, node_dir in enumerate(job.node_dirs):
        if node is not None and rank != node:
            continue
        stream = NodeStream(rank=rank, node_dir=node_dir, connection=conns[rank],
                            patience_s=patience, offset=db.offset(job.id, rank))  # fmt: skip
        if stream.offset == 0 and first:
            stream.first = first.get(rank)
        streams.append(stream)
    output = output_for(sys.stdout.buffer, len(job.node_dirs))

    def record(stream: NodeStream) -> None:
        db.set_offset(job.id, stream.rank, stream.offset)

    def note(line: str) -> None:
        """A retry line for this attempt's hosts, unless the controller has given them up."""
        if _superseded(rdb, job.id, attempt):
            raise _Superseded
        say(line)

    try:
        with stop_on_signals():
            follow_logs(streams, output, follow=True, on_progress=record, note=note)
    except _Superseded:
        pass  # the controller recovers: its line and the new attempt's log come next
    except GpujobError as error:
        if _superseded(rdb, job.id, attempt):
            return
        say(f"job {job.id}: {error.one_line()}; waiting for its recovery controller's word")
    except (OSError, EOFError) as error:  # a host torn down mid-handshake (paramiko: EOFError)
        if _superseded(rdb, job.id, attempt):
            return
        say(f"job {job.id}: a host stopped answering ({error!r}); waiting for its recovery "
            "controller's word")  # fmt: skip
    finally:
        if opened is None:
            close_all(conns)


class _Superseded(Exception):
    """The controller has given up this attempt's hosts: reading them again says nothing."""


def _attempt(job_id: str) -> int:
    record = RecoveryDB().get(job_id)
    return record.restarts if record else 0


def _superseded(rdb: RecoveryDB, job_id: str, attempt: int) -> bool:
    """The controller recovers the job, or has started a later attempt, or is done."""
    record = rdb.get(job_id)
    return (
        record is None or record.over or record.phase == RECOVERING or (record.restarts != attempt)
    )


def _one_line(error: BaseException) -> str:
    return error.one_line() if isinstance(error, GpujobError) else repr(error)


def _exit_code(job: JobRecord) -> int:
    code = recorded_exit_code(job)
    if job.state != JobState.TIMED_OUT:
        say(f"job {job.id} {job.state} (exit code {code})")
    return code
