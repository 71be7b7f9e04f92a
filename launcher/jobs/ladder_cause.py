"""What a ladder rung measured and, for the rung that failed, why, as far as gpujob can tell
from the rung's own output: the OOM killer, `std::bad_alloc`, a host allocation refused
(`MemoryError`, torch's CPU allocator), CUDA out of memory, a collective's timeout (NCCL,
gloo), or a rank's own traceback, with that rank's last lines. Pure text in, words out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from launcher.jobs.follow import PEER_LOST, crash_lines

OOM_KILLER = "OOM killer"
CAUSES: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("CUDA out of memory", re.compile(r"CUDA out of memory|torch\.(cuda\.)?OutOfMemoryError")),
    ("std::bad_alloc", re.compile(r"std::bad_alloc")),
    ("host memory refused (MemoryError)", re.compile(r"^\s*(\[rank\d+\]:\s*)?MemoryError\b", re.M)),
    ("host memory refused (CPU allocator)",
     re.compile(r"DefaultCPUAllocator: (can't allocate memory|not enough memory)")),
    ("NCCL timeout", re.compile(r"Watchdog caught collective operation timeout|NCCL.*(timed? ?out)"
                                r"|ProcessGroupNCCL.*timeout", re.I)),
    ("gloo timeout", re.compile(r"gloo.*Timed out waiting", re.I)),
)  # fmt: skip
"""Most specific first: a CUDA OOM's traceback is a traceback too."""
SIGKILLED = re.compile(r"Signal 9 \(SIGKILL\)|exitcode\s*:\s*-9\b")
KILLED_PID = re.compile(r"exitcode\s*:\s*-9 \(pid: (\d+)\)")
ROOT_RANK = re.compile(r"^\s*rank\s*:\s*(\d+)", re.M)
OWN_RANK = re.compile(r"^\[rank(\d+)\]:", re.M)
LAST_ERROR = re.compile(r"^(?:\[rank\d+\]:\s*)?([A-Za-z_][\w.]*(?:Error|Exception)\b.*)$", re.M)
OOM_RECORD = re.compile(
    r"Out of memory: Killed process|oom-kill|oom_kill [1-9]|Memory cgroup out of memory"
)
STOPPING = re.compile(r"Sending process \d+ closing signal")
"""torchrun stopping the other ranks: its noise, not the failing rank's words."""
UNIT = r"(?P<unit>tokens|samples|it|imgs|images)/s"
RATES = (re.compile(UNIT + r"\s*[=:]?\s*(?P<n>\d+(?:\.\d+)?)"),
         re.compile(r"(?P<n>\d+(?:\.\d+)?)\s*" + UNIT))  # fmt: skip
"""`tokens/s 1234` (the quickstart's) or `1234 samples/s`."""


@dataclass(frozen=True)
class Cause:
    what: str
    rank: str | None
    lines: tuple[str, ...]

    def line(self) -> str:
        rank = f" on rank {self.rank}" if self.rank is not None else ""
        return f"{self.what}{rank}"


def classify(text: str, exit_code: int | None, oom_record: str = "", before: str = "") -> Cause:
    """The cause of one failed node's end from its log, its exit code and what the host's
    kernel said (`oom_record`: dmesg lines and cgroup memory.events, where readable; lines
    already in `before`, the host's record after the rung before, are an older kill's unless
    they name the killed rank's pid)."""
    rank = _failing_rank(text)
    lines = _last_lines(text, rank)
    killed = exit_code in (137, -9) or bool(SIGKILLED.search(text))
    record = _oom_line(text, oom_record, before) if killed else None
    if record is not None:
        return Cause(f"{OOM_KILLER} (SIGKILL; the kernel: {record.strip()[-120:]})", rank, lines)
    for what, pattern in CAUSES:
        if pattern.search(text):
            return Cause(what, rank, lines)
    if killed:
        return Cause("SIGKILL (no OOM-killer record readable: dmesg, memory.events)", rank, lines)
    own = "\n".join(lines)
    errors = LAST_ERROR.findall(own)
    if errors and not PEER_LOST.search(own):
        return Cause(f"traceback: {errors[-1].strip()[:160]}", rank, lines)
    return Cause(f"exit code {exit_code}", rank, lines)


def _oom_line(text: str, record: str, before: str) -> str | None:
    """The kernel's word on this kill: a dmesg line naming the killed rank's pid (torchrun's
    root cause gives it), else an OOM line the host did not have after the rung before."""
    found = KILLED_PID.search(_root_cause(text))
    older = set(before.splitlines())
    for line in record.splitlines():
        named = found is not None and re.search(rf"Killed process {found.group(1)}\b", line)
        if OOM_RECORD.search(line) and (named or line not in older):
            return line
    return None


def _root_cause(text: str) -> str:
    """torchrun's summary of the first failure (the ranks it stopped are listed before it)."""
    _, marker, after = text.rpartition("Root Cause (first observed failure)")
    return after if marker else ""


def _failing_rank(text: str) -> str | None:
    """torchrun's root-cause summary names the rank (`rank : 2 (local_rank: 2)`); newer
    torch marks each rank's own lines `[rankN]:`."""
    found = ROOT_RANK.search(_root_cause(text)) or OWN_RANK.search(text)
    return found.group(1) if found else None


def _last_lines(text: str, rank: str | None) -> tuple[str, ...]:
    """The failing rank's own last lines, then torchrun's verdict on it (its root cause's,
    not the first rank it lists, which it stopped)."""
    lines = [line for line in crash_lines(_rank_text(text, rank)) if not STOPPING.search(line)]
    verdict = [line.strip() for line in _root_cause(text).splitlines()
               if line.strip().startswith(("rank ", "exitcode "))][:2]  # fmt: skip
    if verdict:
        lines = [line for line in lines if not line.startswith(("rank ", "exitcode "))]
    return (*lines, *verdict)


def _rank_text(text: str, rank: str | None) -> str:
    """The rank's own lines where torch marked them, else the whole log's."""
    if rank is None or f"[rank{rank}]:" not in text:
        return text
    return "\n".join(line for line in text.splitlines()
                     if line.startswith(f"[rank{rank}]:") or not OWN_RANK.match(line))  # fmt: skip


def throughput(text: str) -> str:
    """The job's steady throughput if it prints one: a `steady` line's, else the last rate in
    tokens, samples or images; `it/s` only when it prints no other (a progress bar's may be a
    save's: a rung stopped at its checkpoint ends on one)."""
    found = []
    for line in text.splitlines():  # a line's `UNIT/s N` first: `step 4/4 samples/s 104`
        matches = list(RATES[0].finditer(line)) or list(RATES[1].finditer(line))
        found += [(match, line) for match in matches]
    if not found:
        return "-"
    steady = [pair for pair in found if "steady" in pair[1].lower()]
    counted = [pair for pair in found if pair[0].group("unit") != "it"]
    match = (steady or counted or found)[-1][0]
    return f"{float(match.group('n')):.0f} {match.group('unit')}/s"


def size(value: int | None) -> str:
    if not value:
        return "-"
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if value >= 1 << shift:
            return f"{value / (1 << shift):.1f}{unit}"
    return f"{value}B"


def per_rank(peaks: dict[str, int]) -> str:
    """`0:412.0M 1:398.5M`, in rank order; `-` when nothing was sampled."""
    if not peaks:
        return "-"
    return " ".join(f"{rank}:{size(peaks[rank])}" for rank in sorted(peaks, key=int))
