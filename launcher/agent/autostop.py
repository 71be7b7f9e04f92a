#!/usr/bin/env python3
"""gpujob autostop: a rented host that nobody uses ends itself. Standard library only.

`gpujob up --autostop 30m` ships this file to the host's `~/.gpujob/autostop/` (as
`gpujob-autostop.py`, with agent_os.py and autostop_call.py beside it) and starts it
detached, in a session of its own: it goes on when the SSH session ends and when the user's
machine is off. Once the host has had no running gpujob job and no SSH session for the
window, it writes a line in `~/.gpujob/autostop.log` and asks the cloud to end the instance
(autostop_call.py): Lambda terminate, Vast destroy (or stop), retried with backoff until the
cloud takes it. The key is read at the moment of the call, from its 0600 file (Lambda: the
user's key, opt-in) or from the instance's own environment (Vast's `CONTAINER_API_KEY`,
which can only start, stop or destroy that one instance): never from a command line, never
in this process's environment, never in a log.

Busy means either of:
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
                                   DIR/config.json; print its state as JSON
    gpujob-autostop.py show DIR    print the state: idle since, deadline, what keeps it busy
    gpujob-autostop.py run DIR     the watcher itself, in the foreground
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))  # shipped siblings, as on a host
from agent_os import alive, read_json, start_ticks, write_json
from autostop_call import CallFailed, call_cloud, request_for

CONFIG, STATE, PID_FILE, LOCK = "config.json", "state.json", "daemon.pid", "daemon.lock"
LOG_NAME = "autostop.log"  # in ~/.gpujob, beside the jobs folder
START_GRACE_S = 30.0  # a node asked to start this recently is busy before its supervisor runs
SESSION = re.compile(r"^sshd(?:-session)?: \S+@(?:notty|pts/\d+)")
MAX_BACKOFF_S = 300.0


@dataclass(frozen=True)
class Proc:
    """One process as /proc shows it: what the session check needs."""

    pid: int
    ppid: int
    comm: str
    cmdline: str
    net: str | None  # its network namespace; None when it cannot be read


def poll_interval(idle_s: float) -> float:
    """Small enough that a short window (tests) ends close to its deadline, never busier
    than a look every 15 s."""
    return max(0.5, min(15.0, idle_s / 6))


# -- busy ------------------------------------------------------------------------------------


def job_busy(jobs_root: Path, now: float | None = None) -> str | None:
    """The first job node that keeps the host busy, in words, or None."""
    now = time.time() if now is None else now
    for status_path in sorted(jobs_root.glob("*/node-*/status.json")):
        status = read_json(status_path)
        node = f"job {status_path.parent.parent.name} {status_path.parent.name}"
        pid = status.get("supervisor_pid")
        if pid and alive(pid) and status.get("supervisor_start") in (None, start_ticks(pid)):
            return f"{node} {status.get('state', 'running')}"
        asked = status.get("requested_at") or 0
        if status.get("state") == "starting" and now - asked < START_GRACE_S:
            return f"{node} starting"
    return None


def session_busy(procs: list[Proc], own_net: str | None, ignore: str) -> str | None:
    """The first command or login running in an SSH session of this host, or None.
    `ignore`: commands naming it are not activity (reads of this folder)."""
    sessions = {p.pid: p for p in procs if p.comm.startswith("sshd") and SESSION.match(p.cmdline)}
    for p in procs:
        parent = sessions.get(p.ppid)
        if parent is None or p.comm.startswith("sshd") or ignore in p.cmdline:
            continue
        if own_net is not None and p.net is not None and p.net != own_net:
            continue  # another host's session (lab hosts share one PID namespace)
        return f"SSH session {parent.cmdline.split(':', 1)[1].strip()}: {p.cmdline[:60]}"
    return None


def snapshot() -> list[Proc]:
    """Every process this host's /proc shows. Only sessions' children need their namespace
    read, so that is read for those alone."""
    table: list[tuple[int, int, str]] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        head, _, rest = stat.rpartition(")")
        fields = rest.split()
        if len(fields) < 2:
            continue
        table.append((int(entry), int(fields[1]), head.partition("(")[2]))
    sshd = {pid for pid, _, comm in table if comm.startswith("sshd")}
    procs = []
    for pid, ppid, comm in table:
        if pid not in sshd and ppid not in sshd:
            continue
        procs.append(Proc(pid, ppid, comm, _cmdline(pid), None if pid in sshd else _net(pid)))
    return procs


def _cmdline(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def _net(pid: int | str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def busy(folder: Path) -> str | None:
    """Why the host is busy now, or None when it is idle."""
    ours = f"{folder.parent.name}/{folder.name}/"  # `.gpujob/autostop/`, however it is named
    return job_busy(folder.parent / "jobs") or session_busy(snapshot(), _net("self"), ours)


# -- the watcher -----------------------------------------------------------------------------


class Watcher:
    """Looks every poll interval; ends the instance after `idle_s` without activity. A
    SIGHUP reloads the config and starts the window again (a new `up` is activity)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
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

    def publish(self, **extra: Any) -> None:
        idle_s = float(self.config.get("idle_s", 0))
        deadline = None if self.busy_with else self.idle_since + idle_s
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
        self.config = read_json(self.folder / CONFIG)
        self.loaded_at = time.time()
        self.last_active, self.idle_since = time.monotonic(), time.time()
        self.reload = False
        self.log(f"watching: after {self.config['idle_s']:g} s with no gpujob job running and "
                 f"no SSH session, {self.config['action']} {self.config['provider']} instance "
                 f"{self.config.get('instance_id')} ({request_for(self.config)[0]} "
                 f"{self.config['api_url']})")  # fmt: skip

    def look(self) -> bool:
        """One look; True when the window has passed with nothing running."""
        why = busy(self.folder)
        if why:
            if why != self.busy_with:
                self.log(f"busy: {why}")
            self.last_active = time.monotonic()
        elif self.busy_with:
            self.last_active, self.idle_since = time.monotonic(), time.time()
            self.log("idle: no gpujob job running and no SSH session")
        self.busy_with = why
        self.publish()
        return not why and time.monotonic() - self.last_active >= float(self.config["idle_s"])

    def run(self) -> int:
        while not self.stop:
            if self.reload:  # the window starts now; the first look comes after the command
                self.load()  # that started us (an SSH session of its own) has ended
                self.busy_with = None
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
            self.log(f"a look failed ({type(err).__name__}: {err}); looking again")
            self.last_active = time.monotonic()
            return False

    def idle_now(self) -> bool:
        try:
            return busy(self.folder) is None
        except Exception:
            return True  # the call is already decided: a failed look does not undo it

    def pause(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not (self.stop or self.reload) and time.monotonic() < deadline:
            time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))

    def end(self) -> bool:
        """The call, retried with backoff until the cloud takes it. Activity in the meantime
        (a login, a job) calls it off: False, and the watch goes on."""
        what = f"{self.config['action']} {self.config['provider']} instance " \
               f"{self.config.get('instance_id')}"  # fmt: skip
        self.log(f"idle for {self.config['idle_s']:g} s (no gpujob job running, no SSH "
                 f"session): {what}")  # fmt: skip
        backoff = 1.0
        while not self.stop:
            try:
                said = call_cloud(self.config)
            except CallFailed as failed:
                self.log(f"{what} failed: {failed}; trying again in {backoff:g} s")
                self.publish(state="retrying", last_error=str(failed)[:300])
                self.pause(backoff)
                backoff = min(backoff * 2, MAX_BACKOFF_S)
                if self.reload or not self.idle_now():
                    self.log(f"{what} called off: the host is in use again")
                    return False
                continue
            self.log(f"{what}: {said}")
            self.publish(state="ending", said=said)
            return True
        return False


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
    started it ends at once), then exec `run` so that `ps` names it plainly."""
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
        os.execv(sys.executable, [sys.executable, str(Path(__file__).resolve()), "run",
                                  str(folder)])  # fmt: skip
    finally:
        os._exit(1)


def show(folder: Path) -> int:
    """The state, whether the watcher runs, and the config it watches with (no secret)."""
    state = read_json(folder / STATE)
    state.update(running=daemon_pid(folder) is not None, config=read_json(folder / CONFIG))
    print(json.dumps(state))
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("start", "show", "run"):
        print(__doc__, file=sys.stderr)
        return 2
    folder = Path(argv[2]).resolve()
    with contextlib.suppress(KeyboardInterrupt):
        return {"start": start, "show": show, "run": run}[argv[1]](folder)
    return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv))
