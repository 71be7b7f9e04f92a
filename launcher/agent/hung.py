"""What a job's processes were doing when they were stopped or kept: `py-spy dump` of each
one still running, into the node's `kept/` folder. Standard library only; shipped beside
the agent (for `cancel --dump-first`) and beside the autostop watcher (for the keep,
agent/keep.py).

A rank that hangs while another fails is the one to look at: the follow of a job with
`--keep-on-failure` asks the other nodes' agents to dump their ranks before it stops them
(`gpujob-agent.py cancel NODE_DIR GRACE --dump-first`). Where py-spy is not installed there
is nothing to run and nothing is written; the stop goes on at once.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # shipped siblings, as on a host
from agent_os import descendants, processes, read_json, start_ticks

KEPT = "kept"  # jobs/keep.py KEPT_FOLDER
DUMP_TIMEOUT_S = 30.0


def job_processes(leader: int) -> list[int]:
    """The job's processes still alive: its process group (the agent starts run.sh as its
    leader) and everything under it (torchrun's workers have groups of their own)."""
    table = processes()
    tree = {leader, *descendants(leader, table)}
    return sorted(p.pid for p in table.values()
                  if p.state != "Z" and (p.pgid == leader or p.pid in tree))  # fmt: skip


def running(status: dict[str, Any]) -> list[int]:
    """The processes of the job a node's status names, if its leader is still that job's
    (a reused pid is not)."""
    leader = status.get("pid")
    if not isinstance(leader, int) or status.get("pid_start") not in (None, start_ticks(leader)):
        return []
    return job_processes(leader)


def py_spy() -> str | None:
    found = shutil.which("py-spy")
    local = Path.home() / ".local" / "bin" / "py-spy"
    return found or (str(local) if local.exists() else None)


def dump(spy: str, pid: int, into: Path) -> str:
    """`py-spy dump --pid PID` into its own file; what went wrong, in words, otherwise."""
    into.mkdir(exist_ok=True)
    out = into / f"py-spy-{pid}.txt"
    try:
        done = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                              timeout=DUMP_TIMEOUT_S)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"pid {pid}: py-spy failed ({err})"
    out.write_text(done.stdout + done.stderr)
    return f"pid {pid}: {out.name}" + ("" if done.returncode == 0 else " (py-spy: not Python?)")


def dump_running(node_dir: Path) -> list[str]:
    """Dump each process of the node's job still running; a line for each."""
    spy = py_spy()
    pids = running(read_json(node_dir / "status.json")) if spy else []
    return [dump(spy, pid, node_dir / KEPT) for pid in pids] if spy else []


def cancel_args(node_dir: Path, args: list[str]) -> tuple[float, bool]:
    """`cancel [GRACE] [--agent-gone] [--dump-first]`: the grace and whether the agent is
    gone; `--dump-first` dumps the running ranks here, before the stop."""
    if "--dump-first" in args:
        dump_running(node_dir)
    rest = [arg for arg in args if arg not in ("--agent-gone", "--dump-first")]
    return (float(rest[0]) if rest else 30.0), "--agent-gone" in args
