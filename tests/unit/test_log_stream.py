"""Following logs: progress bars as a terminal shows them, node prefixes, reconnects after a
host stops answering, and which node of a failed multi-node job is shown as the cause."""

from __future__ import annotations

import io
from typing import Any

import pytest

from launcher.errors import GpujobError
from launcher.jobs.follow import crash_lines, pick_cause
from launcher.runtime.logs import NodeStream, Output, collapse_carriage_returns, follow_logs


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (b"plain\n", b"plain\n"),
        (b"10%\r50%\r100%\n", b"100%\n"),
        (b"abcd\rxy\n", b"xycd\n"),
        (b"crlf ending\r\n", b"crlf ending\r\n"),
        (b"a\rb\r\n", b"b\r\n"),
        (b"no newline\r99%", b"99%newline"),
        ("é 1/3\ré 3/3\n".encode(), "é 3/3\n".encode()),
    ],
)
def test_carriage_returns_collapse_as_on_a_terminal(line: bytes, shown: bytes) -> None:
    assert collapse_carriage_returns(line) == shown


class Host:
    """A host's log as a Connection sees it: bytes appended over time, and outages."""

    host = "fake"

    def __init__(self, chunks: list[bytes], down_for: int = 0) -> None:
        self.chunks, self.log, self.down_for, self.reads = chunks, b"", down_for, 0

    def read_log(
        self, node_dir: str, offset: int, wait_s: float = 0, sink: Any = None
    ) -> tuple[bytes, Any]:
        self.reads += 1
        if self.down_for and self.reads % 2 == 0:
            self.down_for -= 1
            raise GpujobError("cannot reach fake: Connection refused")
        if self.chunks:
            self.log += self.chunks.pop(0)
        state = "running" if self.chunks else "succeeded"
        if sink is None:
            return self.log[offset:], {"state": state, "exit_code": 0}
        sink(self.log[offset:])
        return b"", {"state": state, "exit_code": 0}


def test_a_host_that_drops_out_is_asked_again_and_nothing_is_lost_or_doubled() -> None:
    chunks = [f"line {i}\n".encode() for i in range(20)]
    host = Host(list(chunks), down_for=5)
    out, notes = io.BytesIO(), []
    follow_logs([NodeStream(0, "/n0", host)], Output(out), follow=True, note=notes.append)
    assert out.getvalue() == b"".join(chunks)
    assert any("trying again" in n for n in notes) and any("reconnected" in n for n in notes)


def test_nodes_are_prefixed_and_progress_collapsed() -> None:
    a = Host([b"step 1\rstep 2\n", b"half"])
    b = Host([b"hello\n"])
    out = io.BytesIO()
    follow_logs([NodeStream(0, "/a", a), NodeStream(1, "/b", b)],
                Output(out, prefix=True, collapse=True), follow=True)  # fmt: skip
    assert sorted(out.getvalue().splitlines()) == [b"[node 0] half", b"[node 0] step 2",
                                                   b"[node 1] hello"]  # fmt: skip


TORCHRUN_TAIL = """\
rank 3/4 node 1 sum 10
Traceback (most recent call last):
  File "/w/prog.py", line 10, in <module>
RuntimeError: rank 3 crashed on purpose
E1123 torch/distributed/elastic/multiprocessing/api.py:900] failed (exitcode: 1) local_rank: 1
Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 900, in main
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
Root Cause (first observed failure):
[0]:
  time      : 2026-11-23_02:50:01
  rank      : 3 (local_rank: 1)
  exitcode  : 1 (pid: 77)
"""
PEER_TAIL = TORCHRUN_TAIL.replace(
    "RuntimeError: rank 3 crashed on purpose",
    "RuntimeError: [../gloo/transport/tcp/pair.cc:538] Connection closed by peer [10.77.0.6]:1",
)


def test_crash_lines_are_the_ranks_own_then_torchruns_verdict() -> None:
    lines = crash_lines(TORCHRUN_TAIL)
    assert lines[-3] == "RuntimeError: rank 3 crashed on purpose"
    assert lines[-2:] == ["rank      : 3 (local_rank: 1)", "exitcode  : 1 (pid: 77)"]
    assert not any("run.py" in line for line in lines)


def test_the_cause_is_the_node_whose_ranks_did_not_lose_a_peer() -> None:
    early = NodeStream(0, "/a", Host([]), status={"state": "failed", "ended_at": 1.0})
    crashed = NodeStream(1, "/b", Host([]), status={"state": "failed", "ended_at": 2.0})
    assert pick_cause([early, crashed], {0: PEER_TAIL, 1: TORCHRUN_TAIL}) is crashed
    assert pick_cause([early, crashed], {0: TORCHRUN_TAIL, 1: TORCHRUN_TAIL}) is early


def test_a_node_failed_in_slurms_word_only_is_not_taken_for_the_cause() -> None:
    """SLURM killed node 0 while its agent was still starting, because node 1's rank exited 7
    (srun --kill-on-bad-exit): node 0 has SLURM's `failed` and no recorded end; node 1 has
    its own, and is the cause."""
    killed = NodeStream(0, "/a", Host([]), status={"state": "failed", "exit_code": 7,
                                                   "reason": "SLURM FAILED"})  # fmt: skip
    failed = NodeStream(1, "/b", Host([]), status={"state": "failed", "exit_code": 7,
                                                   "ended_at": 1795807823.2})  # fmt: skip
    assert pick_cause([killed, failed], {0: "", 1: "ValueError: shard 7 is corrupt\n"}) is failed


@pytest.mark.parametrize("size", [1, 2, 3, 5, 7, 64])
def test_a_log_read_in_any_pieces_shows_as_read_whole(size: int) -> None:
    log = b"a\nxx prog 10%\rprog 50%\nplain line\nb\r\ncount 1\rcount 22\rcount 3\nend"
    whole = io.BytesIO()
    follow_logs([NodeStream(0, "/n", Host([log]))], Output(whole, collapse=True), follow=False)
    assert whole.getvalue() == b"a\nprog 50%10%\nplain line\nb\r\ncount 32\nend"
    pieces = [log[i : i + size] for i in range(0, len(log), size)]
    out = io.BytesIO()
    follow_logs([NodeStream(0, "/n", Host(pieces))], Output(out, collapse=True), follow=True)
    assert out.getvalue() == whole.getvalue()


class Tracking(io.BytesIO):
    """An output that remembers the largest unfinished line a node held while it wrote."""

    def __init__(self, stream: NodeStream) -> None:
        super().__init__()
        self.stream, self.most_held = stream, 0

    def write(self, data: Any) -> int:
        self.most_held = max(self.most_held, len(self.stream.partial))
        return super().write(data)


def test_a_long_progress_line_of_a_node_is_held_bounded_and_shown_as_a_terminal_leaves_it() -> None:
    """10 MB of `\\r` rewrites without a newline, read in 64 KiB pieces: what a node holds
    stays near LINE_MAX, and the line shown is the one a terminal would have left."""
    from launcher.runtime.screen import LINE_MAX

    line = b"".join(b"\rstep %07d" % i for i in range(800_000)) + b" done\n"
    pieces = [line[i : i + 65536] for i in range(0, len(line), 65536)]
    stream = NodeStream(1, "/n", Host(pieces))
    out = Tracking(stream)
    follow_logs([stream], Output(out, prefix=True, collapse=True), follow=True)
    assert out.getvalue() == b"[node 1] step 0799999 done\n"
    assert out.most_held <= LINE_MAX + 65536


def test_a_huge_line_without_carriage_returns_is_shown_in_pieces() -> None:
    from launcher.runtime.screen import LINE_MAX

    line = b"x" * (5 * LINE_MAX) + b"\n"
    stream = NodeStream(0, "/n", Host([line[i : i + 4096] for i in range(0, len(line), 4096)]))
    out = Tracking(stream)
    follow_logs([stream], Output(out, prefix=True, collapse=True), follow=True)
    shown = out.getvalue().split(b"\n")[:-1]
    assert all(piece.startswith(b"[node 0] x") for piece in shown) and len(shown) > 1
    assert b"".join(piece.removeprefix(b"[node 0] ") for piece in shown) == line[:-1]
    assert out.most_held <= LINE_MAX + 4096


@pytest.mark.parametrize("size", [1, 2, 3, 7, 1000])
def test_a_terminal_sees_control_bytes_escaped_however_the_reads_cut_them(size: int) -> None:
    log = b"a\x1b]0;title\x07b \x1b[1;31mred\x1b[0m \x1b[2K\x1b[1A up \x1b[?25l\x00\x7f\tend\x1b"
    out = io.BytesIO()
    pieces = [log[i : i + size] for i in range(0, len(log), size)]
    follow_logs([NodeStream(0, "/n", Host(pieces))], Output(out, terminal=True), follow=True)
    assert out.getvalue() == (
        b"a^[]0;title^Gb \x1b[1;31mred\x1b[0m \x1b[2K\x1b[1A up ^[[?25l^@^?\tend^["
    )


@pytest.mark.parametrize("size", [1, 2, 3, 1000])
def test_a_terminal_sees_c1_controls_escaped_and_text_kept(size: int) -> None:
    """The one-byte CSI (U+009B, `\\xc2\\x9b` in UTF-8, or a stray `\\x9b`) is obeyed like
    `ESC [` by terminals that take C1: shown as `cat -v` does; UTF-8 text is untouched."""
    log = "é ─█ 🙂 \u009b2J x\u0090q\u009c ".encode() + b"\x9b31m\xc2\xa0end\n"
    pieces = [log[i : i + size] for i in range(0, len(log), size)]
    shown = io.BytesIO()
    follow_logs(
        [NodeStream(0, "/n", Host(list(pieces)))], Output(shown, terminal=True), follow=True
    )
    assert shown.getvalue() == "é ─█ 🙂 M-^[2J xM-^Pq".encode() + b"M-^\\ M-^[31m\xc2\xa0end\n"
    kept = io.BytesIO()
    follow_logs([NodeStream(0, "/n", Host(pieces))], Output(kept, terminal=False), follow=True)
    assert kept.getvalue() == log
