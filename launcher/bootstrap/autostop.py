"""Bootstrap's last step for `up --autostop`: the watcher (launcher/agent/autostop.py) put on
the host and started, so that the host ends itself once nobody uses it.

What goes there is a value (`install_ops`: the files with their modes, then the start
command), built from an `AutostopSetup` without I/O, so a test reads exactly what a host
gets. The config names where the key is, never the key: the user's Lambda key travels only
as the content of its own 0600 file (in the batch's stdin, never on a command line); a
Vast host's own key is put in its file by the instance's onstart (providers/vast.py).

With the watcher comes a hold: the host counts as busy until the command that rents it
hands it over (`up` once every host is ready, `submit --up` once its job has started:
targets.cloud.autostop.release_holds removes it) or, if that command died, until the hold expires:
a host that waits for the others of its command is not ended under it, and none is left
without an end.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from launcher.agent import AUTOSTOP_FILE, AUTOSTOP_SOURCES
from launcher.agent.autostop_call import url_problem
from launcher.remote.batch import File, Op, Run

if TYPE_CHECKING:
    from launcher.bootstrap.steps import StepResult
    from launcher.clouds.base import AutostopCall
    from launcher.remote.base import Connection

FOLDER = ".gpujob/autostop"
KEY_FILE = "api-key"
INSTANCE_KEY_FILE = "instance-key"  # Vast's CONTAINER_API_KEY, written there by the onstart
HOLD_FILE = "hold"  # autostop_busy.HOLD


@dataclass(frozen=True)
class AutostopSetup:
    """One host's autostop: the idle window, the call that ends it, and how long the hold
    lasts at most (the renting command's --timeout and a margin)."""

    idle_s: float
    call: AutostopCall
    hold_s: float = 0.0
    held_by: str = "gpujob up"

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
    key_file = KEY_FILE if call.key else INSTANCE_KEY_FILE
    return {
        "idle_s": setup.idle_s,
        "action": call.action,
        "provider": call.provider,
        "instance_id": call.instance_id,
        "api_url": call.api_url,
        "key_file": f"{folder(home)}/{key_file}",
    }


def hold_file(setup: AutostopSetup, home: str) -> File:
    """The hold: its seconds count from the file's mtime, the host's own clock."""
    body = json.dumps({"seconds": setup.hold_s, "by": setup.held_by}) + "\n"
    return File(f"{folder(home)}/{HOLD_FILE}", body.encode(), 0o600)


def start_argv(home: str) -> tuple[str, ...]:
    where = folder(home)
    return ("python3", f"{where}/{AUTOSTOP_FILE}", "start", where)


def check_argv(home: str) -> tuple[str, ...]:
    where = folder(home)
    return ("python3", f"{where}/{AUTOSTOP_FILE}", "check", where)


def show_argv(home: str) -> tuple[str, ...]:
    where = folder(home)
    return ("python3", f"{where}/{AUTOSTOP_FILE}", "show", where)


def install_ops(setup: AutostopSetup, home: str) -> list[Op]:
    """The scripts, the config and (Lambda) the key file, each 0600 but the scripts, then
    the dry call (`check`: the key is there and the cloud takes it; a failure stops the
    batch, so no watcher starts that could never end its host), then the start: one exec."""
    where = folder(home)
    ops: list[Op] = [File(f"{where}/{name}", Path(source).read_bytes(), 0o644)
                     for name, source in AUTOSTOP_SOURCES.items()]  # fmt: skip
    config = json.dumps(config_of(setup, home), indent=2, sort_keys=True) + "\n"
    ops.append(File(f"{where}/config.json", config.encode(), 0o600))
    if setup.call.key:
        ops.append(File(f"{where}/{KEY_FILE}", setup.call.key.encode() + b"\n", 0o600))
    if setup.hold_s > 0:
        ops.append(hold_file(setup, home))  # before the start: the first look sees it
    ops.append(Run(check_argv(home)))  # the key there and taken: else nothing starts
    ops.append(Run(start_argv(home)))
    return ops


def ensure(conn: Connection, setup: AutostopSetup, home: str) -> StepResult:
    """check -> fix -> verify: a watcher running with this config is left as it is;
    otherwise the files go there and the watcher starts (or reloads)."""
    from launcher.bootstrap.steps import StepResult

    problem = url_problem(setup.call.api_url)
    if problem:  # every call from the host would fail: the host would never end
        return StepResult("autostop", "failed", f"the API URL the host would call: {problem}",
                          f"set GPUJOB_{setup.call.provider.upper()}_HOST_API_URL to the "
                          "http(s) URL the host reaches the API at")  # fmt: skip
    wanted = config_of(setup, home)
    found = _state(conn.run(list(show_argv(home))).stdout)
    if found.get("running") and found.get("config") == wanted:
        if setup.hold_s > 0:
            conn.batch([hold_file(setup, home)])
        return StepResult("autostop", "ok", f"{setup.label}: watching, {_where(found)}")
    done = conn.batch(install_ops(setup, home))
    started = _state(done.runs[-1].stdout) if done.runs else {}
    if not done.ok or started.get("pid") is None:
        if started.get("refused"):  # the dry call (`check`): nothing was started
            return StepResult("autostop", "failed", f"not started: {started['refused']}",
                              "rent again (another offer), or leave out --autostop and end "
                              "the host with `gpujob down`")  # fmt: skip
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
    key_file = str(state.get("config", {}).get("key_file") or "")
    key = "your key" if key_file.endswith(f"/{KEY_FILE}") else "its own instance key"
    return f"{state.get('provider')} {state.get('instance_id')} with {key}"
