"""SkyPilot task YAML read as it is (reference/skypilot-task.md): each field becomes gpujob's
own, a field that would change what runs and that gpujob cannot honour is refused naming it,
and a cosmetic one is a warning. Pure: the caller gives the environment for `null` envs.

A file is a SkyPilot task when it has no `image:` (gpujob's specs always name one) and
carries something only SkyPilot writes: a shell `run:` string, `num_nodes`, `file_mounts`,
or SkyPilot's `resources` keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from launcher.errors import UsageError
from launcher.spec.limits import parse_duration
from launcher.spec.yaml_lines import Path_

SKY_ONLY = {"num_nodes", "file_mounts", "config", "service", "pool", "volumes", "secrets",
            "event_callback", "managed_secrets", "api_server_access"}  # fmt: skip
SKY_RESOURCES = {"cloud", "infra", "disk_size", "image_id", "use_spot", "instance_type",
                 "gpus", "memory", "region", "zone", "ports", "labels"}  # fmt: skip
REFUSED = {
    "config": "task-level SkyPilot config (docker run options, hooks, cloud settings)",
    "service": "SkyServe serving",
    "pool": "worker pools of managed jobs",
    "volumes": "cloud volumes",
    "managed_secrets": "a server-side secrets provider",
    "event_callback": "the managed-jobs controller's callbacks",
}
IGNORED = {"api_server_access", "inputs", "outputs", "_metadata", "volume_mounts",
           "file_mounts_mapping"}  # fmt: skip
RESOURCES_REFUSED = {
    "instance_type": "name a GPU in `accelerators` instead; gpujob picks the offer",
    "ports": "gpujob opens no inbound ports; reach the host with `gpujob ssh`",
    "any_of": "gpujob rents one kind of node: keep one of the candidates",
    "ordered": "gpujob rents one kind of node: keep one of the candidates",
    "job_recovery": "recovery is gpujob's `recovery:` (not yet here)",
    "max_hourly_cost": "give the cap at rent time: `gpujob submit --up GPU --max-price P`",
    "accelerator_args": "TPUs are not rented by gpujob",
    "local_disk": "not offered by Lambda or Vast",
    "volumes": "cloud volumes",
    "priority": "no queue here",
    "priority_class": "no queue here",
}
RESOURCES_IGNORED = {"disk_tier", "network_tier", "labels", "ephemeral_storage", "region",
                     "zone"}  # fmt: skip
CLOUDS = {"lambda", "vast", "ssh"}
DEFAULTS = {
    ("image",): " (the host's Python, as SkyPilot's default image)",
    ("workdir",): " (the task's folder is shipped; SkyPilot would ship nothing)",
}
SIZE = re.compile(r"^(?P<n>[0-9]+(\.[0-9]+)?)\s*(?P<unit>GB|GIB|TB|TIB)?\s*(?P<plus>\+)?$", re.I)


@dataclass
class Translation:
    """The gpujob spec's data, where each key came from, and what `--dry-run` shows."""

    data: dict[str, Any]
    origins: dict[Path_, str]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def is_task(data: Mapping[str, Any]) -> bool:
    if "image" in data:
        return False
    resources = data.get("resources")
    return (
        isinstance(data.get("run"), str)
        or bool(SKY_ONLY & set(data))
        or (isinstance(resources, Mapping) and bool(SKY_RESOURCES & set(resources)))
    )


def translate(
    data: Mapping[str, Any], origins: dict[Path_, str], filename: str, environ: Mapping[str, str]
) -> Translation:
    out = Translation({}, {})
    reader = _Reader(data, origins, filename, out)
    for key in data:
        if key in REFUSED:
            raise reader.refuse((key,), f"{REFUSED[key]} is SkyPilot's own", "remove it")
        if key in IGNORED:
            out.warnings.append(f"{reader.where(key)}: {key}: SkyPilot-only; ignored")
    stem = re.sub(r"[^a-z0-9_.-]+", "-", str(data.get("name") or _stem(filename)).lower())
    reader.put(("name",), ("name",), stem.strip("-") or "task")
    image = _image(reader)
    reader.put(("image",), ("resources", "image_id"), image, given=image != "host")
    if "workdir" not in data:
        reader.put(("workdir",), ("workdir",), ".", given=False)
    else:
        if not isinstance(data["workdir"], str):
            raise reader.refuse(("workdir",), "a git workdir is cloned by SkyPilot's server",
                                "clone it in `setup:`, or give a local folder")  # fmt: skip
        reader.put(("workdir",), ("workdir",), data["workdir"])
    if "num_nodes" in data:
        reader.put(("nodes",), ("num_nodes",), data["num_nodes"])
    for key in ("setup", "run"):
        value = data.get(key)
        if isinstance(value, list):
            value = "\n".join(map(str, value))
        if value is not None:
            reader.put((key,), (key,), value)
    if data.get("run") is None:
        fix = "add a `run:` block (gpujob runs jobs; `gpujob up` rents hosts)"
        raise reader.refuse(("run",), "a task without `run` only provisions nodes", fix)
    envs = _envs(reader, environ)
    if envs:
        reader.put(("envs",), ("envs",), envs)
    secrets = _secrets(reader)
    if secrets:
        reader.put(("secrets",), ("secrets",), secrets)
    if data.get("file_mounts"):
        raise reader.refuse(("file_mounts",), "copying files outside the workdir is not built yet",
                            "put the files in the workdir, or fetch them in `setup:`")  # fmt: skip
    _resources(reader)
    return out


def _stem(filename: str) -> str:
    return filename.rsplit("/", 1)[-1].rsplit(".", 1)[0]


@dataclass
class _Reader:
    data: Mapping[str, Any]
    origins: dict[Path_, str]
    filename: str
    out: Translation

    def where(self, *loc: str) -> str:
        for end in range(len(loc), 0, -1):
            if loc[:end] in self.origins:
                return self.origins[loc[:end]]
        return self.filename

    def put(self, dst: Path_, src: Path_, value: Any, *, given: bool = True) -> None:
        """`value` at gpujob's `dst`, blamed on SkyPilot's `src`; `given=False`: the task
        leaves `src` out and this is what gpujob does instead (the note says so)."""
        node = self.out.data
        for part in dst[:-1]:
            node = node.setdefault(part, {})
        node[dst[-1]] = value
        where = self.where(*map(str, src)) if given else self.filename
        self.out.origins[dst] = where
        shown = value if not isinstance(value, str) or "\n" not in value else "(shell block)"
        names = ".".join(map(str, src)) if given else f"(no {'.'.join(map(str, src))})"
        self.out.notes.append(f"{where}: {names} -> {'.'.join(map(str, dst))}: {shown}"
                              + DEFAULTS.get(dst, "") * (not given))  # fmt: skip

    def refuse(self, loc: Path_, why: str, fix: str) -> UsageError:
        name = ".".join(map(str, loc))
        return UsageError(
            f"{self.where(*map(str, loc))}: {name}: SkyPilot's `{name}`: gpujob cannot honour "
            f"it ({why}); {fix}"
        )


def _image(reader: _Reader) -> str:
    resources = reader.data.get("resources") or {}
    image = resources.get("image_id") if isinstance(resources, Mapping) else None
    if image is None:
        return "host"
    if isinstance(image, Mapping) and set(image) == {"docker"}:
        image = f"docker:{image['docker']}"
    if isinstance(image, str) and image.startswith("docker:"):
        return image.removeprefix("docker:")
    fix = "give a container (`docker:IMAGE`), or leave it out for the host's Python"
    raise reader.refuse(("resources", "image_id"), "a cloud's VM image", fix)


def _envs(reader: _Reader, environ: Mapping[str, str]) -> dict[str, str]:
    """SkyPilot's conversions: values through `str()` (`true` -> `True`), `null` required."""
    envs = reader.data.get("envs") or {}
    out = {}
    for name, value in envs.items():
        if str(name).startswith("SKYPILOT_") and not str(name).startswith("SKYPILOT_DOCKER_"):
            raise reader.refuse(("envs", str(name)), "gpujob sets the SKYPILOT_* names itself",
                                "rename the variable")  # fmt: skip
        if value is None:
            if name not in environ:
                raise UsageError(
                    f"{reader.where('envs', str(name))}: envs.{name}: required (null in the "
                    f"task, as SkyPilot's `--env {name}`): export {name} before submitting"
                )
            value = environ[name]
        out[str(name)] = str(value)
    return out


def _secrets(reader: _Reader) -> list[str]:
    """Secrets come from the environment only: a value written in the file is refused."""
    secrets = reader.data.get("secrets") or {}
    if isinstance(secrets, list):
        return [str(s).removeprefix("secrets:") for s in secrets]
    names = []
    for name, value in secrets.items():
        if value is not None:
            fix = f"write `{name}: null` and export {name} before submitting"
            raise reader.refuse(
                ("secrets", str(name)), "gpujob never reads a secret from a file", fix
            )
        names.append(str(name))
    return names


def _resources(reader: _Reader) -> None:
    resources = reader.data.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise reader.refuse(("resources",), "it must be a mapping", "see SkyPilot's YAML spec")
    for key, value in resources.items():
        loc = ("resources", str(key))
        if key in RESOURCES_REFUSED:
            raise reader.refuse(loc, RESOURCES_REFUSED[key], "remove it")
        if key in RESOURCES_IGNORED:
            reader.out.warnings.append(f"{reader.where(*loc)}: resources.{key}: ignored by gpujob")
        elif key in ("accelerators", "gpus"):
            reader.put(("resources", "accelerators"), loc, _accelerators(reader, loc, value))
        elif key == "cpus":
            reader.put(("resources", "cpus"), loc, int(_size(reader, loc, value)))
        elif key == "memory":
            reader.put(("resources", "memory_gb"), loc, _size(reader, loc, value))
        elif key == "disk_size":
            reader.put(("resources", "disk_gb"), loc, int(_size(reader, loc, value)))
        elif key == "use_spot" and value:
            raise reader.refuse(loc, "interruptible hosts need recovery, not built yet",
                                "rent on demand (remove it)")  # fmt: skip
        elif key in ("cloud", "infra"):
            cloud = str(value).split("/")[0].lower()
            if cloud not in CLOUDS:
                fix = "remove it, and choose with `submit --up GPU --provider`"
                raise reader.refuse(loc, f"gpujob rents on Lambda and Vast, not {value}", fix)
            reader.out.warnings.append(f"{reader.where(*loc)}: resources.{key}: the cloud is "
                                       "chosen at `submit --up GPU --provider`")  # fmt: skip
        elif key == "autostop" and value is not False:
            reader.put(("resources", "autostop"), loc, _autostop(reader, loc, value))
        elif key not in ("image_id", "use_spot", "autostop"):
            raise reader.refuse(loc, "not a field gpujob knows", "remove it")


def _accelerators(reader: _Reader, loc: Path_, value: Any) -> str:
    if isinstance(value, Mapping) and len(value) == 1:
        (name, count), = value.items()  # fmt: skip
        value = f"{name}:{count}" if count is not None else str(name)
    if not isinstance(value, str) or "," in value or "+" in value:
        raise reader.refuse(loc, "gpujob rents one GPU type, named", "keep one, e.g. `A100:8`")
    return value


def _size(reader: _Reader, loc: Path_, value: Any) -> float:
    """`8`, `"8+"` (at least: gpujob's own fields are minimums too), `"64GB"`."""
    match = SIZE.match(str(value).strip())
    if not match:
        raise reader.refuse(loc, f"cannot read {value!r} as a size", "write a number, e.g. 8")
    number = float(match.group("n"))
    return number * 1024 if (match.group("unit") or "").upper().startswith("T") else number


def _autostop(reader: _Reader, loc: Path_, value: Any) -> dict[str, Any]:
    """SkyPilot's forms (`true` = 5 minutes, minutes, `10h`, a mapping); its default is to
    stop, not tear down (`down: false`), which Lambda cannot: there it terminates."""
    if value is True:
        return {"idle_minutes": 5, "down": False}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {"idle_minutes": value, "down": False}
    if isinstance(value, str):
        seconds = parse_duration(value if value[-1].isalpha() else f"{value}m")
        return {"idle_minutes": seconds / 60, "down": False}
    if isinstance(value, Mapping):
        kept = {k: v for k, v in value.items() if k in ("idle_minutes", "down")}
        return {"down": False, **kept}
    raise reader.refuse(loc, f"cannot read {value!r}", "write minutes, `10h`, or a mapping")
