"""Where remotes come from: `storage:` in the job spec, then the user config
(`<config dir>/gpujob/config.yaml`, `$GPUJOB_CONFIG_DIR` for tests), and what their keys are.

The config names the variables that hold the keys, never the keys: a config file can be
shared or committed without leaking anything.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import UsageError
from launcher.paths import config_file
from launcher.spec.remote import REMOTE_NAME, REMOTE_PATH, S3Remote

EXAMPLE = "remotes: {lab: {provider: Other, endpoint: http://127.0.0.1:9000, bucket: ckpts}}"


@dataclass(frozen=True)
class Remote:
    name: str
    model: S3Remote
    where: str
    """`file:line` that defined it, for errors that blame it."""


@dataclass(frozen=True)
class RemotePath:
    remote: Remote
    prefix: str

    @property
    def key_prefix(self) -> str:
        return self.prefix.strip("/")

    def __str__(self) -> str:
        return f"{self.remote.name}:{self.key_prefix}"


def user_remotes() -> dict[str, Remote]:
    path = config_file()
    if not path.exists():
        return {}
    import yaml

    try:
        node = yaml.compose(path.read_text(), Loader=yaml.SafeLoader)
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: YAML syntax error: {err}".split("\n")[0]) from None
    if not isinstance(data, dict) or not isinstance(data.get("remotes", {}), dict):
        raise UsageError(f"{path}: expected a `remotes:` mapping", f"e.g. {EXAMPLE}")
    lines = _lines(node)
    found = {}
    for name, body in (data.get("remotes") or {}).items():
        where = f"{path}:{lines.get(('remotes', name), 1)}"
        found[name] = Remote(name, _validate(name, body, where, lines, path), where)
    return found


def _validate(name: Any, body: Any, where: str, lines: dict, path: Path) -> S3Remote:
    from pydantic import ValidationError

    if not isinstance(name, str) or not REMOTE_NAME.match(name):
        raise UsageError(
            f"{where}: remotes: `{name}` is not a remote name",
            "letters, digits and `_` (rclone's env form cannot hold `-`)",
        )
    try:
        return S3Remote.model_validate(body)
    except ValidationError as err:
        first = err.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        line = lines.get(("remotes", name, *first["loc"][:1]), where.rsplit(":", 1)[-1])
        raise UsageError(f"{path}:{line}: remotes.{name}.{field}: {first['msg']}") from None


def _lines(node: Any, prefix: tuple = ()) -> dict[tuple, int]:
    out: dict[tuple, int] = {}
    if node is not None and getattr(node, "id", "") == "mapping":
        for key, value in node.value:
            loc = (*prefix, key.value)
            out[loc] = key.start_mark.line + 1
            out.update(_lines(value, loc))
    return out


def all_remotes(
    spec_remotes: dict[str, S3Remote] | None = None, where: str = "the job spec"
) -> dict[str, Remote]:
    """The spec's remotes win over the user config's of the same name."""
    found = user_remotes()
    for name, model in (spec_remotes or {}).items():
        found[name] = Remote(name, model, where)
    return found


def parse_remote_path(text: str, remotes: dict[str, Remote], where: str) -> RemotePath:
    match = REMOTE_PATH.match(text)
    if not match:
        raise UsageError(f"{where}: `{text}` is not REMOTE:prefix", "e.g. lab:runs/quickstart")
    name = match.group("remote")
    if name not in remotes:
        known = ", ".join(sorted(remotes)) or "none"
        raise UsageError(
            f"{where}: no remote `{name}` (known: {known})",
            f"describe it under `storage:` in the spec or in {config_file()} ({EXAMPLE})",
        )
    return RemotePath(remotes[name], match.group("path"))


def credentials(remote: Remote) -> dict[str, str]:
    """The key values from the variables the remote names; empty for profile/env auth."""
    model = remote.model
    if model.access_key_env is None or model.secret_key_env is None:
        return {}
    missing = [n for n in (model.access_key_env, model.secret_key_env) if n not in os.environ]
    if missing:
        raise UsageError(
            f"{remote.where}: remote {remote.name}: {', '.join(missing)} not set in your "
            "environment",
            f"export {missing[0]}=... (the value is never written to a file you "
            "keep, a command line or a log)",
        )
    return {
        "access_key_id": os.environ[model.access_key_env],
        "secret_access_key": os.environ[model.secret_key_env],
    }
