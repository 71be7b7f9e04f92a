"""One file, both worlds: a SkyPilot task may carry gpujob's own sections, a gpujob spec may
use SkyPilot's names for the same things, and a `storage:` remote may be written with
rclone's option names. Each is rewritten into gpujob's own field before validation, its line
kept; a conflict (both names given) or a key written in the file is one line among all the
file's errors. Pure.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from launcher.spec.sky_resources import SIZE
from launcher.spec.yaml_lines import Path_

GPUJOB_SECTIONS = ("checkpoints", "storage", "batch", "merge", "recovery", "max_duration",
                   "profiles", "profile", "nccl", "unset_envs", "checks",
                   "tensorboard")  # fmt: skip
"""gpujob's sections a SkyPilot task may carry, kept as written."""
SKY_NAMES = {("num_nodes",): ("nodes",), ("resources", "disk_size"): ("resources", "disk_gb"),
             ("resources", "gpus"): ("resources", "accelerators")}  # fmt: skip
"""SkyPilot's name -> gpujob's, in a gpujob spec."""
RCLONE_KEYS = {"access_key_id": "access_key_env", "secret_access_key": "secret_key_env"}
PROVIDERS = {"aws": "AWS", "minio": "Minio", "cloudflare": "Cloudflare", "lambda": "Lambda"}
"""rclone's S3 providers gpujob names; any other (Ceph, Wasabi, ...) is rclone's `Other`."""
ENV_REF = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")


def keep_sections(
    data: Mapping[str, Any], origins: dict[Path_, str], out_data: dict[str, Any],
    out_origins: dict[Path_, str], notes: list[str],
) -> None:  # fmt: skip
    """A task's gpujob sections, as written, with the line of every key inside them."""
    for key in GPUJOB_SECTIONS:
        if key in data:
            out_data[key] = copy.deepcopy(data[key])
            out_origins.update({loc: at for loc, at in origins.items() if loc[:1] == (key,)})
            notes.append(f"{origins.get((key,), '')}: {key}: gpujob's own section, kept")


def own_spec_names(data: dict[str, Any], origins: dict[Path_, str], filename: str) -> list[str]:
    """SkyPilot's names in a gpujob spec, moved to gpujob's; both given is refused."""
    errors = []
    for src, dst in SKY_NAMES.items():
        parent = data if len(src) == 1 else data.get(src[0])
        if not isinstance(parent, dict) or src[-1] not in parent:
            continue
        where = origins.get(src, filename)
        name, own = ".".join(src), ".".join(dst)
        if dst[-1] in parent:
            parent.pop(src[-1])  # refused here: not also an unknown key
            errors.append(f"{where}: {name}: SkyPilot's name for `{own}`, which is given too; "
                          "keep one")  # fmt: skip
            continue
        value = parent.pop(src[-1])
        if src[-1] == "disk_size":
            size = SIZE.match(str(value).strip())
            if not size:
                errors.append(f"{where}: {name}: cannot read {value!r} as a size; write GB")
                continue
            value = int(float(size.group("n")) * (1024 if "T" in (size.group("unit") or "").upper()
                                                 else 1))  # fmt: skip
        parent[dst[-1]] = value
        _moved(origins, src, dst)
    resources = data.get("resources")
    if isinstance(resources, dict) and resources.pop("image_id", None) is not None:
        where = origins.get(("resources", "image_id"), filename)
        errors.append(f"{where}: resources.image_id: SkyPilot's name for `image`, which this "
                      "spec gives; keep `image`")  # fmt: skip
    return errors


def rclone_remotes(data: dict[str, Any], origins: dict[Path_, str], filename: str) -> list[str]:
    """`storage.NAME` written as an rclone remote: `type: s3` (the only kind), `provider`
    in rclone's spelling, keys as the variables that hold them (`$AWS_ACCESS_KEY_ID`; a key
    written in the file is refused), `prefix: bucket/path` (rclone's remote path: the bucket,
    and the path that `checkpoints.sync_to: NAME:...` then starts from)."""
    storage = data.get("storage")
    if not isinstance(storage, dict):
        return []
    errors = []
    for name, remote in storage.items():
        if not isinstance(remote, dict):
            continue
        loc: Path_ = ("storage", name)
        at = {key: origins.get((*loc, key), origins.get(loc, filename)) for key in remote}
        kind = remote.pop("type", "s3")
        if str(kind).lower() != "s3":
            errors.append(f"{at['type']}: storage.{name}.type: gpujob's remotes are S3 (rclone "
                          f"`type: s3`), not {kind}; use an S3 endpoint")  # fmt: skip
        remote.pop("env_auth", None)  # rclone's: keys from the environment, gpujob's default
        if isinstance(remote.get("provider"), str):
            remote["provider"] = PROVIDERS.get(remote["provider"].lower(), "Other")
        for key, own in RCLONE_KEYS.items():
            if key not in remote:
                continue
            ref = ENV_REF.match(str(remote.pop(key)))
            if ref is None:
                remote.setdefault(own, f"AWS_{key.upper()}")  # refused: not also "give both"
                errors.append(f"{at[key]}: storage.{name}.{key}: a key written in the file; "
                              f"gpujob never reads one from a file: write `{key}: "
                              f"$AWS_{key.upper()}` or the variable that holds "
                              "it")  # fmt: skip
            elif own in remote:
                errors.append(f"{at[key]}: storage.{name}.{key}: rclone's name for `{own}`, "
                              "which is given too; keep one")  # fmt: skip
            else:
                remote[own] = ref.group(1)
                _moved(origins, (*loc, key), (*loc, own))
        if "prefix" in remote:
            _prefix(data, remote, name, str(remote.pop("prefix")))
            _moved(origins, (*loc, "prefix"), (*loc, "bucket"))
    return errors


def _prefix(data: dict[str, Any], remote: dict[str, Any], name: str, prefix: str) -> None:
    bucket, _, path = prefix.strip("/").partition("/")
    remote.setdefault("bucket", bucket)
    if remote["bucket"] != bucket:
        path = prefix.strip("/")  # a bucket given apart: the whole prefix is a path in it
    checkpoints = data.get("checkpoints")
    sync_to = checkpoints.get("sync_to") if isinstance(checkpoints, dict) else None
    if path and isinstance(sync_to, str) and sync_to.partition(":")[0] == name:
        rest = sync_to.partition(":")[2].strip("/")
        checkpoints["sync_to"] = f"{name}:{path}/{rest}" if rest else f"{name}:{path}"


def _moved(origins: dict[Path_, str], src: Path_, dst: Path_) -> None:
    for loc in [loc for loc in origins if loc[: len(src)] == src]:
        origins[(*dst, *loc[len(src) :])] = origins[loc]
