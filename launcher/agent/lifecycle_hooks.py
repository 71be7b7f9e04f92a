"""The job's lifecycle hooks (SkyPilot's `config.hooks`) run on node 0 at an event: `stop`
(a cancel, before the job gets its SIGTERM), `preemption` (the cloud's notice reached the
host) and `down` (`gpujob down` is about to terminate the host). Standard library only;
shipped beside the agent.

As SkyPilot documents them: in their order, each bounded by its own timeout (then its
process group is stopped), and one that fails or times out never holds the event up: the
agent says so in the log and goes on. Their output goes to the job's log, between the
agent's lines, so `gpujob logs` shows it. Each hook is a script the plan wrote beside
run.sh (plan/hook_files.py): the job's variables and workdir. On the host it has none of
the job's secrets (those reach the job only in its processes' environment, and a cancel
is not one of them); in the job's container (`docker exec`) it has them, as the job does.
A hook in a container past its timeout: its `docker exec` is stopped, and what it started
there ends with the container.
Hooks run once per node and event: a second cancel does not run them again, and the cancel
that `down` makes after its down hooks runs no stop hook.

The preemption notice is a SIGTERM that reaches node 0's supervisor without a cancel of
gpujob's (`on_host_going`). gpujob's own cancel never signals the supervisor: it leaves
`cancel-requested` and signals the job's process group, the job's own session. A SIGTERM
to the supervisor is the host's: a machine's shutdown, a stopped container whose init
passes it to every process (an outbid Vast instance is stopped: the Vast fake stops its
container with `docker stop`, SIGTERM then SIGKILL after the grace), a spot VM's notice.
The hooks run first, within that grace, then the job is stopped with its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from agent_os import read_json
from states import TERMINAL
from stopping import log_line, status_of

KILL_WAIT_S = 5.0
"""How long a hook past its timeout has after its SIGTERM before its SIGKILL."""


def run_hooks(node_dir: Path, event: str, *, only_while_running: bool = True) -> int:
    """Run the node's hooks of `event`; returns how many failed or timed out. With
    `only_while_running`, a node whose job has ended (or never started) runs none."""
    config: dict[str, Any] = read_json(node_dir / "job.json")
    hooks = [h for h in config.get("lifecycle_hooks") or () if event in h.get("events", ())]
    if not hooks:
        return 0
    state = status_of(node_dir).get("state")
    if only_while_running and (not state or state in TERMINAL):
        return 0
    if event == "stop" and (node_dir / "hooks-down.done").exists():
        return 0  # `down` ran its hooks and now cancels: the host goes, the job is not stopped
    done = node_dir / f"hooks-{event}.done"
    try:  # once per event: a cancel given again, or down after the stop's, does not repeat
        done.touch(exist_ok=False)
    except FileExistsError:
        return 0
    failed = 0
    for index, hook in enumerate(hooks, 1):
        failed += not _run_one(node_dir, config, hook, event, f"{index}/{len(hooks)}")
    return failed


def _run_one(node_dir: Path, config: dict[str, Any], hook: dict[str, Any], event: str,
             which: str) -> bool:  # fmt: skip
    timeout = float(hook.get("timeout", 3600))
    name = f"lifecycle hook {which} ({event})"
    log_line(node_dir, f"{name}: running (timeout {timeout:g} s)")
    env = dict(os.environ, GPUJOB_LIFECYCLE_EVENT=event, SKYPILOT_LIFECYCLE_EVENT=event)
    env.pop("GPUJOB_AGENT_NODE", None)  # not one of the job's processes: a cancel spares it
    try:
        log = open(node_dir / config.get("log", "job.log"), "ab")  # noqa: SIM115
    except OSError:  # a full disk: the hook runs all the same, unheard
        log = None
    try:
        proc = subprocess.Popen(_argv(node_dir, config, hook["script"], event),
                                stdin=subprocess.DEVNULL, stdout=log or subprocess.DEVNULL,
                                stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)  # fmt: skip
    except OSError as err:
        log_line(node_dir, f"{name}: could not start ({err.strerror}); the {event} goes on")
        return False
    finally:
        if log is not None:
            log.close()
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        log_line(node_dir, f"{name}: timed out after {timeout:g} s and was stopped; the "
                 f"{event} goes on")  # fmt: skip
        return False
    if code != 0:
        log_line(node_dir, f"{name}: exited {code}; the {event} goes on")
        return False
    log_line(node_dir, f"{name}: done")
    return True


def _argv(node_dir: Path, config: dict[str, Any], script: str, event: str) -> list[str]:
    """On the host, or in the job's container (whose environment has the job's secrets;
    the node's folder is mounted there at the same path)."""
    argv = ["bash", str(node_dir / script), event]
    container = config.get("container") if config.get("runtime") == "docker" else None
    if not container:
        return argv
    events = [f"{name}_LIFECYCLE_EVENT={event}" for name in ("GPUJOB", "SKYPILOT")]
    return ["docker", "exec", *[x for e in events for x in ("-e", e)], container, *argv]


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_WAIT_S), (signal.SIGKILL, KILL_WAIT_S)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(wait)
            return
        except subprocess.TimeoutExpired:
            continue


def on_host_going(
    node_dir: Path, config: dict[str, Any], stop_job: Callable[[float], None]
) -> None:
    """From now on, a SIGTERM with no cancel of gpujob's behind it runs the preemption hooks
    (output in the job's log), then stops the job (`stop_job`, with the job's grace), and
    the supervisor records its end as usual. A job with no preemption hook keeps SIGTERM's
    default; with a cancel under way, SIGTERM keeps it too. Main thread only: the handler
    is installed here and does the work itself, in the main thread, so the supervisor
    records the job's end (and exits) only after the hooks, even when the SIGTERM reached
    the job too and it has already ended."""
    hooks = config.get("lifecycle_hooks") or ()
    if config.get("slurm") or not any("preemption" in h.get("events", ()) for h in hooks):
        return  # under SLURM, gpujob's own cancel is a scancel: SIGTERM to the whole step

    def going() -> None:
        log_line(node_dir, "SIGTERM without a cancel of gpujob's: the host is going away "
                 "(preemption); its hooks run, then the job is stopped")  # fmt: skip
        run_hooks(node_dir, "preemption")
        stop_job(float(config.get("grace_s", 30)))

    def noticed(signum: int, frame: FrameType | None) -> None:
        if (node_dir / "cancel-requested").exists():  # gpujob's cancel is under way: as before
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a second notice changes nothing
        going()

    signal.signal(signal.SIGTERM, noticed)
