"""A node's metrics, recorded by its agent beside the job's log: the GPUs' utilisation and
memory, the job tree's host memory, and the job's own figures, every few seconds.

The job's figures come from the JSON-lines file the program may write (`$GPUJOB_METRICS`,
one object per step, any keys: numbers are kept), from log lines matched by the spec's
`metrics.from_log` pattern (named groups; `step` names the step), and from the TensorBoard
event files under `metrics.tensorboard` (tfevents.py). The record is
`metrics.jsonl` in the node's folder: one JSON object a line, `{"t", "kind": "step", ...}`
for the job's figures and `{"t", "kind": "sys", "gpu_util", "gpu_mem_mib", "rss_mib"}` for
the machine's. Past `max_bytes` it is thinned (older records every other one, the newest
quarter whole) and rewritten whole, so a week-long job keeps its whole curve in a bounded
file. A summary (the headline figure, its trend, GPU busy %) goes into status.json, where
`gpujob status` reads it.

Standard library only; shipped beside the agent, which imports it as a sibling module.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # shipped siblings, as on a host
from limits import GpuQueryFailed
from rank_memory import rss_bytes
from tfevents import EventFolder

RECORD = "metrics.jsonl"
"""The agent's record, beside job.log; shipped beside the logs as `node-N.metrics.jsonl`."""
JOB_FILE = "metrics-job.jsonl"
"""Where the program writes its own figures: `$GPUJOB_METRICS` names it (the node's folder)."""
EVERY_S = 5.0
MAX_BYTES = 2 << 20
READ_AT_MOST = 4 << 20
"""Bytes read from a source per pass: a burst is caught up over the next passes."""
QUERY = ("nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used",
         "--format=csv,noheader,nounits")  # fmt: skip
GPU_TRIES = 3
"""Failed `nvidia-smi` calls in a row after which the recorder stops asking."""
NOT_FIGURES = ("t", "kind")
HEADLINE_FIRST = ("loss", "train_loss", "train/loss")
THROUGHPUT = ("tokens_per_s", "tokens/s", "tokens_per_sec", "train/tokens_per_s")
"""The figure `status` shows as the job's speed, where the job records one."""


def parse_gpus(text: str) -> dict[int, tuple[float, float]]:
    """`nvidia-smi`'s CSV rows (`0, 87, 1234`) as {GPU: (utilisation %, memory MiB)}; a GPU
    that reports no utilisation (`[N/A]`, some MIG setups) is left out."""
    found = {}
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 3 or not parts[0].isdigit() or not _number(parts[1]):
            continue
        found[int(parts[0])] = (float(parts[1]), float(parts[2]) if _number(parts[2]) else 0.0)
    return found


def _number(text: str) -> bool:
    return re.fullmatch(r"[0-9]+(\.[0-9]+)?", text) is not None


class GpuProbe:
    """One `nvidia-smi` call serves the metrics and the idle-GPU rule (limits.py) alike:
    a sample younger than `fresh_s` is reused. A host without `nvidia-smi` is asked once."""

    def __init__(self, fresh_s: float = 2.0, query: tuple[str, ...] = QUERY) -> None:
        self.fresh_s, self.query = fresh_s, query
        self.lock = threading.Lock()
        self.last: tuple[float, dict[int, tuple[float, float]]] | None = None
        self.absent: str | None = None

    def sample(self) -> dict[int, tuple[float, float]]:
        with self.lock:
            if self.absent:
                raise GpuQueryFailed(self.absent)
            if self.last and time.monotonic() - self.last[0] < self.fresh_s:
                return self.last[1]
            found = parse_gpus(self._ask())
            if not found:
                raise GpuQueryFailed("nvidia-smi reports no GPU utilization here")
            self.last = (time.monotonic(), found)
            return found

    def _ask(self) -> str:
        try:
            done = subprocess.run(self.query, capture_output=True, text=True, timeout=10)
        except FileNotFoundError:
            self.absent = "nvidia-smi is not installed on this host"
            raise GpuQueryFailed(self.absent) from None
        except (OSError, subprocess.TimeoutExpired) as err:
            raise GpuQueryFailed(f"nvidia-smi did not answer: {err}") from None
        if done.returncode != 0:
            said = (done.stdout + done.stderr).strip().splitlines()
            raise GpuQueryFailed(f"nvidia-smi failed: {said[-1] if said else done.returncode}")
        return done.stdout

    def utilization(self) -> dict[int, float]:
        """The idle-GPU rule's query (LimitWatch's `query`)."""
        return {gpu: util for gpu, (util, _) in self.sample().items()}


def figures(raw: dict[str, Any]) -> dict[str, float | int]:
    """The numbers of one step's object (strings and nested values are left out); `step`
    as an integer. A bool is no figure."""
    out: dict[str, float | int] = {}
    for key, value in raw.items():
        if key in NOT_FIGURES or isinstance(value, bool):
            continue
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                continue
        if isinstance(value, int | float) and math.isfinite(value):
            out[str(key)[:64]] = int(value) if key == "step" else value
    return out


def from_log(pattern: re.Pattern[str], line: str) -> dict[str, float | int] | None:
    """A log line's figures by the pattern's named groups, or None where it does not match
    or matches no number."""
    match = pattern.search(line)
    if match is None:
        return None
    found = figures({k: v for k, v in match.groupdict().items() if v is not None})
    return found or None


class Tail:
    """New whole lines of a file that grows, from where the last read stopped (a line
    still being written waits for its newline)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset = path, 0

    def lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as source:
                source.seek(self.offset)
                data = source.read(READ_AT_MOST)
        except FileNotFoundError:
            return []
        end = data.rfind(b"\n") + 1
        if end == 0 and len(data) == READ_AT_MOST:
            end = len(data)  # one line too long to keep: skipped
        self.offset += end
        text = data[:end].decode(errors="replace")
        return [part for line in text.splitlines() for part in line.split("\r") if part]


def thin(lines: list[str]) -> list[str]:
    """Every other line of the older three quarters (per kind, so the job's figures and
    the machine's thin alike), the newest quarter whole."""
    keep_from = len(lines) - len(lines) // 4
    seen: dict[str, int] = {}
    kept = []
    for index, line in enumerate(lines):
        if index >= keep_from:
            kept.append(line)
            continue
        kind = "sys" if '"kind":"sys"' in line else "step"
        seen[kind] = seen.get(kind, 0) + 1
        if seen[kind] % 2 == 1:
            kept.append(line)
    return kept


def bound(path: Path, max_bytes: int) -> None:
    """Thin the record until it is under `max_bytes`, written whole (a reader sees the old
    file or the new)."""
    try:
        if path.stat().st_size <= max_bytes:
            return
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return
    while len(lines) > 8 and sum(len(line) + 1 for line in lines) > max_bytes * 3 // 4:
        lines = thin(lines)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(line + "\n" for line in lines))
    os.replace(tmp, path)


class Recorder:
    """Reads the sources and appends to the record; `run` every `every_s` until `done`,
    then once more, so a job's last steps are in."""

    def __init__(self, node_dir: Path, config: dict[str, Any], gpus: GpuProbe,
                 publish: Callable[[dict[str, Any]], None]) -> None:  # fmt: skip
        care = config.get("metrics") or {}
        self.path = node_dir / RECORD
        self.every_s = float(care.get("every_s", EVERY_S))
        self.max_bytes = int(care.get("max_bytes", MAX_BYTES))
        self.job_file = Tail(node_dir / JOB_FILE)
        self.log = Tail(node_dir / config.get("log", "job.log"))
        self.pattern = re.compile(care["from_log"]) if care.get("from_log") else None
        board = care.get("tensorboard")  # relative to the job's workdir (plan/build.py's)
        self.events = EventFolder(node_dir.parent / "workdir" / board) if board else None
        self.gpus, self.publish = gpus, publish
        self.rss: int | None = None
        self.headline: str | None = None
        self.recent: deque[float] = deque(maxlen=20)
        self.last_step: int | None = None
        self.tokens_per_s: float | None = None
        self.published: dict[str, Any] = {}
        self.gpu_failures = 0

    def with_rss(self, sample: Callable[[list[int]], None]) -> Callable[[list[int]], None]:
        """The wait loop's sample of the job's processes (rank_memory.py keeps the peaks),
        their memory kept here too for the record."""

        def both(pids: list[int]) -> None:
            sample(pids)
            self.rss = rss_bytes(pids)

        return both

    def run(self, done: threading.Event) -> None:
        while True:
            ended = done.wait(self.every_s)
            with contextlib.suppress(OSError, ValueError):  # a full disk: the job runs on
                self.collect()
            if ended:
                return

    def collect(self) -> None:
        now = round(time.time(), 2)
        steps = [{"t": now, "kind": "step", **f} for f in self._job_figures() if f]
        records = [*steps, *self._system(now)]
        if not records:
            return
        with open(self.path, "a") as out:
            out.write("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
        bound(self.path, self.max_bytes)
        self._summarise(steps, records[-1] if records[-1]["kind"] == "sys" else None)

    def _job_figures(self) -> Iterable[dict[str, float | int]]:
        for line in self.job_file.lines():
            try:
                raw = json.loads(line)
            except ValueError:
                continue
            if isinstance(raw, dict):
                yield figures(raw)
        if self.events is not None:
            yield from self.events.steps()
        if self.pattern is not None:
            for line in self.log.lines():
                found = from_log(self.pattern, line)
                if found:
                    yield found

    def _system(self, now: float) -> list[dict[str, Any]]:
        record: dict[str, Any] = {"t": now, "kind": "sys"}
        if self.gpu_failures < GPU_TRIES:  # a host without a working nvidia-smi: let be
            try:
                gpus = self.gpus.sample()
                record["gpu_util"] = [gpus[g][0] for g in sorted(gpus)]
                record["gpu_mem_mib"] = [gpus[g][1] for g in sorted(gpus)]
                self.gpu_failures = 0
            except GpuQueryFailed:
                self.gpu_failures += 1
        if self.rss is not None:
            record["rss_mib"] = round(self.rss / (1 << 20), 1)
        return [record] if len(record) > 2 else []

    def _summarise(self, steps: list[dict[str, Any]], system: dict[str, Any] | None) -> None:
        for step in steps:
            if self.headline is None:
                self.headline = headline(step)
            if self.headline in step:
                self.recent.append(float(step[self.headline]))
            self.last_step = step.get("step", self.last_step)
            rate = next((step[k] for k in THROUGHPUT if k in step), None)
            self.tokens_per_s = rate if rate is not None else self.tokens_per_s
        summary: dict[str, Any] = {} if self.last_step is None else {"step": self.last_step}
        if self.tokens_per_s is not None:
            summary["tokens_per_s"] = self.tokens_per_s
        if self.headline and self.recent:
            summary.update(name=self.headline, value=self.recent[-1],
                           trend=trend(list(self.recent)))  # fmt: skip
        if system and system.get("gpu_util"):
            summary["gpu_util"] = round(sum(system["gpu_util"]) / len(system["gpu_util"]))
        if summary and summary != self.published:  # status.json rewritten only on a change
            self.publish({"metrics": summary})
            self.published = summary


def headline(step: dict[str, Any]) -> str | None:
    """The figure `status` shows: the loss where there is one, else the first figure."""
    names = [key for key in step if key not in (*NOT_FIGURES, "step")]
    return next((name for name in HEADLINE_FIRST if name in names), names[0] if names else None)


def trend(values: list[float]) -> str:
    """`down`, `up` or `flat`: the newest half's mean against the older half's (a change
    under 1% is flat)."""
    if len(values) < 2:
        return "flat"
    half = len(values) // 2
    old, new = sum(values[:half]) / half, sum(values[half:]) / (len(values) - half)
    if abs(new - old) <= 0.01 * max(abs(old), 1e-12):
        return "flat"
    return "down" if new < old else "up"


def start(node_dir: Path, config: dict[str, Any], gpus: GpuProbe,
          publish: Callable[[dict[str, Any]], None]) -> tuple[Recorder, threading.Event,
                                                              threading.Thread]:  # fmt: skip
    """The recorder on its own thread (the agent stops it as it stops its other watchers)."""
    try:
        recorder = Recorder(node_dir, config, gpus, publish)
    except (re.error, ValueError, TypeError):  # a job.json not from gpujob's plan: the rest runs
        recorder = Recorder(node_dir, {"log": config.get("log", "job.log")}, gpus, publish)
    done = threading.Event()
    thread = threading.Thread(target=recorder.run, args=(done,), name="gpujob-metrics")
    thread.start()
    return recorder, done, thread
