"""The job's peak memory in its status, the whole tree's and each rank's (`submit --ladder`'s
table shows memory per rank, and the rung before a failure is read from it).

A rank is the RANK torchrun (or deepspeed, accelerate) gives each worker; the worker's own
children (a data loader, a kernel compile) inherit it, so their memory counts for that rank.
Where nvidia-smi exists, each rank's GPU memory is sampled too, at most every 2 s (a call
takes tens of milliseconds). Standard library only: shipped beside the agent.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_os import rss_bytes
from reserve import write_status

WRITE_EVERY_S = 5.0
GPU_EVERY_S = 2.0


def rank_of(pid: int) -> str | None:
    """The RANK in the process's environment (None: not a rank, or unreadable)."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(b"RANK="):
            return entry[5:].decode(errors="replace") or None
    return None


def by_rank(pids: list[int], known: dict[int, str | None]) -> dict[str, list[int]]:
    """The processes grouped by their rank; `known` caches each pid's (a process's
    environment does not change once it runs)."""
    ranks: dict[str, list[int]] = {}
    for pid in pids:
        if pid not in known:
            known[pid] = rank_of(pid)
        rank = known[pid]
        if rank is not None:
            ranks.setdefault(rank, []).append(pid)
    return ranks


def gpu_bytes_by_pid() -> dict[int, int]:
    """Each process's GPU memory as nvidia-smi reports it; empty without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=10, check=False,
        ).stdout  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return {}
    used: dict[int, int] = {}
    for line in out.splitlines():
        pid, _, mib = line.partition(",")
        if pid.strip().isdigit() and mib.strip().isdigit():
            used[int(pid)] = used.get(int(pid), 0) + int(mib) * (1 << 20)
    return used


def _raise(peaks: dict[str, int], values: dict[str, int]) -> dict[str, int]:
    return {**peaks, **{k: max(v, peaks.get(k, 0)) for k, v in values.items()}}


def sampler(
    node_dir: Path, status: dict[str, Any], lock: threading.Lock
) -> Callable[[list[int]], None]:
    """Called with the job's processes about once a second: keeps the peaks in `status`
    (`peak_rss_bytes`, `peak_rss_by_rank`, `peak_gpu_by_rank`), written every 5 s at most."""
    last_write = last_gpu = 0.0
    known: dict[int, str | None] = {}

    def sample(pids: list[int]) -> None:
        nonlocal last_write, last_gpu
        status["peak_rss_bytes"] = max(rss_bytes(pids), status.get("peak_rss_bytes", 0))
        ranks = by_rank(pids, known)
        if ranks:
            rss = {rank: rss_bytes(members) for rank, members in ranks.items()}
            status["peak_rss_by_rank"] = _raise(status.get("peak_rss_by_rank", {}), rss)
        now = time.monotonic()
        if ranks and now - last_gpu >= GPU_EVERY_S:
            last_gpu = now
            used = gpu_bytes_by_pid()
            if used:
                gpu = {rank: sum(used.get(p, 0) for p in members)
                       for rank, members in ranks.items()}  # fmt: skip
                status["peak_gpu_by_rank"] = _raise(status.get("peak_gpu_by_rank", {}), gpu)
        if now - last_write > WRITE_EVERY_S:
            with lock:
                write_status(node_dir, status)
            last_write = now

    return sample
