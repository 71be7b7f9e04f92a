"""`submit --env`, `--env-file` and `--secret` as SkyPilot's (skypilot-task.md §1.1, §2),
applied to a spec of either kind after its file is read and before `--set`.

A value given on the command line (`--env K=V`, a `--env-file` line, `--secret K=V`) goes
into FLAG_VALUES, this process's private mapping, and the request keeps only the name: no
value is ever in the recovery request (state.db) or on a command line. `--env K` is then a
plain variable (in job.json and run.sh, as the file's own envs are) unless the task marks K
`null` or lists it under `secrets:`: then it is a secret, as `--secret K[=V]` is: only the
name is recorded, the value travels as every secret does (masked in printouts, on the
start's stdin, a 0600 file at most). FLAG_VALUES never touches os.environ, so a job's
`--secret AWS_ACCESS_KEY_ID=...` does not replace the keys gpujob itself uses; a recovery
controller gets it in its environment under CHILD_PREFIX (child_environ).
"""

from __future__ import annotations

import os
import re
from collections import ChainMap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from launcher.errors import UsageError
from launcher.spec.yaml_lines import Path_

NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
FLAG_VALUES: dict[str, str] = {}
"""Values given by flags, by name: private to this process (never os.environ)."""
CHILD_PREFIX = "GPUJOB_FLAGVALUE_"
"""How FLAG_VALUES reach a recovery controller started from here: its environment only."""


def flag_environ() -> Mapping[str, str]:
    """The values a job's envs and secrets are taken from: the flags' first, then those a
    parent handed down (CHILD_PREFIX), then this environment."""
    handed = {k.removeprefix(CHILD_PREFIX): v for k, v in os.environ.items()
              if k.startswith(CHILD_PREFIX)}  # fmt: skip
    return ChainMap(FLAG_VALUES, handed, os.environ)


def child_environ() -> dict[str, str]:
    """This environment plus FLAG_VALUES under CHILD_PREFIX, for a controller started here."""
    return {**os.environ, **{CHILD_PREFIX + k: v for k, v in FLAG_VALUES.items()}}


def shown(name: str) -> str:
    """A `--secret` word as an error shows it: a value mistaken for a name is not echoed."""
    return name if len(name) <= 8 or name.isupper() else f"{name[:3]}... ({len(name)} characters)"


def env_name(name: str, flag: str) -> str:
    if not NAME.match(name):
        raise UsageError(f"{flag} {shown(name)}: not a variable name",
                         "write NAME or NAME=VALUE (letters, digits, `_`)")  # fmt: skip
    return name


def read_env_file(path: str) -> list[str]:
    """A dotenv file as `K=V` items, read as python-dotenv reads it (not as a shell: a value
    is often a password): `export` words, comment lines, blank lines; a line that is not
    `NAME=VALUE` names its line."""
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
        value = dotenv_value(value.strip(), f"{path}:{number}: {name.strip()}")
        items.append(f"{name.strip()}={value}")
    return items


def dotenv_value(value: str, where: str) -> str:
    """python-dotenv's value: quotes stripped (`\\"`, `\\n` inside double quotes), no other
    escapes; unquoted, `#` starts a comment only after whitespace (`p@ss#word` stays)."""
    if value[:1] in ("'", '"'):
        quote = value[0]
        match = re.match(rf"{quote}((?:\\.|[^{quote}\\])*){quote}\s*(#.*)?$", value)
        if match is None:
            raise UsageError(f"{where}: unclosed quote", "close it, or write the value unquoted")
        inner = match.group(1)
        if quote == "'":
            return inner.replace("\\'", "'")
        escapes = {"\\\\": "\\", '\\"': '"', "\\n": "\n", "\\t": "\t", "\\'": "'"}
        return re.sub(r"\\[\\\"nt']", lambda m: escapes[m.group(0)], inner)
    return re.split(r"\s+#", value, maxsplit=1)[0].rstrip()


def provided(envs: tuple[str, ...], secrets: tuple[str, ...], sets: list[Path_]) -> set[str]:
    """Names a task's `NAME: null` env needs no value for here: `--secret` (a secret anyway)
    and `--set envs.NAME=`. An `--env` one is not: the null takes its value from
    flag_environ() as a secret."""
    names = set(secrets)
    return names | {str(key[1]) for key in sets if len(key) == 2 and key[0] == "envs"}


def apply_env_flags(
    data: dict[str, Any],
    origins: dict[Path_, str],
    envs: tuple[str, ...],
    secrets: tuple[str, ...],
    environ: Mapping[str, str],
) -> None:
    """`--env` names into `envs` (their values from `environ`, flag_environ()) or, for a name
    the task holds a secret, left a secret; `--secret` names into `secrets` (out of `envs`)."""
    secret_list: list[str] = data.setdefault("secrets", [])
    for name in envs:
        if name not in environ:
            raise UsageError(f"--env {name}: {name} is not set in your environment",
                             f"export {name}=..., or write --env {name}=VALUE")  # fmt: skip
        if name in secret_list:  # the task's `NAME: null` or `secrets:`: a secret, masked
            (data.get("envs") or {}).pop(name, None)
            continue
        data.setdefault("envs", {})[name] = environ[name]
        origins[("envs", name)] = f"--env {name}"
    for name in secrets:
        if name not in environ:
            raise UsageError(f"--secret {shown(name)}: not set in your environment",
                             "export it, or write --secret NAME=VALUE")  # fmt: skip
        (data.get("envs") or {}).pop(name, None)
        if name not in secret_list:
            origins[("secrets", len(secret_list))] = f"--secret {name}"
            secret_list.append(name)
