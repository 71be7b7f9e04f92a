"""`--keep-on-failure`: a failed job's rented hosts kept up for a look, bounded from the host.

Before: `submit --up` with a keep window rents its hosts with an autostop watcher (the
spec's `resources.autostop`, else one whose idle window is the keep window), so every host
has an end from its bootstrap on, whatever happens to this machine. On a failure each host
runs `gpujob-keep.py arm` (agent/keep.py): the watcher gets the window and a hard end
(`until`, past which it ends the host even with an SSH session open), then each node's
folder gets `kept/README.txt` (its end, core files, py-spy dumps of ranks still running).
A host that cannot be armed keeps the watcher it had: still bounded, said.

A Ctrl-C or a lost connection during any of this leaves at worst the watcher from the
rent: never a host without an end, and the user is told the hosts stay and how to end them.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable

from launcher.errors import GpujobError, UsageError
from launcher.state.db import JobRecord

KEEP_SCRIPT = ".gpujob/autostop/gpujob-keep.py"
"""From the login's home (bootstrap.autostop.FOLDER); shipped with the watcher."""


def check_keep(provider: str, key_on_host: bool, window_s: float | None) -> None:
    """Refused before anything is rented: a keep needs the host to end itself, which on a
    cloud without an instance-scoped key takes the user's key there (`--autostop-key-on-host`)."""
    from launcher.clouds.registry import trait
    from launcher.targets.cloud.autostop import KEY_VARIABLE

    if window_s is None or key_on_host or trait(provider, "autostop_key", None) != "user":
        return
    variable = KEY_VARIABLE.get(provider, "API key")
    raise UsageError(
        f"--keep-on-failure on {provider}: a kept host ends itself at the window's end only "
        f"with your {variable} on it (a 0600 file); nothing was rented",
        "add --autostop-key-on-host to allow that, or leave out --keep-on-failure",
    )


def window_cost(job: JobRecord, window_s: float) -> str | None:
    """What the window costs at the prices the hosts were rented at, `$1.23`; None when a
    price is unknown."""
    from launcher.state.hosts import HostsDB
    from launcher.targets.cloud.target import job_hosts

    db, total = HostsDB(), 0.0
    for host in job_hosts(job):
        record = db.host(host.name)
        if record is None or record.price_per_hour is None:
            return None
        total += record.price_per_hour * window_s / 3600
    return f"${total:.2f}"


def keep_failed(job: JobRecord, window_s: float, say: Callable[[str], None],
                failed: int | None = None) -> list[str]:  # fmt: skip
    """Arm every host of the failed job for `window_s`; the hosts armed. Never raises for a
    host that cannot be reached: its rent-time watcher still ends it, which is said.
    `failed`: the node that failed first, the one the user is pointed at."""
    from launcher.remote.base import Connection
    from launcher.spec.limits import show_duration
    from launcher.state.hosts import HostsDB
    from launcher.targets.base import close_all, target_for
    from launcher.targets.ssh import RemoteHostsTarget

    target, opened = target_for(job), dict[str, Connection]()
    assert isinstance(target, RemoteHostsTarget)  # a job whose hosts were rented
    armed, ends = [], []
    by_host: dict[str, list[str]] = {}
    for rank, record in enumerate(job.hosts):
        by_host.setdefault(record, []).append(job.node_dirs[rank])
    try:
        for record, node_dirs in by_host.items():
            name, conn = target.connection(record, opened)
            try:
                done = conn.run(["python3", KEEP_SCRIPT, "arm", ".gpujob/autostop",
                                 f"{window_s:g}", *node_dirs])  # fmt: skip
                first = json.loads((done.stdout.splitlines() or ["{}"])[0])
            except (GpujobError, OSError, ValueError) as err:
                said = err.one_line() if isinstance(err, GpujobError) else str(err)
                say(f"could not keep {name} for a look ({said}): its autostop "
                    f"from the rent still ends it; `gpujob down {job.id}` ends it now")  # fmt: skip
                continue
            if not first.get("ok"):
                say(f"could not arm the keep window on {name} ({first}): its autostop from "
                    f"the rent still ends it; `gpujob down {job.id}` ends it now")  # fmt: skip
                continue
            armed.append(name)
            ends.append(float(first["until"]))
            action = (first.get("watcher") or {}).get("action") or "terminate"
            if HostsDB().host(name) is not None:
                HostsDB().set_autostop(name, window_s, action)
    except KeyboardInterrupt:  # SIGTERM and SIGHUP too (cli): the hosts stay, said first
        with contextlib.suppress(OSError):  # a closed terminal
            say(f"interrupted while keeping job {job.id}'s hosts for a look: they stay up "
                f"and end themselves (at the {show_duration(window_s)} window's end where it "
                f"was armed, else by their autostop from the rent); `gpujob down {job.id}` "
                "ends them now")  # fmt: skip
        raise
    finally:
        close_all(list(opened.values()))
    if armed:
        at = time.strftime("%H:%M:%S", time.localtime(min(ends)))
        node = failed if len(job.node_dirs) > 1 else None
        for line in how_to_look(job.id, node, show_duration(window_s), at,
                                window_cost(job, window_s)):  # fmt: skip
            say(line)
    return armed


def how_to_look(job_id: str, node: int | None, window: str, ends_at: str,
                cost: str | None) -> list[str]:  # fmt: skip
    """What the user reads once the hosts are kept: how to get in (`node`: the node to look
    at first, None for a one-node job), how to end it now, and what the window costs."""
    costs = f"; the window costs about {cost}" if cost else ""
    lines = [f"job {job_id} failed: its hosts stay up {window} for a look (they end "
             f"themselves at {ends_at}, also if this machine is off{costs})"]  # fmt: skip
    at = f" --node {node}" if node is not None else ""
    lines.append(f"  get in:     gpujob ssh {job_id}{at}   (the job's folder: job.log, "
                 f"core files, kept/README.txt, py-spy dumps of ranks still "
                 "running)")  # fmt: skip
    lines.append(f"  end it now: gpujob down {job_id}")
    return lines
