"""A node's end as the agent reads it, and its cancel in whatever state its supervisor is.

Standard library only; shipped beside the agent, which imports it as a sibling module.

The supervisor records the job's end, but it can die first (an OOM killer's `kill -9`, a
crash): the job's processes then run on, in their own session, with nobody to stop them.
So a cancel stops the job by what the node has: through its supervisor while that lives
(the end, the last checkpoint sync and the log shipping are its to do), else by itself: the
process group recorded at the start, checked to still be the job's by the start time
recorded with it (a pid given out again is never signalled), with every process under its
members, and the container by its name. It then checks that nothing is left and records
the node's end, so `status`, `logs -f` and the keeper see one. A node that had ended is
left as it is: its own end stands.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_os import (
    alive,
    descendants,
    marked,
    node_lock,
    processes,
    read_json,
    start_ticks,
    write_json,
)
from reserve import say_in_log_file, write_status
from runtimes import stop_container, stop_processes, stop_tree
from states import CANCELLED, FAILED, LOST, STARTING, TERMINAL

STATUS = "status.json"
MARKER = "GPUJOB_AGENT_NODE"
"""Set by the supervisor, to the node folder, in the environment of the job's processes:
found by it wherever they sit (agent_os.marked), one node's apart from another's."""
START_WAIT_S = float(os.environ.get("GPUJOB_AGENT_START_WAIT_S") or 30)
"""How long a start may take before a node with no live supervisor counts as lost; a cancel
waits twice that for a start under way to have a job to stop. `GPUJOB_AGENT_START_WAIT_S`
in the agent's environment sets it (the lab tests, which wait these windows out)."""
NEVER_STARTED_REASON = "never started: its start did not reach the agent in its window"
DYING_WAIT_S = 5
"""How long processes sent SIGKILL may take to be gone before a cancel says they are not."""
GONE = "the agent is gone (host rebooted or killed)"
ENDED, NEVER_STARTED, ASK_SUPERVISOR, STOP_LEFTOVERS, NOTHING_LEFT = (
    "ended", "never started", "ask the supervisor", "stop what is left", "nothing left"
)  # fmt: skip


def cancel_step(recorded: str | None, supervisor: bool, left: bool) -> str:
    """What a cancel does, from the node's recorded state, whether its supervisor lives and
    whether anything of the job still runs."""
    if recorded in TERMINAL:
        return ENDED  # its own end stands: nothing on the host changes
    if not recorded:
        return NEVER_STARTED  # recorded cancelled: a start that comes later does not run
    if supervisor:
        return ASK_SUPERVISOR  # it stops the job and records the end (syncs, logs)
    return STOP_LEFTOVERS if left else NOTHING_LEFT


@dataclass
class Leftovers:
    """What still runs of a node's job whose supervisor is gone: processes as (pid, start
    ticks), signalled only while each pid is still that process."""

    group: int | None = None
    tree: list[tuple[int, int]] = field(default_factory=list)
    container: str | None = None
    container_state: str = ""

    @property
    def any(self) -> bool:
        return bool(self.tree or self.container)

    @property
    def what(self) -> str:
        if self.container:
            state = "" if self.container_state == "running" else f", {self.container_state}"
            return f"container {self.container}{state}"
        if self.group:
            return f"pgid {self.group}"
        if self.tree:
            pids = ", ".join(str(pid) for pid, _ in self.tree[:4])
            return f"pid {pids}" + (", ..." if len(self.tree) > 4 else "")
        return "nothing found"


def leftovers(node_dir: Path, status: dict[str, Any], config: dict[str, Any]) -> Leftovers:
    """The job's container if it exists (created, running or exited: it is removed); else
    this user's processes of the job: its process group's live members (the group is the
    job's while its leader has the recorded start time, or, with the leader gone, while
    members started no earlier than it live: a pid is not given out again while a group of
    that number has members), every process under them, and every process that carries the
    node's marker in its environment and started after the supervisor (torchrun's workers
    sit in sessions of their own, and once torchrun is gone too they are init's)."""
    name = config.get("container") or status.get("container")
    if config.get("runtime") == "docker":
        state = container_state(name) if name else None
        return Leftovers(container=name, container_state=state) if state else Leftovers()
    group, recorded = status.get("pid"), status.get("pid_start")
    table = processes()
    uid = os.geteuid()

    def mine(pid: int) -> bool:
        proc = table.get(pid)
        return proc is not None and proc.state != "Z" and (not uid or proc.uid == uid)

    members: list[int] = []
    leader = table.get(group) if group else None
    if group and not (leader is not None and recorded is not None and leader.start != recorded):
        members = [p.pid for p in table.values() if p.pgid == group and mine(p.pid)
                   and (recorded is None or p.start >= recorded)]  # fmt: skip
    found = {pid for member in members for pid in (member, *descendants(member, table))}
    since = status.get("supervisor_start") or recorded
    found.update(marked(f"{MARKER}={node_dir}", since, table))
    tree = sorted((pid, table[pid].start) for pid in found if mine(pid))
    return Leftovers(group=group if members else None, tree=tree)


def container_state(name: str) -> str | None:
    """The container's state (`created`, `running`, `exited`, ...), None when there is none:
    one created and never started (its supervisor died in `docker run`) is the job's too."""
    try:
        done = subprocess.run(["docker", "inspect", "--format", "{{.State.Status}}", name],
                              capture_output=True, text=True, check=False)  # fmt: skip
    except OSError:
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def remove_container(name: str | None) -> None:
    """`docker rm --force`: the container's config on disk (config.v2.json) holds the values
    of its `--env NAME` secrets for as long as it exists."""
    if name:
        subprocess.run(["docker", "rm", "--force", name], capture_output=True, check=False)


def supervisor_alive(status: dict[str, Any]) -> bool:
    supervisor = status.get("supervisor_pid")
    return alive(supervisor) and status.get("supervisor_start") in (None, start_ticks(supervisor))


def status_of(node_dir: Path) -> dict[str, Any]:
    """The node's status; a node whose supervisor is gone reads `lost`, and says so when
    the job's processes still run (a cancel stops them)."""
    status = read_json(node_dir / STATUS)
    config = read_json(node_dir / "job.json")
    if not status and start_missed(node_dir, config):
        with node_lock(node_dir):  # as a start decides: one of them comes first
            status = read_json(node_dir / STATUS) or record_never_started(node_dir)
    if not status:
        return {"state": "unknown", "reason": f"no {STATUS} in {node_dir}"}
    with contextlib.suppress(OSError):  # when a cancel asked: before a peer's failure or after
        status["cancel_asked_at"] = (node_dir / "cancel-requested").stat().st_mtime
    if config.get("slurm"):
        return status  # SLURM knows whether the node lives; its supervisor is not here
    state = status.get("state")
    gone = state in ("starting", "running") and not supervisor_alive(status)
    if gone and (state == "running" or time.time() - status.get("requested_at", 0) > START_WAIT_S):
        left = leftovers(node_dir, status, config)
        reason = GONE
        if left.any and left.container_state not in ("", "running"):
            reason = (
                f"the agent is gone; its container is left ({left.what}): gpujob cancel removes it"
            )
        elif left.any:
            reason = (f"the agent is gone; the job's processes still run ({left.what}): "
                      "gpujob cancel stops them")  # fmt: skip
        status.update(state=LOST, reason=reason)
    return status


def start_missed(node_dir: Path, config: dict[str, Any]) -> bool:
    """The node's start window (job.json's `start_window_s`, from job.json's writing) has
    passed: a start sent right after job.json that had not come by then never will (the
    channel was cut before it reached the agent). No window under SLURM, which starts the
    node when it gets one, nor for a node of several (its start comes once all are ready)."""
    window = config.get("start_window_s")
    if not window or config.get("slurm"):
        return False
    try:
        return time.time() - (node_dir / "job.json").stat().st_mtime > window
    except OSError:
        return False


def record_never_started(node_dir: Path) -> dict[str, Any]:
    """`failed`, never started, for good: a start that comes later refuses (agent.start)."""
    status = {"state": FAILED, "never_started": True, "reason": NEVER_STARTED_REASON,
              "ended_at": time.time()}  # fmt: skip
    write_json(node_dir / STATUS, status)
    return status


def record_cancelled_unstarted(node_dir: Path) -> dict[str, Any]:
    """`cancelled`, never started, for good: a start that comes later refuses (agent.start).
    Called under the node lock."""
    status = {"state": CANCELLED, "never_started": True, "reason": "cancelled before it started",
              "ended_at": time.time()}  # fmt: skip
    write_json(node_dir / STATUS, status)
    return status


def log_line(node_dir: Path, text: str) -> None:
    """A line of the agent's own in the job log, marked so nobody mistakes it for the job's."""
    config = read_json(node_dir / "job.json")
    say_in_log_file(node_dir / config.get("log", "job.log"), [text])


def cancel(node_dir: Path, grace_s: float, agent_gone: bool = False) -> int:
    """Stop the node's job and print its status as a JSON line (`had_ended` when it had
    ended before: then nothing changed but its container's removal). `agent_gone`: SLURM's
    node step found the supervisor dead; what is left is stopped and the node recorded
    `lost`."""
    config = read_json(node_dir / "job.json")
    recorded = _settled(node_dir)
    live = supervisor_alive(recorded) and not agent_gone
    unsupervised = bool(recorded) and recorded.get("state") not in TERMINAL and not live
    left = leftovers(node_dir, recorded, config) if unsupervised else Leftovers()
    step = cancel_step(recorded.get("state"), live, left.any)
    if step == NOTHING_LEFT and (agent_gone or config.get("slurm")):
        # under SLURM the node's status.json is all there is (status_of looks for no
        # supervisor there): an end left unrecorded would read `running` for good
        return _record_agent_death(node_dir, recorded, "", agent_gone)
    if step in (ENDED, NOTHING_LEFT):
        if step == ENDED and config.get("runtime") == "docker":
            remove_container(config.get("container") or recorded.get("container"))
        return _say(dict(status_of(node_dir), had_ended=True))
    (node_dir / "cancel-requested").touch()
    if step == NEVER_STARTED:
        with node_lock(node_dir):  # a start checks and writes under it too (agent.start)
            if not read_json(node_dir / STATUS).get("state"):
                return _say(record_cancelled_unstarted(node_dir))
        return cancel(node_dir, grace_s, agent_gone)  # the start came first: stop it
    if step == ASK_SUPERVISOR:
        # a `docker run` still under way after _settled's wait: the planned name; the
        # supervisor also stops the job itself if it finds the cancel once its start returns
        container = recorded.get("container") or config.get("container")
        if config.get("runtime") == "docker" and container:
            log_line(node_dir, f"cancel: docker stop (SIGTERM, SIGKILL after {grace_s:g} s)")
            stop_container(container, grace_s)
        elif recorded.get("pid"):
            log_line(node_dir, f"cancel: SIGTERM to the job, SIGKILL after {grace_s:g} s")
            stop_tree(recorded["pid"], grace_s)
        return _await_end(node_dir)
    return _stop_leftovers(node_dir, recorded, config, left, grace_s, agent_gone)


def _settled(node_dir: Path) -> dict[str, Any]:
    """The recorded status once a start under way has a job to stop (its pid or container)
    or has ended: a cancel that comes mid-start stops what the start starts."""
    deadline = time.monotonic() + 2 * START_WAIT_S
    while time.monotonic() < deadline:
        status = read_json(node_dir / STATUS)
        starting = status.get("state") == STARTING and not (
            status.get("pid") or status.get("container")
        )
        young = time.time() - status.get("requested_at", 0) < START_WAIT_S
        if not (starting and (supervisor_alive(status) or young)):
            return status
        time.sleep(0.05)
    return read_json(node_dir / STATUS)


def _stop_leftovers(
    node_dir: Path,
    status: dict[str, Any],
    config: dict[str, Any],
    left: Leftovers,
    grace_s: float,
    agent_gone: bool,
) -> int:
    """The supervisor is gone: the agent stops what is left itself, checks that nothing
    is, and records the end the supervisor would have."""
    log_line(node_dir, f"cancel: the agent is gone; stopping what is left of the job "
             f"({left.what}): SIGTERM, SIGKILL after {grace_s:g} s")  # fmt: skip
    if left.container:
        stop_container(left.container, grace_s)
        remove_container(left.container)
    if left.tree:  # taken again right before the KILL: a worker started during the grace
        stop_processes(left.group, left.tree, grace_s,
                       again=lambda: leftovers(node_dir, status, config).tree)  # fmt: skip
    still = _still_left(node_dir, status, config)
    if still.any:
        log_line(node_dir, f"cancel: the job's processes are still there ({still.what})")
        return _say(dict(status_of(node_dir), cancel_failed=f"still running: {still.what}"), 1)
    return _record_agent_death(node_dir, status, left.what, agent_gone)


def _record_agent_death(
    node_dir: Path, status: dict[str, Any], stopped: str, agent_gone: bool
) -> int:
    """The end the dead supervisor did not record: `lost` when SLURM's node step found it
    dead, else `cancelled`; `stopped` names what was stopped ("": nothing was left)."""
    if agent_gone:
        what = (f"stopped what was left of the job ({stopped})" if stopped
                else "found nothing of the job left")  # fmt: skip
        status.update(state=LOST, reason=f"the agent died; the node's SLURM step {what}")
    else:
        what = f"{stopped} stopped" if stopped else "nothing of the job was left"
        status.update(state=CANCELLED, exit_code=143,
                      reason=f"cancelled after the agent died ({what})")  # fmt: skip
    status["ended_at"] = time.time()
    write_status(node_dir, status)  # through the reserve the dead supervisor left, if full
    return _say(status)


def _still_left(node_dir: Path, status: dict[str, Any], config: dict[str, Any]) -> Leftovers:
    """What is left once the KILL went out, given a few seconds to die (a process exiting
    a large address space, a container's teardown): an answer, not a race."""
    deadline = time.monotonic() + DYING_WAIT_S
    while (still := leftovers(node_dir, status, config)).any and time.monotonic() < deadline:
        time.sleep(0.1)
    return still


def _await_end(node_dir: Path) -> int:
    deadline = time.monotonic() + 60  # the end includes the last checkpoint sync and log ship
    while time.monotonic() < deadline and status_of(node_dir).get("state") not in TERMINAL:
        time.sleep(0.05)
    return _say(status_of(node_dir))


def _say(status: dict[str, Any], code: int = 0) -> int:
    print(json.dumps(status), flush=True)
    return code
