"""A job's time and GPU-idle limits, kept by its agent on the host: `max_duration` and
`resources.idle_gpu` (job.json's `max_duration_s` and `idle_gpu`). Standard library only;
shipped beside the agent, which imports it as a sibling module.

One thread beside the supervisor's wait loop (`LimitWatch.run`):
- at `max_duration_s` after the start, a line in the job log, then the job is stopped with
  its grace (SIGTERM, SIGKILL after it); the checkpoint care's final pass syncs what is
  complete, as on any end, and the node ends `timed out` with exit code 124;
- every few seconds, `nvidia-smi`'s utilization of every GPU of the host; all of them under
  `below_percent` for `minutes` is warned about in the log and `status.json` (the warning
  clears once a GPU is busy again), or, with `action: stop`, warned about at half the window
  and the job stopped at its end, with the reason (the node ends `failed`).
A host without `nvidia-smi` (or whose `nvidia-smi` fails) gets one line saying the idle
policy is off and why; the time limit holds everywhere.

Nothing here imports a sibling: the client imports this module too (`launcher.agent.limits`).
"""

from __future__ import annotations

import re
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

TIMED_OUT_CODE = 124
"""What a timed-out job exits with: GNU `timeout`'s code for a command it stopped."""
QUERY = ("nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits")
SAMPLE_EVERY_S = 5.0
"""The idle watcher's sampling interval at most; a short window samples more often."""
SAMPLES_PER_WINDOW = 6
UNITS = (("d", 86400), ("h", 3600), ("m", 60))
WARN, ACT, BUSY = "warn", "act", "busy"


def show_duration(seconds: float) -> str:
    """The shortest exact form a spec's duration reads back as: 1800 -> `30m`, 90 -> `90s`."""
    for unit, size in UNITS:
        count = seconds / size
        if count >= 1 and count == int(count):
            return f"{int(count)}{unit}"
    return f"{seconds:g}s"


class GpuQueryFailed(Exception):
    """`nvidia-smi` cannot say how busy the GPUs are here; the message says why."""


def parse_utilization(text: str) -> dict[int, float]:
    """`nvidia-smi`'s CSV rows (`0, 87`) as {GPU index: percent}. A GPU that reports no
    utilization (`[N/A]`, as some MIG and vGPU setups do) is left out."""
    found = {}
    for line in text.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and re.fullmatch(r"[0-9.]+", parts[1]):
            found[int(parts[0])] = float(parts[1])
    return found


def query_gpus(timeout_s: float = 10.0) -> dict[int, float]:
    """Each GPU's utilization now, from one `nvidia-smi` call."""
    try:
        done = subprocess.run(QUERY, capture_output=True, text=True, timeout=timeout_s)
    except FileNotFoundError:
        raise GpuQueryFailed("nvidia-smi is not installed on this host") from None
    except (OSError, subprocess.TimeoutExpired) as err:
        raise GpuQueryFailed(f"nvidia-smi did not answer: {err}") from None
    if done.returncode != 0:
        said = (done.stdout + done.stderr).strip().splitlines()
        raise GpuQueryFailed(f"nvidia-smi failed: {said[-1] if said else done.returncode}")
    found = parse_utilization(done.stdout)
    if not found:
        raise GpuQueryFailed("nvidia-smi reports no GPU utilization here")
    return found


@dataclass
class IdleTracker:
    """Samples in, decisions out (no clock, no GPU: `now` comes with each sample). `WARN`
    once every GPU has been under `below_percent` for `warn_after_s`, `ACT` once they have
    been for `act_after_s` (None: never), `BUSY` at the first sample with a busy GPU after a
    `WARN`; each once per idle stretch. A sample with no GPU in it decides nothing."""

    below_percent: float
    warn_after_s: float
    act_after_s: float | None = None
    idle_since: float | None = None
    warned: bool = False
    acted: bool = False

    def add(self, now: float, utilization: Mapping[int, float]) -> str | None:
        if not utilization:
            return None
        if any(percent >= self.below_percent for percent in utilization.values()):
            was_warned = self.warned
            self.idle_since, self.warned, self.acted = None, False, False
            return BUSY if was_warned else None
        if self.idle_since is None:
            self.idle_since = now
        idle_for = now - self.idle_since
        if self.act_after_s is not None and idle_for >= self.act_after_s and not self.acted:
            self.acted = self.warned = True
            return ACT
        if idle_for >= self.warn_after_s and not self.warned:
            self.warned = True
            return WARN
        return None


@dataclass(frozen=True)
class IdlePolicy:
    below_percent: float
    minutes: float
    action: str

    @property
    def window_s(self) -> float:
        return self.minutes * 60

    def tracker(self) -> IdleTracker:
        """`warn`: warned about at the window's end. `stop`: warned about at half of it, so
        the log and `status` say what is coming, and stopped at its end."""
        if self.action == "stop":
            return IdleTracker(self.below_percent, self.window_s / 2, self.window_s)
        return IdleTracker(self.below_percent, self.window_s)

    @property
    def sample_every_s(self) -> float:
        """A few samples per window at least: a 15 s test window is judged within ~2.5 s."""
        return max(0.5, min(SAMPLE_EVERY_S, self.window_s / SAMPLES_PER_WINDOW))


@dataclass(frozen=True)
class Limits:
    max_duration_s: float | None
    idle: IdlePolicy | None
    grace_s: float

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Limits:
        idle = config.get("idle_gpu")
        policy = None
        if idle:
            policy = IdlePolicy(float(idle.get("below_percent", 5)), float(idle["minutes"]),
                                str(idle.get("action", "warn")))  # fmt: skip
        limit = config.get("max_duration_s")
        return cls(float(limit) if limit else None, policy, float(config.get("grace_s", 30)))

    @property
    def any(self) -> bool:
        return self.max_duration_s is not None or self.idle is not None


Say = Callable[[str], None]
Publish = Callable[[dict[str, Any]], None]


class LimitWatch:
    """`say` writes a line to the job log; `publish` merges a dict into status.json;
    `stop_job(grace_s)` stops the job and returns once it has ended or been killed;
    `ending()` says the job is already being stopped (a cancel, the checkpoint care), when a
    limit has nothing left to do. Callables, so a test can drive it with a fake GPU query."""

    def __init__(
        self,
        limits: Limits,
        say: Say,
        publish: Publish,
        stop_job: Callable[[float], None],
        ending: Callable[[], bool],
        query: Callable[[], Mapping[int, float]] = query_gpus,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limits, self.say, self.publish = limits, say, publish
        self.stop_job, self.ending, self.query, self.clock = stop_job, ending, query, clock
        self.tracker = limits.idle.tracker() if limits.idle else None

    def run(self, done: threading.Event) -> None:
        """Until `done` (the job ended) or a limit has stopped the job."""
        started = self.clock()
        deadline = None
        limit = self.limits.max_duration_s
        if limit is not None:
            deadline = started + limit
            self.publish({"time_limit": {"max_duration_s": limit, "ends_at": time.time() + limit}})
        next_sample = started
        while deadline is not None or self.tracker is not None:
            wakes = [deadline, next_sample if self.tracker else None]
            wake = min(t for t in wakes if t is not None)
            if done.wait(max(0.0, wake - self.clock())):
                return
            now = self.clock()
            if deadline is not None and now >= deadline:
                self._time_up()
                return
            if self.tracker is not None and now >= next_sample:
                if self._sample(now):
                    return
                next_sample = now + self.limits.idle.sample_every_s  # type: ignore[union-attr]

    def _time_up(self) -> None:
        if self.ending():
            return
        assert self.limits.max_duration_s is not None
        shown = show_duration(self.limits.max_duration_s)
        self.publish({"timed_out": shown})
        self.say(f"time limit {shown} reached (max_duration): stopping the job "
                 f"(SIGTERM, grace {self.limits.grace_s:g} s)")  # fmt: skip
        self.stop_job(self.limits.grace_s)

    def _sample(self, now: float) -> bool:
        """One look at the GPUs; True once the job has been stopped (or the policy is off)."""
        assert self.tracker is not None and self.limits.idle is not None
        policy = self.limits.idle
        try:
            utilization = self.query()
        except GpuQueryFailed as err:
            self.say(f"GPU idle policy (resources.idle_gpu) is off: {err}")
            self.publish({"gpu_idle": {"off": str(err)}})
            self.tracker = None
            return False
        decision = self.tracker.add(now, utilization)
        under = f"every GPU under {policy.below_percent:g}%"
        if decision == BUSY:
            busiest = max(utilization, key=lambda gpu: utilization[gpu])
            self.say(f"GPU {busiest} busy again ({utilization[busiest]:g}%): "
                     "idle warning cleared")  # fmt: skip
            self.publish({"gpu_idle": None})
        elif decision == WARN:
            idle_for = now - (self.tracker.idle_since or now)
            since = time.time() - idle_for
            what = "the job goes on (action: warn)"
            if policy.action == "stop":
                what = f"it is stopped at {show_duration(policy.window_s)} idle (action: stop)"
            self.say(f"GPU idle warning: {under} for {show_duration(round(idle_for))} "
                     f"(resources.idle_gpu); {what}")  # fmt: skip
            when = time.strftime("%H:%M:%S", time.localtime(since))
            warning = f"GPUs idle ({under}) since {when}"
            self.publish({"gpu_idle": {"since": since, "warning": warning}})
        elif decision == ACT:
            if self.ending():
                return True
            reason = (f"stopped by gpujob: {under} for {show_duration(policy.window_s)} "
                      "(resources.idle_gpu, action: stop)")  # fmt: skip
            self.publish({"stopped_reason": reason})
            self.say(f"{reason}; stopping the job (SIGTERM, grace {self.limits.grace_s:g} s)")
            self.stop_job(self.limits.grace_s)
            return True
        return False


def timed_out_reason(status: Mapping[str, Any], care: Mapping[str, Any] | None) -> str:
    """Why a node the time limit stopped ended: the limit, and the last checkpoint as the
    checkpoint care's final pass left it (`checkpoints`, `sync` in the status)."""
    by = status.get("timed_out_by") or "max_duration"
    return f"timed out after {status['timed_out']} ({by}){checkpoint_note(status, care)}"


def checkpoint_note(status: Mapping[str, Any], care: Mapping[str, Any] | None) -> str:
    """`; last checkpoint: step 140 (checkpoint-140), synced to t:qs`, or that there is none;
    empty where the node keeps no checkpoints (only the first node on a host does)."""
    if not care:
        return ""
    latest = (status.get("checkpoints") or {}).get("latest")
    if not latest:
        return "; no complete checkpoint was saved"
    step = re.search(r"(\d+)$", latest)  # the name carries its step last (ckpt_store.NAME)
    note = f"; last checkpoint: step {step.group(1)} ({latest})" if step else f"; last: {latest}"
    remote = care.get("sync_remote")
    if not remote:
        return f"{note} on the host (no checkpoints.sync_to)"
    synced = latest in ((status.get("sync") or {}).get("synced") or [])
    return note + (f", synced to {remote}" if synced else f", NOT synced to {remote} (see the log)")
