"""A job's log from its target's nodes, by byte offset, and the job's exit code (`logs`, and
`submit` once the job has started).

A follow records each node's offset in the state db as bytes are written, so a client that
is killed and started again continues where the last one stopped (nothing twice); a follow
that saw the job end clears them, so a later `logs -f` shows the whole log again. In a
multi-node job the first node to fail ends the job on every node, and its last lines are
shown: they hold the crashing rank's error.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from launcher.agent.limits import TIMED_OUT_CODE
from launcher.errors import GpujobError, UsageError
from launcher.jobs.state import (
    NODE_FAILURES,
    JobState,
    exit_code_of,
    first_failed,
    is_final,
    is_terminal,
    job_exit_code,
    job_state,
)
from launcher.remote.base import Connection
from launcher.say import say
from launcher.state import figures
from launcher.state.db import JobRecord, StateDB
from launcher.targets.base import Node, Target, close_all, target_for

FAIL_FAST_GRACE_S = 10.0
START_WAIT_S = 120.0
"""How long `logs -f` waits for a live submit to finish starting the job."""
CAUSE_LINES = 12
TORCHRUN_FAILED = re.compile(
    r"torch[./]distributed[./]elastic.*failed \(exitcode: |ChildFailedError"
)
PEER_LOST = re.compile(
    r"closed by peer|Connection reset|Broken pipe|remote process exited|communicator was aborted"
    r"|Connection refused"
)


def show_log(
    job: JobRecord,
    *,
    follow: bool,
    node: int | None = None,
    tail: int | None = None,
    opened: Mapping[str, Connection] | None = None,
    first_reads: dict[int, tuple[bytes, dict[str, object]]] | None = None,
    on_stop: Callable[[], None] = lambda: None,
    dump_hung: bool = False,
) -> int:
    """The job's log from its target's nodes. `opened`: connections by host name already
    open (submit's; the log falls back to S3 only without them); `first_reads`: reads from
    byte 0 already made, by node rank (submit's); `on_stop`: called when a follow stops
    with the job still running (its keeper takes over); `dump_hung`: once a node fails, the
    others' running ranks are dumped with py-spy before they are stopped (--keep-on-failure)."""
    from launcher.jobs.lifecycle import failed_to_start, settle

    db = StateDB()
    if opened is None:  # not submit's own follow: a start in progress or interrupted, resolved
        job = settle(db, job, START_WAIT_S if follow else 0.0)
        if failed_to_start(job) and not job.unconfirmed:
            say(f"job {job.id} {job.last_line}")
            return 1
    target = target_for(job)
    nodes = target.nodes(job, opened)
    try:
        return _logs(db, job, target, nodes, follow=follow, node=node, tail=tail,
                     first=first_reads, on_stop=on_stop, dump_hung=dump_hung)  # fmt: skip
    except GpujobError as err:
        if isinstance(err, UsageError) or not job.logs_to or opened is not None:
            raise
        say(f"{err.one_line()}; showing the log the agents shipped to {job.logs_to}")
        from launcher.storage.shipped_logs import show_shipped_logs

        return show_shipped_logs(job, node=node, tail=tail)
    finally:
        close_all([n.connection for n in nodes])


def _logs(
    db: StateDB,
    job: JobRecord,
    target: Target,
    nodes: list[Node],
    *,
    follow: bool,
    node: int | None,
    tail: int | None,
    first: dict[int, tuple[bytes, dict[str, object]]] | None,
    on_stop: Callable[[], None],
    dump_hung: bool = False,
) -> int:
    from launcher.runtime.logs import (
        NodeStream,
        follow_logs,
        output_for,
        stop_on_signals,
        stopped_exit_code,
    )

    # an ended job whose log is in S3 does not wait for its host to come back
    patience = 0.0 if job.terminal and job.logs_to else None
    streams = [
        NodeStream(rank=n.rank, node_dir=n.node_dir, connection=n.connection, patience_s=patience)
        for n in nodes
        if node is None or n.rank == node
    ]
    if not streams:
        raise UsageError(f"job {job.id} has no node {node}; it has {len(job.node_dirs)}")
    here = target.traits.on_this_machine
    for stream in streams:
        if tail is not None:
            stream.offset = _tail_offset(stream, tail, here)
        elif follow:
            stream.offset = db.offset(job.id, stream.rank)
            if stream.offset:
                say(f"node {stream.rank}: resuming at byte {stream.offset}, where the last "
                    "follow stopped")  # fmt: skip
        if stream.offset == 0 and first:
            stream.first = first.get(stream.rank)
    output = output_for(sys.stdout.buffer, len(job.node_dirs))

    def record(stream: NodeStream) -> None:
        if follow and tail is None:
            db.set_offset(job.id, stream.rank, stream.offset)

    def stop_the_rest(failed: NodeStream) -> None:
        state = failed.status.get("state")
        say(f"node {failed.rank} {state} (exit code {failed.status.get('exit_code')}); "
            "stopping the other nodes")  # fmt: skip
        for other in nodes:  # a lost node too: its processes may outlive its supervisor
            if other.rank != failed.rank or state == JobState.LOST:
                dump = dump_hung and other.rank != failed.rank  # its hung ranks, before the stop
                other.cancel(FAIL_FAST_GRACE_S, dump_first=dump)

    def hand_over() -> None:
        """Nobody follows from here on: the job's keeper keeps its failure rule."""
        if follow and tail is None:
            on_stop()

    stops_others = follow and node is None and target.traits.stops_others_on_failure
    try:
        with stop_on_signals():
            done = follow_logs(
                streams, output, follow=follow, on_progress=record,
                on_failure=stop_the_rest if stops_others else None, note=say,
            )  # fmt: skip
    except KeyboardInterrupt as stop:
        hand_over()
        with contextlib.suppress(OSError):  # a terminal that hung up hears nothing
            say(f"stopped following; the job goes on (gpujob logs {job.id} -f)")
        return stopped_exit_code(stop)
    except BrokenPipeError:
        hand_over()
        _quiet_stdout()
        return 0
    except BaseException:  # the follow broke (a host past its reconnect budget, a hang-up)
        hand_over()
        raise
    statuses = [stream.status for stream in done]
    states = [status.get("state") for status in statuses]
    if not (follow or all(is_terminal(state) for state in states)):
        return 0
    state = job_state(states)
    if state is None or not is_final(states, state):
        return 0
    code = job_exit_code(statuses)  # type: ignore[arg-type]
    texts = {s.rank: _tail_text(s) for s in done if s.status.get("state") in NODE_FAILURES}
    earliest = first_failed(statuses)  # type: ignore[arg-type]
    cause = pick_cause(done, texts) if len(done) > 1 else None
    if len(done) == 1 and earliest is not None:
        cause = done[earliest]
    if cause is not None:
        code = exit_code_of(cause.status) if cause.status.get("state") == JobState.FAILED else code
    ending = _ending(done, state, cause)
    if state == JobState.TIMED_OUT:
        code = TIMED_OUT_CODE
    timed_out = ending if state == JobState.TIMED_OUT else None
    db.update_job(job.id, state, exit_code=code,
                  last_line=timed_out or _final_line(cause or done[0]))  # fmt: skip
    head = next((s.status for s in done if s.rank == 0), {})
    figures.save(job.id, head.get("metrics"))  # status shows them once the job has ended
    if follow and tail is None and node is None:
        for stream in done:
            db.set_offset(job.id, stream.rank, 0)
    if follow:
        if cause is not None and len(job.node_dirs) > 1 and state != JobState.TIMED_OUT:
            _show_cause(cause, texts[cause.rank])
        say(f"job {job.id} {ending} (exit code {code})")
    return code


def _ending(streams: list[Any], state: JobState, cause: Any) -> str:
    """How the job ended, in words: its state, with the agent's reason where it gave one (a
    time limit and the last checkpoint, a stop by the GPU-idle policy or the disk care)."""
    if state == JobState.TIMED_OUT:
        timed = min((s for s in streams if s.status.get("state") == JobState.TIMED_OUT),
                    key=lambda s: s.rank)  # fmt: skip
        return str(timed.status.get("reason") or state)
    reason = cause.status.get("reason") if cause is not None else None
    return f"{state}: {reason}" if reason and state == JobState.FAILED else str(state)


def _show_cause(cause: Any, text: str) -> None:
    lines = crash_lines(text)
    say(f"node {cause.rank} failed first (exit code {cause.status.get('exit_code')}); "
        "its last lines:")  # fmt: skip
    for line in lines:
        sys.stderr.write(f"  [node {cause.rank}] {line}\n")
    sys.stderr.flush()


def _tail_text(stream: Any, size: int = 64 << 10) -> str:
    data, _ = stream.connection.read_log(stream.node_dir, max(0, stream.offset - size))
    return data.decode(errors="replace")


def crash_lines(text: str) -> list[str]:
    """The failing rank's own last lines (its traceback), then torchrun's verdict (which
    rank, which exit code), without the launcher's own traceback in between."""
    lines = text.splitlines()
    marker = next((i for i, line in enumerate(lines) if TORCHRUN_FAILED.search(line)), None)
    if marker is None:
        return lines[-CAUSE_LINES:]
    own = [line for line in lines[:marker] if line.strip()][-CAUSE_LINES:]
    verdict = [line.strip() for line in lines[marker:]
               if line.strip().startswith(("rank ", "exitcode "))]  # fmt: skip
    return own + verdict[:2]


def pick_cause(streams: list[Any], texts: dict[int, str]) -> Any:
    """The node that failed first. Every node of a broken world fails, most of them because a
    peer vanished; the cause is the failed node whose ranks did not die of a lost peer, the
    earliest if several (by the time each agent recorded the end; a node with no recorded end,
    failed in SLURM's word only, comes after every recorded one: it was killed while
    starting, because another node failed)."""
    failed = [s for s in streams if s.status.get("state") in NODE_FAILURES]
    if not failed:
        return None

    def order(stream: Any) -> tuple[bool, float, int]:
        own = "\n".join(crash_lines(texts.get(stream.rank, "")))
        ended = stream.status.get("ended_at") or float("inf")
        return (bool(PEER_LOST.search(own)), ended, stream.rank)

    return min(failed, key=order)


def _quiet_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _tail_offset(stream: Any, lines: int, here: bool) -> int:
    """Offset of the last `lines` lines, reading backwards from the end in 64 KiB steps: a
    10 GB log is never read whole. `here`: the log is a file of this machine."""
    size = _log_size(stream, here)
    start, found = size, b""
    while start > 0 and found.count(b"\n") <= lines:
        start = max(0, start - (64 << 10))
        data, _ = stream.connection.read_log(stream.node_dir, start)
        found = data[: size - start]
    keep = found.rstrip(b"\n").split(b"\n")[-lines:] if lines else []
    return size - len(b"\n".join(keep)) - (1 if found.endswith(b"\n") and keep else 0)


def _log_size(stream: Any, here: bool) -> int:
    path = f"{stream.node_dir}/job.log"
    if here:
        return Path(path).stat().st_size if Path(path).exists() else 0
    result = stream.connection.run(["stat", "-c", "%s", path])
    return int(result.stdout.strip()) if result.ok else 0


def _final_line(stream: Any) -> str | None:
    from launcher.runtime.logs import TAIL_BYTES, last_line

    if len(stream.tail) >= min(TAIL_BYTES, stream.offset):  # the stream saw the log's end
        return last_line(stream.tail)
    data, _ = stream.connection.read_log(stream.node_dir, max(0, stream.offset - TAIL_BYTES))
    return last_line(data)
