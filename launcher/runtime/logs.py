"""Stream a job's logs by byte offset until every node has ended and its log is drained.

The agent on each host owns the log file; the client only ever asks for bytes from an offset,
so a dropped connection or a restarted client loses nothing and repeats nothing. A host that
stays unreachable is asked again with backoff for a while (rented hosts drop SSH for a
minute at a time) before the stream gives up. The hosts are read at once (a round of reads
takes the slowest host's time, not the sum), each line whole and marked with its node.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from launcher.errors import GpujobError
from launcher.remote.base import Connection
from launcher.remote.fanout import per_host
from launcher.runtime.agent import TERMINAL
from launcher.runtime.screen import LINE_MAX, collapse_carriage_returns, compact, terminal_safe

__all__ = ["collapse_carriage_returns"]  # the test of what a terminal leaves imports it here

FAILED = ("failed", "lost")
POLL_MIN_S = 0.05
POLL_MAX_S = 0.5
BACKOFF_MAX_S = 15.0
TAIL_BYTES = 4096
LONG_POLL_S = 2.0
"""How long one read of a follow stays on its host, streaming the log as it grows (the agent's
`read` window): one process per node per window, where a read per round started one per new
line. Only where each host has one node: the nodes of one host are read in turn."""


def reconnect_budget_s() -> float:
    """How long one host may stay unreachable before `logs -f` gives up (the job goes on)."""
    return float(os.environ.get("GPUJOB_RECONNECT_S", "600"))


@dataclass
class NodeStream:
    rank: int
    node_dir: str
    connection: Connection
    offset: int = 0
    status: dict[str, Any] = field(default_factory=dict)
    partial: bytes = b""
    held: bytes = b""
    """An escape sequence cut between two reads, for a terminal (at most a few bytes)."""
    done: bool = False
    unreachable_since: float | None = None
    backoff_s: float = 0.5
    tail: bytes = b""
    """The last bytes shown (up to TAIL_BYTES): the job's last line without another read."""
    patience_s: float | None = None
    """How long the host may stay unreachable (None: `reconnect_budget_s()`)."""
    first: tuple[bytes, dict[str, Any]] | None = None
    """A read from byte 0 already made (submit's batch reads the log as it starts the job):
    the stream's first read uses it instead of asking the host again."""


@dataclass(frozen=True)
class Output:
    """How bytes reach the reader: `prefix` marks lines with their node rank; `collapse`
    shows `\\r`-rewritten lines (progress bars) as a terminal would, once each; `terminal`
    shows the job's control bytes rather than letting the terminal obey them (screen.py)."""

    out: BinaryIO
    prefix: bool = False
    collapse: bool = False
    terminal: bool = False


def output_for(out: BinaryIO, nodes: int) -> Output:
    """One node: its bytes as they come (a file or pipe gets the host's log byte for byte;
    a terminal draws the progress bars itself, its control bytes made safe). Several: each
    line marked with its node, progress bars shown once each as a terminal leaves them."""
    return Output(out, prefix=nodes > 1, collapse=nodes > 1, terminal=out.isatty())


Note = Callable[[str], None]


class Stopped(Exception):
    """The reader asked to stop (Ctrl-C, SIGTERM, SIGHUP): what was shown is recorded."""


class Interrupted(KeyboardInterrupt):
    """Following ended by a signal: the command exits 128 + its number (130 for Ctrl-C,
    143 for SIGTERM, 129 for SIGHUP), as a shell reports a process the signal ended."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def stopped_exit_code(stop: BaseException) -> int:
    return 128 + int(getattr(stop, "signum", signal.SIGINT))


_stop_requested: list[int] = []


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Ctrl-C, a closed terminal or a kill only raise a flag, which the stream checks between
    one read and the next: the bytes shown and the offset recorded never disagree, so the
    next `logs -f` repeats nothing and misses nothing. (The `ssh` reading a log runs in a
    session of its own, so a Ctrl-C at the terminal does not cut its read short.) A second
    signal stops at once. A hang-up this process was started ignoring stays ignored: under
    `nohup`, a closed terminal does not end the follow."""
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.getsignal(sig) for sig in stops}
    # Only a hang-up ignored from the start stays ignored (`nohup`). A shell starts a
    # background command (`cmd &`, a script's job) with SIGINT ignored too, and a test or a
    # supervisor that stops it with SIGINT still means it.
    if previous[signal.SIGHUP] == signal.SIG_IGN:
        del previous[signal.SIGHUP]

    def flag(signum: int, frame: object) -> None:
        if _stop_requested:
            raise Interrupted(signum)
        _stop_requested.append(signum)

    for sig in previous:
        signal.signal(sig, flag)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _stop_requested.clear()


def follow_logs(
    streams: list[NodeStream],
    output: Output,
    *,
    follow: bool,
    on_progress: Callable[[NodeStream], None] | None = None,
    on_failure: Callable[[NodeStream], None] | None = None,
    note: Note | None = None,
) -> list[NodeStream]:
    """Copy log bytes to the output until every node has ended (with `follow`) or until
    each log's end now. `on_failure` is called once, for the first node seen failed while
    others still run (the caller stops them: a job fails as a whole)."""
    try:
        return _follow(streams, output, follow, on_progress, on_failure, note)
    except (Stopped, KeyboardInterrupt) as stop:
        signum = _stop_requested[0] if _stop_requested else getattr(stop, "signum", signal.SIGINT)
        for stream in streams:  # held back for a whole line, but already recorded as shown
            _flush_partial(output, stream)
            if on_progress:
                on_progress(stream)  # a read stopped between two pieces: record its offset
        output.out.flush()
        raise Interrupted(signum) from None


def _follow(
    streams: list[NodeStream],
    output: Output,
    follow: bool,
    on_progress: Callable[[NodeStream], None] | None,
    on_failure: Callable[[NodeStream], None] | None,
    note: Note | None,
) -> list[NodeStream]:
    delay = POLL_MIN_S
    failure_seen = False
    one_each = len({_host_of(stream) for stream in streams}) == len(streams)
    wait = LONG_POLL_S if follow and one_each else 0.0
    lock = threading.Lock()

    def read_one(stream: NodeStream) -> dict[str, Any] | None:
        return _read(stream, follow, note, wait, output, lock)

    while True:
        moved = False
        if _stop_requested:
            raise Stopped
        due = [stream for stream in streams if not stream.done and _due(stream)]
        before = [stream.offset for stream in due]
        read = per_host(due, _host_of, read_one)
        for stream, status, offset in zip(due, read, before, strict=True):
            if status is None:
                continue
            stream.status = status
            if stream.offset > offset:
                moved = True
                if on_progress:
                    on_progress(stream)
            # The status was taken before the read, which went to the end of the log: an
            # ended node's read held all of it; a plain `logs` wants what is there now.
            if status.get("state") in TERMINAL or not follow:
                stream.done = True
                _flush_partial(output, stream)
            if (
                on_failure
                and not failure_seen
                and status.get("state") in FAILED
                and any(s.status.get("state") not in TERMINAL for s in streams if s is not stream)
            ):
                failure_seen = True
                on_failure(stream)
        output.out.flush()
        if all(stream.done for stream in streams):
            return streams
        if moved:
            delay = POLL_MIN_S
            continue
        if _stop_requested:
            raise Stopped
        time.sleep(delay)
        delay = min(delay * 2, POLL_MAX_S)


def _due(stream: NodeStream) -> bool:
    """An unreachable host is asked again only after its backoff."""
    if stream.unreachable_since is None:
        return True
    return time.monotonic() >= stream.unreachable_since + stream.backoff_s


def _host_of(stream: NodeStream) -> int:
    """The nodes of one host (one connection) are read in turn, the hosts at once."""
    return id(stream.connection)


def _read(
    stream: NodeStream,
    follow: bool,
    note: Note | None,
    wait_s: float,
    output: Output,
    lock: threading.Lock,
) -> dict[str, Any] | None:
    """One read of the node's log to its end, each piece shown as it arrives (the offset
    moves with what was shown, under `lock`: the hosts' reads run at once and share the
    output); the node's status, or None while the host is unreachable."""

    def show(data: bytes) -> None:
        with lock:
            stream.offset += len(data)
            stream.tail = (stream.tail + data[-TAIL_BYTES:])[-TAIL_BYTES:]
            _write(output, stream, data)
            output.out.flush()
        if _stop_requested:
            raise Stopped  # between two pieces: what was shown is what the offset says

    if stream.first is not None and stream.offset == 0:
        data, status = stream.first
        stream.first = None
        if data:
            show(data)
        return status
    try:
        _, status = stream.connection.read_log(stream.node_dir, stream.offset, wait_s, show)
    except GpujobError as err:
        now = time.monotonic()
        if stream.unreachable_since is None:
            stream.unreachable_since = now
            stream.backoff_s = 0.5
        elapsed = now - stream.unreachable_since
        patience = reconnect_budget_s() if stream.patience_s is None else stream.patience_s
        if not follow or elapsed > patience:
            raise
        stream.backoff_s = min(BACKOFF_MAX_S, max(stream.backoff_s * 2, elapsed + 0.5))
        if note:
            note(f"node {stream.rank}: {err.one_line()}; trying again (job unaffected)")
        return None
    if stream.unreachable_since is not None and note:
        note(f"node {stream.rank}: reconnected; resuming at byte {stream.offset}")
    stream.unreachable_since = None
    return status


def _write(output: Output, stream: NodeStream, data: bytes) -> None:
    """Each read is written as it comes; only a line held for its prefix or its `\\r`
    rewrites waits, and never more than LINE_MAX of it."""
    if not (output.prefix or output.collapse):
        if output.terminal:
            data, stream.held = terminal_safe(data, stream.held)
        output.out.write(data)
        return
    if not output.prefix and b"\r" not in data and b"\r" not in stream.partial:
        # nothing to collapse: whole lines go out as they are, without copying a big read
        cut = data.rfind(b"\n") + 1
        if cut:
            _emit(output, stream.partial)
            _emit(output, memoryview(data)[:cut])
            stream.partial = data[cut:]
        else:
            stream.partial += data
    else:
        data = stream.partial + data
        whole, newline, stream.partial = data.rpartition(b"\n")
        if newline:
            _emit(output, _render(output, stream.rank, whole + b"\n"))
    if len(stream.partial) > LINE_MAX:
        _bound(output, stream)


def _bound(output: Output, stream: NodeStream) -> None:
    """A line past LINE_MAX with no newline yet: its `\\r` rewrites folded into what they
    show; still past it, the part held so far is shown (as a line of its own when lines are
    marked with their node) and the rest of the line follows."""
    if output.collapse:
        stream.partial = compact(stream.partial)
    if len(stream.partial) > LINE_MAX:
        piece, stream.partial = stream.partial, b""
        shown = _render(output, stream.rank, piece)
        _emit(output, shown + b"\n" if output.prefix else shown)


def _emit(output: Output, data: bytes | memoryview) -> None:
    if output.terminal:
        data = terminal_safe(bytes(data), final=True)[0]
    output.out.write(data)


def _flush_partial(output: Output, stream: NodeStream) -> None:
    """A last line without a newline: shown as it is (with a newline only after a prefix,
    so a plain stream stays byte for byte the host's file)."""
    if stream.partial:
        tail = _render(output, stream.rank, stream.partial)
        _emit(output, tail + b"\n" if output.prefix else tail)
        stream.partial = b""
    if stream.held:
        _emit(output, stream.held)
        stream.held = b""


def _render(output: Output, rank: int, data: bytes) -> bytes:
    if not output.prefix and b"\r" not in data:
        return data  # nothing to change: no per-line work (a 10 GB log streams at disk speed)
    lines = data.split(b"\n")  # not splitlines(): a `\r` does not end a line
    lines = [line + b"\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])
    if output.collapse:
        lines = [collapse_carriage_returns(line) for line in lines]
    if output.prefix:
        tag = f"[node {rank}] ".encode()
        lines = [tag + line for line in lines]
    return b"".join(lines)


def first_failure(streams: list[NodeStream]) -> NodeStream | None:
    """The node that failed first (by the time its agent recorded the end): the cause, when
    the others failed or were stopped because of it."""
    failed = [s for s in streams if s.status.get("state") in FAILED]
    if not failed:
        return None
    return min(failed, key=lambda s: (s.status.get("ended_at") or float("inf"), s.rank))


def job_exit_code(streams: list[NodeStream]) -> int:
    """The job's exit code: the first failing node's, else the first nonzero, else 0."""
    cause = first_failure(streams)
    if cause is not None:
        return 1 if cause.status.get("state") == "lost" else int(cause.status.get("exit_code") or 1)
    for stream in streams:
        code = stream.status.get("exit_code")
        if stream.status.get("state") in TERMINAL and code:
            return int(code)
    return 0


def last_line(data: bytes) -> str | None:
    """The last non-blank line as a terminal shows it (a progress bar's final state)."""
    text = data.decode(errors="replace").replace("\r\n", "\n")
    lines = [line.rsplit("\r", 1)[-1] for line in text.split("\n")]
    lines = [line for line in lines if line.strip()]
    return lines[-1][-200:] if lines else None
