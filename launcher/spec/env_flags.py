"""`submit --env`, `--env-file` and `--secret` as SkyPilot's (skypilot-task.md §1.1, §2),
applied to a spec of either kind after its file is read and before `--set`.

`--env K=V` and a `--env-file` line are plain variables (in job.json and run.sh, as the
file's own envs are); `--env K` takes K from this environment and `--secret K[=V]` names a
secret: only the name is recorded, the value is read from gpujob's environment when the job
starts and travels as every secret does (masked in printouts, on the start's stdin, a 0600
file at most). Pure: the caller gives the environment.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launcher.errors import UsageError
from launcher.spec.yaml_lines import Path_

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env_name(name: str, flag: str) -> str:
    if not NAME.match(name):
        raise UsageError(f"{flag} {name}: not a variable name",
                         "write NAME or NAME=VALUE (letters, digits, `_`)")  # fmt: skip
    return name


def read_env_file(path: str) -> list[str]:
    """A dotenv file as `K=V` items: `export` words, comments, blank lines and one level of
    quotes as the shell reads them; a line that is not `NAME=VALUE` names its line."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise UsageError(f"--env-file {path}: {err.strerror}", "give a readable file") from None
    items = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.removeprefix("export ").partition("=")
        if not sep or not NAME.match(name.strip()):
            raise UsageError(f"{path}:{number}: not NAME=VALUE", "write one variable a line")
        try:
            words = shlex.split(value, comments=True)
        except ValueError:
            raise UsageError(f"{path}:{number}: {name.strip()}: unclosed quote") from None
        items.append(f"{name.strip()}={' '.join(words)}")
    return items


def provided(envs: tuple[str, ...], secrets: tuple[str, ...], sets: list[Path_]) -> set[str]:
    """Names whose value the command line gives: a task's `NAME: null` env is satisfied by
    them. `--env NAME` alone is not one: the task's null takes NAME from this environment as
    a secret, as without the flag."""
    names = {e.partition("=")[0] for e in envs if "=" in e} | set(secrets)
    return names | {str(key[1]) for key in sets if len(key) == 2 and key[0] == "envs"}


def apply_env_flags(
    data: dict[str, Any],
    origins: dict[Path_, str],
    envs: tuple[str, ...],
    secrets: tuple[str, ...],
    environ: Mapping[str, str],
) -> None:
    """`--env` values into `envs`, `--secret` names into `secrets` (out of `envs`)."""
    secret_list: list[str] = data.setdefault("secrets", [])
    for item in envs:
        name, sep, value = item.partition("=")
        if not sep:
            if name not in environ:
                raise UsageError(f"--env {name}: {name} is not set in your environment",
                                 f"export {name}=..., or write --env {name}=VALUE")  # fmt: skip
            if name in secret_list:  # the task's `NAME: null`: a secret, taken from here
                continue
            value = environ[name]
        data.setdefault("envs", {})[name] = value
        origins[("envs", name)] = f"--env {name}"
    for name in secrets:
        if name not in environ:
            raise UsageError(f"--secret {name}: {name} is not set in your environment",
                             f"export {name}=..., or write --secret {name}=VALUE")  # fmt: skip
        (data.get("envs") or {}).pop(name, None)
        if name not in secret_list:
            origins[("secrets", len(secret_list))] = f"--secret {name}"
            secret_list.append(name)
