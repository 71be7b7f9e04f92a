"""How a node's job runs on its host: as a process tree (bare) or in a container (docker),
behind one small interface the agent drives (start, wait, pause, stop, end).

Standard library only; shipped beside the agent, which imports it as a sibling module. The
plan chose the runtime (`job.json`'s `runtime`) and wrote its command line (`argv`: run.sh,
or the `docker run --detach` line); this module only carries it out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent_os import (
    alive,
    descendants,
    forward,
    processes,
    signal_if_same,
    start_ticks,
)
from reserve import say_in_log_file, skipped_if_full

Sample = Callable[[list[int]], None]
"""Called about once a second while the job runs, with its processes (rank_memory.py)."""
DOCKER_TAIL = 20
"""Lines of `docker logs` kept for a container that ended before its script wrote a line."""
HINTS = {
    126: "a program the container starts is not executable there",
    127: "the image lacks a program the container starts (`bash` runs the job's run.sh)",
}
HINT_OTHERWISE = "check the image's entrypoint, and that bash runs in it: docker run IMAGE bash"


class StartFailed(Exception):
    """The job never ran: the exit code to record and why, for the status."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class BareJob:
    """run.sh in a new session, its output straight into job.log (a file descriptor, not a
    pipe through the agent); secrets come in the environment the supervisor gives it."""

    SAMPLE_EVERY_S = 1.0

    def __init__(self, node_dir: Path, config: dict[str, Any], log: Path) -> None:
        self.node_dir, self.config, self.log = node_dir, config, log
        self.pid: int | None = None
        self.job: subprocess.Popen[bytes] | None = None
        self.reason: str | None = None
        """Why the job ended, where its log cannot say (the status's `reason`); its own
        output goes straight into job.log, so a bare job has none of its own."""

    def start(self, env: dict[str, str]) -> dict[str, Any]:
        log_fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self.job = subprocess.Popen(
                self.config["argv"], cwd=self.node_dir, env=env, stdin=subprocess.DEVNULL,
                stdout=log_fd, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        except OSError as err:
            raise StartFailed(127, str(err)) from None
        finally:
            os.close(log_fd)
        self.pid = self.job.pid
        signal.signal(signal.SIGTERM, lambda *_: signal_job(self.job.pid, signal.SIGTERM))  # type: ignore[union-attr]
        # the start names the group for good: a cancel after the supervisor died signals the
        # group only while its leader (or, once it is gone, its members) is this job's
        return {"pid": self.pid, "pid_start": start_ticks(self.pid), "peak_rss_bytes": 0}

    def wait(self, sample: Sample) -> int:
        assert self.job is not None
        while True:
            try:
                code = self.job.wait(timeout=self.SAMPLE_EVERY_S)
                return code if code >= 0 else 128 - code
            except subprocess.TimeoutExpired:
                sample([self.job.pid, *descendants(self.job.pid)])

    def pause(self, paused: bool) -> None:
        assert self.pid is not None
        for each in [self.pid, *descendants(self.pid)]:
            forward(each, signal.SIGSTOP if paused else signal.SIGCONT)

    def stop(self, grace_s: float) -> None:
        if self.pid is not None:
            stop_tree(self.pid, grace_s)

    def end(self) -> None:
        """Nothing is left of a process tree that has ended."""


class ContainerJob:
    """`docker run --detach`, with the job's secrets in its environment (Docker takes each
    by the name its `--env NAME` gives: no file, no value on the command line); `docker
    wait` for the exit code. The container writes job.log itself (a bind mount),
    from the moment its script runs: a container that ends before then (its entrypoint
    missing from the image) said why only to Docker, so `docker logs` is copied into the
    log and the status's reason."""

    def __init__(self, node_dir: Path, config: dict[str, Any], log: Path) -> None:
        self.node_dir, self.config, self.log = node_dir, config, log
        self.container: str | None = None
        self.reason: str | None = None
        self.not_the_container = 0
        """Bytes of job.log written before the container ran, or by the agent for it."""

    def start(self, env: dict[str, str]) -> dict[str, Any]:
        log_fd = os.open(self.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            self.not_the_container = os.fstat(log_fd).st_size
            started = subprocess.run(self.config["argv"], stdin=subprocess.DEVNULL, env=env,
                                     capture_output=True, check=False)  # fmt: skip
            self._write(log_fd, started.stderr)  # Docker's own complaint, if any
        except OSError as err:
            self._write(log_fd, f"[gpujob-agent] cannot run docker: {err}\n".encode())
            started = subprocess.CompletedProcess(self.config["argv"], 127, b"", b"")
        finally:
            os.close(log_fd)
        self.container = started.stdout.decode().strip() or self.config.get("container")
        if started.returncode != 0:
            raise StartFailed(started.returncode, "docker run failed")
        return {"container": self.container}

    def _write(self, log_fd: int, data: bytes) -> None:
        with skipped_if_full():  # a full disk: the start's outcome is still recorded
            os.write(log_fd, data)
            self.not_the_container += len(data)

    def wait(self, sample: Sample) -> int:
        """`docker wait`, asked again if the client call breaks while the container lives."""
        for _ in range(30):
            waited = subprocess.run(["docker", "wait", str(self.container)],
                                    capture_output=True, text=True)  # fmt: skip
            if waited.returncode == 0 and waited.stdout.strip().isdigit():
                code = int(waited.stdout.strip())
                if code != 0 and self._log_size() <= self.not_the_container:
                    self._explain_early_exit(code)
                return code
            time.sleep(1)
        return 125

    def _log_size(self) -> int:
        try:
            return self.log.stat().st_size
        except FileNotFoundError:
            return 0

    def _explain_early_exit(self, code: int) -> None:
        """The container ended before its script wrote a line: Docker's own last lines (the
        entrypoint's error is there, not in job.log) and a hint go into the log as the
        agent's lines, and the last of Docker's lines into the status's reason."""
        logs = subprocess.run(["docker", "logs", "--tail", str(DOCKER_TAIL), str(self.container)],
                              capture_output=True)  # fmt: skip
        said = (logs.stdout + logs.stderr).decode(errors="replace").splitlines()
        said = [line.rstrip() for line in said if line.strip()][-DOCKER_TAIL:]
        head = f"the container exited {code} before the job's script ran"
        lines = [f"{head}; `docker logs` says:" if said else f"{head}; `docker logs` is empty"]
        lines += [f"  {line}" for line in said]
        lines.append(f"hint: {HINTS.get(code, HINT_OTHERWISE)}")
        say_in_log_file(self.log, lines)
        self.reason = f"{head}: {said[-1][-200:]}" if said else head

    def pause(self, paused: bool) -> None:
        subprocess.run(["docker", "pause" if paused else "unpause", str(self.container)],
                       capture_output=True)  # fmt: skip

    def stop(self, grace_s: float) -> None:
        stop_container(str(self.container), grace_s)

    def end(self) -> None:
        subprocess.run(["docker", "rm", "--force", str(self.container)], capture_output=True)


def job_for(node_dir: Path, config: dict[str, Any], log: Path) -> BareJob | ContainerJob:
    kind = ContainerJob if config.get("runtime") == "docker" else BareJob
    return kind(node_dir, config, log)


Named = tuple[int, int]
"""A process as (pid, start ticks): signalled only while that pid is still that process."""


def stop_tree(pid: int, grace_s: float) -> None:
    """SIGTERM to the job's process group, SIGCONT to a paused tree so it can act on it,
    SIGKILL to the group and whatever else of the tree is left after the grace period.

    The group, not run.sh's pid alone: a shell block's bash, DeepSpeed's runner and
    accelerate's single process die of a TERM without passing it on, and their program
    would never hear it (launchers.md §2.5). The job runs in its own session, so its pid is
    its group; torchrun's workers sit in groups of their own and hear it from torchrun."""
    table = processes()
    tree = [(p, table[p].start) for p in [pid, *descendants(pid, table)] if p in table]
    stop_processes(_own_group(pid), tree, grace_s, lead=pid)


def stop_processes(
    group: int | None,
    tree: list[Named],
    grace_s: float,
    lead: int = 0,
    again: Callable[[], list[Named]] | None = None,
) -> None:
    """`stop_tree` for a group whose leader may be gone (its supervisor died, stopping.py):
    TERM to the group (to `lead` alone when it leads none), CONT to `tree`, KILL to what is
    left of both after the grace period. `tree` is taken before the TERM: a worker whose
    torchrun died at it is still found. Without a `lead` (nobody left to pass the TERM
    on), every process of `tree` hears it itself; `again` finds the job's processes once
    more right before the KILL (one started during the grace). Each process is signalled
    only while its pid is still the one that started at its recorded time."""
    if group is not None:
        signal_job(group, signal.SIGTERM, group)
    elif lead:
        forward(lead, signal.SIGTERM)
    for pid, start in tree:
        if not lead:
            signal_if_same(pid, start, signal.SIGTERM)
        signal_if_same(pid, start, signal.SIGCONT)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and (any(still(*p) for p in tree) or _group_alive(group)):
        time.sleep(0.1)
    if again is not None:
        tree = sorted({*tree, *again()})
    if group is not None and _group_alive(group):
        signal_job(group, signal.SIGKILL, group)
    for pid, start in tree:
        signal_if_same(pid, start, signal.SIGKILL)


def still(pid: int, start: int) -> bool:
    """Whether the process that started at `start` lives (not a zombie)."""
    return alive(pid) and start_ticks(pid) == start


def signal_job(pid: int, sig: int, group: int | None = None) -> None:
    """`sig` to every process of the job's group, or to `pid` alone when it leads none."""
    group = _own_group(pid) if group is None else group
    if group is None:
        forward(pid, sig)
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(group, sig)


def _own_group(pid: int) -> int | None:
    """`pid` when it leads its own process group (a job started in its own session)."""
    try:
        return pid if os.getpgid(pid) == pid else None
    except ProcessLookupError:
        return None


def _group_alive(group: int | None) -> bool:
    """Whether a process other than a zombie is left in `group` (/proc, as `descendants`
    reads it): a group id is not reused while any member lives."""
    if group is None:
        return False
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 2 and fields[2] == str(group) and fields[0] != "Z":
            return True
    return False


def stop_container(container: str, grace_s: float) -> None:
    """`docker stop` (SIGTERM, SIGKILL after the grace period), unpaused first: a paused
    container cannot act on SIGTERM."""
    subprocess.run(["docker", "unpause", container], capture_output=True)
    subprocess.run(["docker", "stop", "--time", f"{int(grace_s)}", container],
                   capture_output=True)  # fmt: skip
