"""The node's supervisor: the process `start` forks, which starts the job in its runtime,
records it, cares for its checkpoints, keeps its limits while it runs and records its end.
Standard library only; shipped beside the agent (`gpujob-agent.py`), which imports it only in
the forked process, so a client's `status` or `read` loads none of this.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_os import read_json, start_ticks
from ckpt_rclone import remote_env
from limits import TIMED_OUT_CODE, Limits, LimitWatch, timed_out_reason
from log_read import last_line
from metrics import GpuProbe
from metrics import start as start_metrics
from rank_memory import sampler
from reserve import LOG_FLAGS, make_reserve, say_in_log, write_status
from runtimes import BareJob, ContainerJob, StartFailed, job_for
from states import TIMED_OUT
from stopping import MARKER, STATUS, log_line

STATUS_LOCK = threading.Lock()
"""The wait loop and the checkpoint watcher both write status.json."""


def supervise(node_dir: Path, given: dict[str, dict[str, str]] | None = None) -> int:
    """Start the node's job in its runtime, record it, care for its checkpoints and keep its
    limits while it runs, record its end. Returns 0: the job's own code is in the status.
    The job's secrets are in its environment (a container's `docker run` takes them from
    there by name), from `given` or a file deleted once read (SLURM's)."""
    config = read_json(node_dir / "job.json")
    # First: under SLURM, USR1 (the time limit's warning) may come as soon as `start` gave out
    # this pid, and its default would end the supervisor. Remembered here, acted on once the
    # job runs (_stop_on_usr1).
    usr1 = threading.Event()
    if config.get("slurm"):
        signal.signal(signal.SIGUSR1, lambda *_: usr1.set())
    given = given or {}
    env = dict(os.environ, **given.get("secrets", {}), **{MARKER: str(node_dir)})
    for key, into in (("secrets_file", env), ("notify_file", given.setdefault("notify", {}))):
        if config.get(key):  # SLURM's: no stdin of gpujob's at the start
            into.update(read_json(node_dir / config[key]))
            (node_dir / config[key]).unlink(missing_ok=True)
    job = job_for(node_dir, config, node_dir / config.get("log", "job.log"))
    status: dict[str, Any] = {
        "job_id": config.get("job_id"),
        "node_rank": config.get("node_rank"),
        "supervisor_pid": os.getpid(),
        "supervisor_start": start_ticks(os.getpid()),
        "started_at": time.time(),
        "slurm_restart": int(os.environ.get("SLURM_RESTART_COUNT") or 0),  # requeue.py
    }
    # Seen before a start that may take long (a `docker run` pulling): the supervisor is
    # alive from now on (autostop's busy check, status_of), still `starting` for `start`.
    asked = read_json(node_dir / STATUS).get("requested_at", status["started_at"])
    make_reserve(node_dir)
    storage = remote_env(node_dir, config.get("checkpoints") or {}, given.get("storage"))
    buckets = _buckets(node_dir, config, storage)
    write_status(node_dir, {**status, "state": "starting", "requested_at": asked,
                            **({"fetching": True} if buckets else {})})  # fmt: skip
    try:
        failed = buckets.fetch() if buckets else None  # before the job, so before `setup`
        if failed:
            raise StartFailed(1, failed)
        status.update(job.start(env))
    except StartFailed as failed:
        said = last_line(node_dir) if config.get("runtime") == "docker" else None
        reason = f"{failed.reason}: {said}" if said else failed.reason
        status.update(state="failed", exit_code=failed.code, ended_at=time.time(),
                      reason=reason)  # fmt: skip
        job.end()  # a container `docker run` created and could not start holds the secrets
        write_status(node_dir, status)  # after: whoever sees the failure sees it gone
        _notify(node_dir, config, given, status)
        return failed.code
    status["state"] = "running"
    write_status(node_dir, status)
    if (node_dir / "cancel-requested").exists():  # it came while the start was under way
        log_line(node_dir, "cancel: it came during the start; stopping the job")
        job.stop(float(config.get("grace_s", 30)))
    try:
        watch = _checkpoint_watch(node_dir, config, job, status, env, storage,
                                  buckets.saved if buckets else None)  # fmt: skip
    except Exception as err:  # the job runs on without checkpoint care, and says so
        log_line(node_dir, f"checkpoint care is off: {type(err).__name__}: {err}")
        watch = None
    gpus = GpuProbe()  # one nvidia-smi sample for the idle rule and the metrics
    limits = _limit_watch(node_dir, config, job, status, gpus.utilization)
    recorder, *metrics = start_metrics(node_dir, config, gpus, _publisher(node_dir, status))
    _stop_on_usr1(node_dir, config, job, status, usr1)
    if config.get("lifecycle_hooks"):  # shipped with them: a SIGTERM that is no cancel
        from lifecycle_hooks import on_host_going

        on_host_going(node_dir, config, job.stop)
    code = job.wait(recorder.with_rss(sampler(node_dir, status, STATUS_LOCK)))
    if job.reason:  # e.g. a container that ended before its script ran (runtimes.py)
        status["reason"] = job.reason
    _stop_watch(limits)
    _stop_watch((metrics[0], metrics[1]))
    _stop_watch(watch)
    if buckets:  # after the last checkpoint's care, before the end is recorded
        buckets.finish()
    job.end()  # before the end is recorded: whoever sees the job ended sees no container
    _record_end(node_dir, status, code, config.get("checkpoints"))
    _notify(node_dir, config, given, status)
    return 0


def _publisher(node_dir: Path, status: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """Merges a watcher's update into status.json (the watchers and the wait loop share it)."""

    def publish(update: dict[str, Any]) -> None:
        with STATUS_LOCK:
            status.update(update)
            write_status(node_dir, status)

    return publish


def _notify(node_dir: Path, config: dict[str, Any], given: dict, status: dict[str, Any]) -> None:
    """The end posted to the job's webhooks (notify.py, shipped only where job.json asks)."""
    if config.get("notify"):
        import notify

        notify.notify_end(node_dir, config, given.get("notify"), status,
                          lambda text: log_line(node_dir, text))  # fmt: skip


def _stop_watch(watch: tuple[threading.Event, threading.Thread] | None) -> None:
    if watch is not None:
        watch[0].set()
        watch[1].join()


def _record_end(
    node_dir: Path, status: dict[str, Any], code: int, care: dict[str, Any] | None
) -> None:
    """After the checkpoint care's final pass: a timed-out node's reason names its last
    checkpoint as that pass left it."""
    cancelled = (node_dir / "cancel-requested").exists()
    with STATUS_LOCK:
        status.update(
            state="cancelled" if cancelled else ("succeeded" if code == 0 else "failed"),
            exit_code=code,
            ended_at=time.time(),
        )
        if status.get("stopped_reason"):
            status.update(state="failed", reason=status["stopped_reason"])
        if status.get("timed_out"):  # the time limit stopped it; the program's code is kept
            status.update(state=TIMED_OUT, program_exit_code=code, exit_code=TIMED_OUT_CODE,
                          reason=timed_out_reason(status, care))  # fmt: skip
        write_status(node_dir, status)


def _limit_watch(
    node_dir: Path,
    config: dict[str, Any],
    job: BareJob | ContainerJob,
    status: dict[str, Any],
    query: Callable[[], dict[int, float]],
) -> tuple[threading.Event, threading.Thread] | None:
    """`max_duration` and `resources.idle_gpu`, kept by a thread of limits.py's."""
    limits = Limits.from_config(config)
    if not limits.any:
        return None

    publish = _publisher(node_dir, status)

    def ending() -> bool:
        return (node_dir / "cancel-requested").exists() or bool(status.get("stopped_reason"))

    watch = LimitWatch(limits, lambda text: log_line(node_dir, text), publish, job.stop, ending,
                       query)  # fmt: skip
    done = threading.Event()
    thread = threading.Thread(target=watch.run, args=(done,), name="gpujob-limits")
    thread.start()
    return done, thread


def _stop_on_usr1(
    node_dir: Path,
    config: dict[str, Any],
    job: BareJob | ContainerJob,
    status: dict[str, Any],
    usr1: threading.Event,
) -> None:
    """Under SLURM (job.json's `slurm`), USR1 is the time limit's warning (`sbatch
    --signal`, passed on by the node step): the job is stopped with its grace as at its own
    time limit, so the checkpoint care's final pass saves and syncs before SLURM's SIGKILL,
    and the node ends `timed out` naming SLURM's limit. A daemon thread waits for the signal
    (the handler, installed first thing in supervise, only sets `usr1`)."""
    slurm = config.get("slurm")
    if not slurm:
        return
    grace = float(config.get("grace_s", 30))

    def time_up() -> None:
        usr1.wait()
        with STATUS_LOCK:  # checked and set together: a second USR1 does not stop twice
            if (node_dir / "cancel-requested").exists() or status.get("timed_out"):
                return
            status.update(
                timed_out=slurm.get("time_limit", "?"),
                timed_out_by="SLURM's time limit, --time; stopped at its USR1 warning",
            )
            write_status(node_dir, status)
        log_line(node_dir, f"SLURM's time limit is near (USR1, {slurm.get('warn_s', '?')} s "
                 f"before it): stopping the job (SIGTERM, grace {grace:g} s)")  # fmt: skip
        job.stop(grace)

    threading.Thread(target=time_up, name="gpujob-usr1", daemon=True).start()


def _checkpoint_watch(
    node_dir: Path,
    config: dict[str, Any],
    job: BareJob | ContainerJob,
    status: dict[str, Any],
    env: dict[str, str],
    storage: dict[str, str],
    saved: Callable[[str], None] | None = None,
) -> tuple[threading.Event, threading.Thread] | None:
    """Retention, sync, hooks and disk care (ckpt_watch.py, shipped beside this file), with
    the S3 remote's keys; `saved` is told of each new checkpoint (bucket uploads)."""
    care = config.get("checkpoints")
    if not care:
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import ckpt_watch

    log_fd = os.open(node_dir / config.get("log", "job.log"), LOG_FLAGS, 0o644)

    def say(text: str) -> None:
        say_in_log(log_fd, [text])

    publish = _publisher(node_dir, status)

    def stop_job(reason: str) -> None:
        publish({"stopped_reason": reason})
        job.stop(float(config.get("grace_s", 30)))

    watcher = ckpt_watch.Watcher(
        config=ckpt_watch.WatchConfig.from_json(care, node_dir),
        log_fd=log_fd, say=say, publish=publish, stop_job=stop_job, pause_job=job.pause,
        env=storage,
        hook_env={**env, **care.get("hook_env", {})}, saved=saved or (lambda _: None),
    )  # fmt: skip
    done = threading.Event()
    return done, ckpt_watch.run_in_thread(watcher, done)


def _buckets(node_dir: Path, config: dict[str, Any], storage: dict[str, str]) -> Any:
    """Bucket file_mounts (bucket_mounts.py, shipped beside this file only for a job that
    has them), or None."""
    if not (config.get("checkpoints") or {}).get("buckets"):
        return None
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import bucket_mounts

    return bucket_mounts.from_config(node_dir, config, storage)
