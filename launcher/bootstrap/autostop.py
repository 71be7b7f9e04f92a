"""Bootstrap's last step for `up --autostop`: the watcher (launcher/agent/autostop.py) put on
the host and started, so that the host ends itself once nobody uses it.

What goes there is a value (`install_ops`: the files with their modes, then the start
command), built from an `AutostopSetup` without I/O, so a test reads exactly what a host
gets. The config names where the key is, never the key: the user's Lambda key travels only
as the content of its own 0600 file (in the batch's stdin, never on a command line).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.agent import AUTOSTOP_FILE, AUTOSTOP_SOURCES
from launcher.remote.batch import File, Op, Run

if TYPE_CHECKING:
    from launcher.bootstrap.steps import StepResult
    from launcher.providers.base import AutostopCall
    from launcher.remote.base import Connection

FOLDER = ".gpujob/autostop"
KEY_FILE = "api-key"


@dataclass(frozen=True)
class AutostopSetup:
    """One host's autostop: the idle window and the call that ends it."""

    idle_s: float
    call: AutostopCall

    @property
    def label(self) -> str:
        """`30m idle -> terminate`, as `up` and `status` say it."""
        from launcher.spec.limits import show_duration

        return f"{show_duration(self.idle_s)} idle -> {self.call.action}"


def folder(home: str) -> str:
    return f"{home}/{FOLDER}"


def config_of(setup: AutostopSetup, home: str) -> dict[str, Any]:
    """The watcher's config.json: no secret in it, only where the key is read from."""
    call = setup.call
    return {
        "idle_s": setup.idle_s,
        "action": call.action,
        "provider": call.provider,
        "instance_id": call.instance_id,
        "api_url": call.api_url,
        "key_file": f"{folder(home)}/{KEY_FILE}" if call.key else None,
    }


def start_argv(home: str) -> tuple[str, ...]:
    where = folder(home)
    return ("python3", f"{where}/{AUTOSTOP_FILE}", "start", where)


def show_argv(home: str) -> tuple[str, ...]:
    where = folder(home)
    return ("python3", f"{where}/{AUTOSTOP_FILE}", "show", where)


def install_ops(setup: AutostopSetup, home: str) -> list[Op]:
    """The scripts, the config and (Lambda) the key file, each 0600 but the scripts, then
    the start: one exec."""
    where = folder(home)
    ops: list[Op] = [File(f"{where}/{name}", Path(source).read_bytes(), 0o644)
                     for name, source in AUTOSTOP_SOURCES.items()]  # fmt: skip
    config = json.dumps(config_of(setup, home), indent=2, sort_keys=True) + "\n"
    ops.append(File(f"{where}/config.json", config.encode(), 0o600))
    if setup.call.key:
        ops.append(File(f"{where}/{KEY_FILE}", setup.call.key.encode() + b"\n", 0o600))
    ops.append(Run(start_argv(home)))
    return ops


def ensure(conn: Connection, setup: AutostopSetup, home: str) -> StepResult:
    """check -> fix -> verify: a watcher running with this config is left as it is;
    otherwise the files go there and the watcher starts (or reloads)."""
    from launcher.bootstrap.steps import StepResult

    wanted = config_of(setup, home)
    found = _state(conn.run(list(show_argv(home))).stdout)
    if found.get("running") and found.get("config") == wanted:
        return StepResult("autostop", "ok", f"{setup.label}: watching, {_where(found)}")
    done = conn.batch(install_ops(setup, home))
    started = _state(done.runs[-1].stdout) if done.runs else {}
    if not done.ok or started.get("pid") is None:
        said = started.get("error") or (done.runs[-1].stderr.strip()[-200:] if done.runs else "")
        return StepResult("autostop", "failed", f"the watcher did not start: {said}",
                          f"see ~/{FOLDER.rsplit('/', 1)[0]}/autostop.log on the host")  # fmt: skip
    return StepResult("autostop", "fixed", f"{setup.label}: watching, {_where(started)}")


def _state(text: str) -> dict[str, Any]:
    try:
        found = json.loads(text.strip().splitlines()[-1]) if text.strip() else {}
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


def _where(state: dict[str, Any]) -> str:
    key = "its own instance key" if not state.get("config", {}).get("key_file") else "your key"
    return f"{state.get('provider')} {state.get('instance_id')} with {key}"
