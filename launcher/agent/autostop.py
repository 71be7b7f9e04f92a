#!/usr/bin/env python3
"""gpujob autostop: a rented host that nobody uses ends itself. Standard library only.

`gpujob up --autostop 30m` ships this file to the host's `~/.gpujob/autostop/` (as
`gpujob-autostop.py`, with agent_os.py, autostop_busy.py and autostop_call.py beside it)
and starts it detached, in a session of its own: it goes on when the SSH session ends and
when the user's machine is off. Once the host has had no running gpujob job and no SSH
session for the window, it writes a line in `~/.gpujob/autostop.log` and asks the cloud to
end the instance (autostop_call.py): Lambda terminate, Vast destroy (or stop), then reads
the instance back, retried with backoff until the cloud shows it ended (whatever goes wrong
on the way is logged and tried again: a watcher that stopped would leave the host billing).
The key is read at the moment of the call from its 0600 file (Lambda: the user's key,
opt-in; Vast: the instance's own `CONTAINER_API_KEY`, which can only manage that one
instance, copied there by the onstart): never from a command line, never in this process's
environment (which is PATH alone), never in a log.

Busy means any of:
- a hold (DIR/hold, `{"seconds": S}`, until its mtime + S): the command that rented the
  host has not handed it over yet (`up` waiting for its other hosts, `submit --up` before
  its job starts). The command removes it then; if the command died, it expires and the
  window runs;
- a job node under `~/.gpujob/jobs` whose supervisor is alive (same pid and start time as in
  its status.json), or one that asked to start in the last 30 s. A job's agent syncs its last
  complete checkpoint and ships its log to S3 before its supervisor ends (ckpt_watch's final
  pass), so "ships its jobs' last checkpoints and logs" holds by waiting for the supervisors;
- a command or login running in an SSH session of this host: a process whose parent is an
  sshd session process (`sshd: root@notty`, `sshd-session: root@pts/0`) and that is in this
  host's network namespace (lab hosts share one PID namespace but each has its own network).
  An idle ControlMaster connection runs nothing and is not a session; neither are reads of
  this folder (`gpujob status` asking for the deadline).

    gpujob-autostop.py start DIR   start the watcher, or have the running one reload
                                   DIR/config.json; print its state as JSON. Not
                                   restarted after a reboot: nothing starts it at boot
    gpujob-autostop.py show DIR    print the state: idle since, deadline, what keeps it busy
    gpujob-autostop.py run DIR     the watcher itself, in the foreground
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))  # shipped siblings, as on a host
from agent_os import alive, read_json, start_ticks, write_json
from autostop_busy import busy, job_since
from autostop_call import CallFailed, dry_call, end_instance, request_for, url_problem

CONFIG, STATE, PID_FILE, LOCK = "config.json", "state.json", "daemon.pid", "daemon.lock"
WATCHER_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LOG_NAME = "autostop.log"  # in ~/.gpujob, beside the jobs folder
MAX_BACKOFF_S = 300.0


def poll_interval(idle_s: float) -> float:
    """Small enough that a short window (tests) ends close to its deadline, never busier
    than a look every 15 s."""
    return max(0.5, min(15.0, idle_s / 6))


# -- the watcher -----------------------------------------------------------------------------


class Watcher:
    """Looks every poll interval; ends the instance after `idle_s` without activity. A
    SIGHUP reloads the config and starts the window again (a new `up` is activity).
    `looks` says what keeps the host busy (autostop_busy.busy); `first_backoff_s` is the
    end's first wait between tries, doubled up to MAX_BACKOFF_S."""

    def __init__(self, folder: Path, looks: Callable[[Path], str | None] = busy,
                 first_backoff_s: float = 1.0) -> None:  # fmt: skip
        self.folder = folder
        self.looks = looks
        self.first_backoff_s = first_backoff_s
        self.log_path = folder.parent / LOG_NAME
        self.reload = True
        self.stop = False
        self.config: dict[str, Any] = {}
        self.started_at = self.loaded_at = time.time()
        self.last_active = time.monotonic()
        self.idle_since = time.time()
        self.busy_with: str | None = None

    def log(self, text: str) -> None:
        stamp = time.strftime("%Y-%m-%d %H:%M:%S")
        with contextlib.suppress(OSError), open(self.log_path, "a") as out:  # a full disk
            out.write(f"{stamp} {text}\n")  # must not end the watch

    def until(self) -> float | None:
        """A kept failed job's hard end (agent/keep.py): past it the host ends, busy or not;
        none while a job started since the keep was armed runs (the host reused: that job
        is not ended under it; the hard end holds again once it is done)."""
        until, armed = self.config.get("until"), self.config.get("armed_at")
        if armed is not None and job_since(self.folder.parent / "jobs", float(armed)):
            return None
        return float(until) if until is not None else None

    def publish(self, **extra: Any) -> None:
        idle_s, until = float(self.config.get("idle_s", 0)), self.until()
        deadline = None if self.busy_with else self.idle_since + idle_s
        deadline = (
            until if until is not None and (deadline is None or until < deadline) else deadline
        )
        with contextlib.suppress(OSError):  # a full disk hides the state, never stops the end
            write_json(self.folder / STATE, {
                "pid": os.getpid(), "start": start_ticks(os.getpid()), "idle_s": idle_s,
                "action": self.config.get("action"), "provider": self.config.get("provider"),
                "instance_id": self.config.get("instance_id"), "started_at": self.started_at,
                "loaded_at": self.loaded_at, "checked_at": time.time(), "busy": self.busy_with,
                "idle_since": None if self.busy_with else self.idle_since, "deadline": deadline,
                "state": "watching", **extra,
            })  # fmt: skip

    def load(self) -> None:
        self.reload = False  # first: a SIGHUP during the read asks for another
        self.config = read_json(self.folder / CONFIG)
        self.loaded_at = time.time()
        self.active_now(None)
        self.log(f"watching: after {self.config['idle_s']:g} s with no gpujob job running and "
                 f"no SSH session, {self.config['action']} {self.config['provider']} instance "
                 f"{self.config.get('instance_id')} ({request_for(self.config)[0]} "
                 f"{self.config['api_url']})")  # fmt: skip

    def active_now(self, why: str | None) -> None:
        """The window starts again from now: what `status` shows as idle since and the
        deadline move with it."""
        self.last_active, self.idle_since = time.monotonic(), time.time()
        self.busy_with = why

    def look(self) -> bool:
        """One look; True when the window has passed with nothing running, or the kept
        window's hard end has."""
        if self.past_until():
            return True
        why = self.looks(self.folder)
        if why:
            if why != self.busy_with:
                self.log(f"busy: {why}")
            self.active_now(why)
        elif self.busy_with:
            self.active_now(None)
            self.log("idle: no gpujob job running and no SSH session")
        self.publish()
        return not why and time.monotonic() - self.last_active >= float(self.config["idle_s"])

    def run(self) -> int:
        """The watch; an error that escapes it (a bug, a config that cannot be read) is
        logged and the watch starts again after a backoff, with a new window: a watcher
        that died would leave the host billing for ever."""
        backoff = self.first_backoff_s
        while True:
            try:
                return self.watch()
            except Exception as err:  # the state first: whoever reads the line finds it so
                with contextlib.suppress(Exception):
                    self.publish(state="failed", last_error=failure(err)[:300])
                self.log(f"the watcher failed ({failure(err)}); watching again in {backoff:g} s")
            self.pause(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_S)
            self.reload = True

    def watch(self) -> int:
        while not self.stop:
            if self.reload:  # the window starts now; the first look comes after the command
                self.load()  # that started us (an SSH session of its own) has ended
                self.publish()
            elif self.look_safely() and self.end():
                return 0
            self.pause(poll_interval(float(self.config["idle_s"])))
        self.publish(state="stopped")
        self.log("stopped (SIGTERM)")
        return 0

    def look_safely(self) -> bool:
        """A look that fails is logged and counts as busy (nothing is ended on a guess); the
        watcher outlives it, or the host would bill for ever."""
        try:
            return self.look()
        except Exception as err:
            why = f"a look failed ({type(err).__name__}: {err})"
            if why != self.busy_with:
                self.log(f"{why}; looking again")
            self.active_now(why)
            self.publish()
            return False

    def past_until(self) -> bool:
        until = self.until()
        return until is not None and time.time() >= until

    def in_use(self) -> str | None:
        """During the end's retries: what calls it off, or None. A look that fails here
        does not: the end was already decided; past a hard end nothing does."""
        if self.past_until():
            return None
        try:
            return self.looks(self.folder)
        except Exception:
            return None

    def pause(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not (self.stop or self.reload) and time.monotonic() < deadline:
            time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))

    def end(self) -> bool:
        """The call and its read-back, retried with backoff until the cloud shows the
        instance ended. Activity in the meantime (a login, a job) calls it off: False, and
        the watch goes on with a new window from that activity."""
        what = f"{self.config['action']} {self.config['provider']} instance " \
               f"{self.config.get('instance_id')}"  # fmt: skip
        if self.past_until():
            self.log(f"the failed job's kept window is over: {what}")
        else:
            self.log(f"idle for {self.config['idle_s']:g} s (no gpujob job running, no SSH "
                     f"session): {what}")  # fmt: skip
        backoff = self.first_backoff_s
        while not self.stop:
            try:
                said = end_instance(self.config)
            except Exception as failed:  # CallFailed, or anything else: logged, tried again
                self.log(f"{what} not done: {failure(failed)}; trying again in {backoff:g} s")
                self.publish(state="retrying", last_error=failure(failed)[:300])
                self.pause(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                why = self.in_use()
                if self.reload or why:
                    self.log(f"{what} called off: {why or 'reloaded'}")
                    self.active_now(why)  # a new window from now, not the old deadline
                    self.publish()
                    return False
                continue
            self.log(f"{what}: {said}")
            self.publish(state="ended", said=said)
            return True
        return False


def failure(err: BaseException) -> str:
    """An error in one line: its message, and for one that is not the cloud's answer,
    where it came from (the watcher's log is all there is to go on, on the host)."""
    if isinstance(err, CallFailed):
        return str(err)
    frames = traceback.extract_tb(err.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return f"{type(err).__name__}: {err}{where}"


def daemon_pid(folder: Path) -> int | None:
    """The running watcher's pid: recorded with its start time, so a recycled pid is
    never taken for it (nor signalled)."""
    rec = read_json(folder / PID_FILE)
    pid = rec.get("pid")
    if pid and alive(pid) and rec.get("start") == start_ticks(pid):
        return int(pid)
    return None


def run(folder: Path) -> int:
    """The watcher, holding DIR/daemon.lock for its life: a second one never runs."""
    lock = open(folder / LOCK, "a")  # noqa: SIM115  (held until the process ends)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return 0
    watcher = Watcher(folder)
    write_json(folder / PID_FILE, {"pid": os.getpid(), "start": start_ticks(os.getpid())})

    def on_hup(*_: Any) -> None:
        watcher.reload = True

    def on_term(*_: Any) -> None:
        watcher.stop = True

    signal.signal(signal.SIGHUP, on_hup)
    signal.signal(signal.SIGTERM, on_term)
    return watcher.run()


def start(folder: Path, wait_s: float = 15.0) -> int:
    """Have exactly one watcher running with DIR/config.json: a running one reloads it
    (SIGHUP), else a new one starts detached. Prints the state once it has loaded."""
    folder.chmod(0o700)
    problem = url_problem(read_json(folder / CONFIG).get("api_url"))
    if problem:  # every call would fail: refused here, so that the install fails
        print(json.dumps({"error": f"{CONFIG}: api_url {problem}; the watcher would never "
                          "reach the cloud"}))  # fmt: skip
        return 1
    asked = time.time()
    with open(folder / "start.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        pid = daemon_pid(folder)
        if pid is not None:
            os.kill(pid, signal.SIGHUP)
        else:
            _spawn(folder)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            state = read_json(folder / STATE)
            if state.get("loaded_at", 0) >= asked and daemon_pid(folder) == state.get("pid"):
                return show(folder)
            time.sleep(0.05)
    print(json.dumps({"error": f"the autostop watcher did not start in {wait_s:g} s; see "
                      f"{folder.parent / LOG_NAME}"}))  # fmt: skip
    return 1


def _spawn(folder: Path) -> None:
    """Detach (double fork, own session, no inherited descriptors: the SSH command that
    started it ends at once), then exec `run` so that `ps` names it plainly, with PATH as
    its whole environment: nothing of the session that started it (a secret included)
    lives on in the watcher."""
    first = os.fork()
    if first:
        os.waitpid(first, 0)
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        os.chdir("/")
        os.umask(0o077)
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.closerange(3, 1024)
        os.execve(sys.executable, [sys.executable, str(Path(__file__).resolve()), "run",
                                   str(folder)], {"PATH": WATCHER_PATH})  # fmt: skip
    finally:
        os._exit(1)


def check(folder: Path) -> int:
    """Run before `start` by the bootstrap: the dry call (autostop_call.dry_call) with
    DIR/config.json; a host that cannot end itself is refused, one JSON line either way."""
    try:
        said = dry_call(read_json(folder / CONFIG))
    except CallFailed as failed:
        print(json.dumps({"refused": f"the host cannot end itself: {failed}"}))
        return 1
    print(json.dumps({"checked": said}))
    return 0


def show(folder: Path) -> int:
    """The state, whether the watcher runs, and the config it watches with (no secret)."""
    state = read_json(folder / STATE)
    state.update(running=daemon_pid(folder) is not None, config=read_json(folder / CONFIG))
    print(json.dumps(state))
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("start", "show", "run", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(argv[2]).resolve()
    with contextlib.suppress(KeyboardInterrupt):
        return {"start": start, "show": show, "run": run, "check": check}[argv[1]](folder)
    return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv))
