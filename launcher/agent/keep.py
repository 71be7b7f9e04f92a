#!/usr/bin/env python3
"""gpujob keep: a failed job's host kept for a look, bounded. Standard library only.

Shipped beside the autostop watcher (`~/.gpujob/autostop/gpujob-keep.py`) and run over SSH
by `submit --keep-on-failure` once the job has failed (targets/cloud/keep.py):

    gpujob-keep.py arm AUTOSTOP_DIR WINDOW_S NODE_DIR...

First the bound, then the look, so that nothing in the look (a slow py-spy) can leave the
host without its end: the watcher's config gets the window as its idle time and `until`,
the host's own clock plus the window, past which the watcher ends the instance whatever
keeps it busy (an SSH session left open included); a running watcher reloads it. Then each
node folder gets `kept/README.txt`: the node's end as its agent recorded it, the core files
found under it, and for each process of the job still alive (a rank that hung while another
failed) a `py-spy dump` where py-spy is installed. Prints one JSON object.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parent))  # shipped siblings, as on a host
from agent_os import read_json, write_json
from hung import KEPT, dump, py_spy, running

CONFIG, WATCHER = "config.json", "gpujob-autostop.py"
CORE = re.compile(r"^core(\.\d+)?$")
MAX_DEPTH = 4


def arm(folder: Path, window_s: float, now: float | None = None) -> dict[str, Any]:
    """The watcher's window and hard end set, and the watcher (re)started with them: its
    state as it printed it, and the deadline on this host's clock."""
    config = read_json(folder / CONFIG)
    if not config:
        return {"error": f"no autostop config in {folder}: nothing would end this host"}
    armed_at = time.time() if now is None else now  # a job started since is a reuse
    until = armed_at + window_s
    config.update(idle_s=window_s, until=until, kept=True, armed_at=armed_at)
    write_json(folder / CONFIG, config)
    started = subprocess.run([sys.executable, str(folder / WATCHER), "start", str(folder)],
                             capture_output=True, text=True, timeout=60)  # fmt: skip
    try:
        state = json.loads(started.stdout or "{}")
    except ValueError:
        state = {"error": (started.stdout + started.stderr).strip()[-300:]}
    return {"until": until, "watcher": state, "ok": started.returncode == 0}


def cores(node_dir: Path) -> list[str]:
    """Core files under the node's folder (the job's working folder is there), a few levels
    deep: where the kernel writes them with the default core_pattern."""
    found = []
    for root, dirs, files in os.walk(node_dir):
        depth = len(Path(root).relative_to(node_dir).parts)
        dirs[:] = [] if depth >= MAX_DEPTH else [d for d in dirs if d != KEPT]
        found += [str(Path(root) / name) for name in files if CORE.match(name)]
    return sorted(found)


def look(node_dir: Path) -> dict[str, Any]:
    """What the node left: its recorded end, its core files, dumps of what still runs."""
    status = read_json(node_dir / "status.json")
    into = node_dir / KEPT
    into.mkdir(exist_ok=True)
    before = sorted(p.name for p in into.glob("py-spy-*.txt"))  # taken before its stop
    alive = running(status)
    spy = py_spy()
    dumps = [dump(spy, pid, into) for pid in alive] if spy else []
    found = cores(node_dir)
    lines = [f"node {node_dir.name}: {status.get('state')} (exit code {status.get('exit_code')})",
             f"last line: {status.get('last_line') or '-'}", f"log: {node_dir / 'job.log'}",
             f"core files: {', '.join(found) if found else 'none found'}",
             "processes of the job still running: "
             + (", ".join(map(str, alive)) if alive else "none"),
             ("py-spy dumps: " + ("; ".join(dumps) or "-")) if spy else
             "py-spy dumps: py-spy is not installed on this host",
             f"dumps from before gpujob stopped it: {', '.join(before) or 'none'}"]  # fmt: skip
    (into / "README.txt").write_text("\n".join(lines) + "\n")
    return {"node_dir": str(node_dir), "cores": found, "running": alive, "dumps": dumps,
            "py_spy": bool(spy)}  # fmt: skip


def main(argv: list[str]) -> int:
    if len(argv) < 4 or argv[1] != "arm":
        print(__doc__, file=sys.stderr)
        return 2
    armed = arm(Path(argv[2]).expanduser(), float(argv[3]))
    print(json.dumps(armed), flush=True)  # the bound first: said even if a look hangs
    nodes = []
    for node_dir in argv[4:]:
        try:
            nodes.append(look(Path(node_dir).expanduser()))
        except OSError as err:
            nodes.append({"node_dir": node_dir, "error": str(err)})
    print(json.dumps({"nodes": nodes}))
    return 0 if armed.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
