"""`gpujob logs`: a job's log from its hosts, by byte offset, and the job's exit code.

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
from pathlib import Path
from typing import Any

from launcher.agent.limits import TIMED_OUT_CODE
from launcher.agent.states import TERMINAL, TIMED_OUT
from launcher.errors import GpujobError, UsageError
from launcher.ops import say
from launcher.ops.jobs import close_all, job_connections, job_or_fail
from launcher.state.db import JobRecord, StateDB

FAIL_FAST_GRACE_S = 10.0
CAUSE_LINES = 12
TORCHRUN_FAILED = re.compile(
    r"torch[./]distributed[./]elastic.*failed \(exitcode: |ChildFailedError"
)
PEER_LOST = re.compile(
    r"closed by peer|Connection reset|Broken pipe|remote process exited|communicator was aborted"
    r"|Connection refused"
)


def logs(
    reference: str,
    *,
    follow: bool,
    node: int | None = None,
    tail: int | None = None,
    connections: list[Any] | None = None,
    first_reads: dict[int, tuple[bytes, dict[str, Any]]] | None = None,
) -> int:
    """`first_reads`: reads from byte 0 already made, by node rank (submit's)."""
    db = StateDB()
    job = job_or_fail(db, reference)
    if follow and tail is None:
        from launcher.ops.recover_follow import follow_attempts, under_recovery

        if under_recovery(job.id):  # every attempt in turn, one line per recovery
            return follow_attempts(job, node, connections, first_reads)
    conns = connections or job_connections(job)
    if job.provider == "slurm":  # through the login host, SLURM's state laid over the agents'
        from launcher.ops.slurm import slurm_connections

        conns = slurm_connections(job, conns)
    try:
        return _logs(db, job, conns, follow=follow, node=node, tail=tail, first=first_reads)
    except GpujobError as err:
        if isinstance(err, UsageError) or not job.logs_to or connections is not None:
            raise
        say(f"{err.one_line()}; showing the log the agents shipped to {job.logs_to}")
        from launcher.storage.shipped_logs import show_shipped_logs

        return show_shipped_logs(job, node=node, tail=tail)
    finally:
        close_all(conns)


def _logs(
    db: StateDB,
    job: JobRecord,
    conns: list[Any],
    *,
    follow: bool,
    node: int | None,
    tail: int | None,
    first: dict[int, tuple[bytes, dict[str, Any]]] | None = None,
) -> int:
    from launcher.runtime.logs import (
        NodeStream,
        first_failure,
        follow_logs,
        job_exit_code,
        output_for,
        stop_on_signals,
        stopped_exit_code,
    )

    # an ended job whose log is in S3 does not wait for its host to come back
    patience = 0.0 if job.terminal and job.logs_to else None
    streams = [
        NodeStream(rank=rank, node_dir=node_dir, connection=conns[rank], patience_s=patience)
        for rank, node_dir in enumerate(job.node_dirs)
        if node is None or rank == node
    ]
    if not streams:
        raise UsageError(f"job {job.id} has no node {node}; it has {len(job.node_dirs)}")
    for stream in streams:
        if tail is not None:
            stream.offset = _tail_offset(stream, tail)
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
        _cancel_nodes(job, conns, skip=failed.rank)

    def hand_over() -> None:
        """Nobody follows from here on: the job's keeper keeps its failure rule."""
        if follow and tail is None:
            from launcher.ops.keeper import hand_to_keeper

            hand_to_keeper(db.job(job.id))

    try:
        with stop_on_signals():
            done = follow_logs(
                streams, output, follow=follow, on_progress=record,
                on_failure=stop_the_rest if follow and node is None and job.provider != "slurm"
                else None, note=say,  # SLURM's srun --kill-on-bad-exit stops the others
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
    states = {stream.status.get("state") for stream in done}
    if not (follow or states <= TERMINAL):
        return 0
    code = job_exit_code(done)
    state = _job_state(done)
    if state not in TERMINAL:
        return 0
    texts = {s.rank: _tail_text(s) for s in done if s.status.get("state") in ("failed", "lost")}
    cause = pick_cause(done, texts) if len(done) > 1 else first_failure(done)
    if cause is not None and cause.status.get("state") == "failed":
        code = int(cause.status.get("exit_code") or 1)
    ending = _ending(done, state, cause)
    if state == TIMED_OUT:
        code = TIMED_OUT_CODE
    timed_out = ending if state == TIMED_OUT else None
    db.update_job(job.id, state, exit_code=code,
                  last_line=timed_out or _final_line(cause or done[0]))  # fmt: skip
    if follow and tail is None and node is None:
        for stream in done:
            db.set_offset(job.id, stream.rank, 0)
    if follow:
        if cause is not None and len(job.node_dirs) > 1 and state != TIMED_OUT:
            _show_cause(cause, texts[cause.rank])
        say(f"job {job.id} {ending} (exit code {code})")
    return code


def _ending(streams: list[Any], state: str, cause: Any) -> str:
    """How the job ended, in words: its state, with the agent's reason where it gave one (a
    time limit and the last checkpoint, a stop by the GPU-idle policy or the disk care)."""
    if state == TIMED_OUT:
        timed = min((s for s in streams if s.status.get("state") == TIMED_OUT),
                    key=lambda s: s.rank)  # fmt: skip
        return str(timed.status.get("reason") or state)
    reason = cause.status.get("reason") if cause is not None else None
    return f"{state}: {reason}" if reason and state == "failed" else state


def _cancel_nodes(job: JobRecord, conns: list[Any], skip: int) -> None:
    from launcher.runtime.agent import agent_argv, python_for

    for rank, node_dir in enumerate(job.node_dirs):
        if rank != skip:
            conns[rank].run(
                agent_argv(python_for(job.provider), node_dir, "cancel", f"{FAIL_FAST_GRACE_S:g}")
            )


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
    earliest if several (by the time each agent recorded the end)."""
    from launcher.runtime.logs import FAILED

    failed = [s for s in streams if s.status.get("state") in FAILED]
    if not failed:
        return None

    def order(stream: Any) -> tuple[bool, float, int]:
        own = "\n".join(crash_lines(texts.get(stream.rank, "")))
        return (bool(PEER_LOST.search(own)), stream.status.get("ended_at") or 0.0, stream.rank)

    return min(failed, key=order)


def _quiet_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _tail_offset(stream: Any, lines: int) -> int:
    """Offset of the last `lines` lines, reading backwards from the end in 64 KiB steps: a
    10 GB log is never read whole."""
    size = _log_size(stream)
    start, found = size, b""
    while start > 0 and found.count(b"\n") <= lines:
        start = max(0, start - (64 << 10))
        data, _ = stream.connection.read_log(stream.node_dir, start)
        found = data[: size - start]
    keep = found.rstrip(b"\n").split(b"\n")[-lines:] if lines else []
    return size - len(b"\n".join(keep)) - (1 if found.endswith(b"\n") and keep else 0)


def _log_size(stream: Any) -> int:
    path = f"{stream.node_dir}/job.log"
    if stream.connection.host == "local":
        return Path(path).stat().st_size if Path(path).exists() else 0
    result = stream.connection.run(["stat", "-c", "%s", path])
    return int(result.stdout.strip()) if result.ok else 0


def _job_state(streams: list[Any]) -> str:
    states = [stream.status.get("state") for stream in streams]
    for state in ("lost", TIMED_OUT, "failed", "cancelled"):
        if state in states:
            return state
    return states[0] if len(set(states)) == 1 else "running"


def _final_line(stream: Any) -> str | None:
    from launcher.runtime.logs import TAIL_BYTES, last_line

    if len(stream.tail) >= min(TAIL_BYTES, stream.offset):  # the stream saw the log's end
        return last_line(stream.tail)
    data, _ = stream.connection.read_log(stream.node_dir, max(0, stream.offset - TAIL_BYTES))
    return last_line(data)
