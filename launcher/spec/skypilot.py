"""SkyPilot task YAML read as it is (reference/skypilot-task.md): each field becomes gpujob's
own, a field that would change what runs and that gpujob cannot honour is refused naming it,
and a cosmetic one is a warning. Pure: the caller gives the environment for `null` envs.

A file is a SkyPilot task when it has no `image:` (gpujob's specs always name one) and
carries something only SkyPilot writes: a shell `run:` string, `num_nodes`, `file_mounts`,
or SkyPilot's `resources` keys. A key SkyPilot's schema does not have is refused as
SkyPilot refuses it (`additionalProperties: False`); one of gpujob's own means a gpujob spec
that forgot its `image:`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from launcher.errors import UsageError
from launcher.spec.both_worlds import GPUJOB_SECTIONS, keep_sections
from launcher.spec.job import JobSpec, reserved_env
from launcher.spec.sky_file_mounts import sky_file_mounts, sky_path
from launcher.spec.sky_lifecycle import git_workdir
from launcher.spec.sky_resources import sky_resources
from launcher.spec.sky_unsupported import sky_config
from launcher.spec.yaml_lines import Path_, under

SKY_ONLY = {"num_nodes", "file_mounts", "config", "service", "pool", "volumes", "secrets",
            "event_callback", "managed_secrets", "api_server_access"}  # fmt: skip
SKY_RESOURCES = {"cloud", "infra", "disk_size", "image_id", "use_spot", "instance_type",
                 "gpus", "memory", "region", "zone", "ports", "labels"}  # fmt: skip
REFUSED = {
    "service": "SkyServe (replicas behind a load balancer)",
    "pool": "worker pools of managed jobs",
    "volumes": "cloud volumes",
    "managed_secrets": "a server-side secrets provider",
    "event_callback": "the managed-jobs controller's callbacks",
}
SERVICE_FIX = ("gpujob runs jobs, not services: serve with SkyPilot, or run the server in "
               "`run:` and reach it with `gpujob port-forward`")  # fmt: skip
IGNORED = {"api_server_access", "inputs", "outputs", "_metadata", "volume_mounts",
           "file_mounts_mapping"}  # fmt: skip
TASK_KEYS = {"name", "workdir", "num_nodes", "resources", "envs", "secrets", "file_mounts",
             "setup", "run", "config", *REFUSED, *IGNORED}  # fmt: skip
"""SkyPilot 0.14.1's top-level task keys (skypilot-task.md §1.2)."""
GPUJOB_ONLY = set(JobSpec.model_fields) - TASK_KEYS
DEFAULTS = {
    ("image",): " (the host's Python, as SkyPilot's default image)",
    ("workdir",): " (nothing is shipped, as SkyPilot ships nothing: the job's workdir starts "
    "empty)",
}


@dataclass
class Translation:
    """The gpujob spec's data, where each key came from, and what `--dry-run` shows."""

    data: dict[str, Any]
    origins: dict[Path_, str]
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)
    """The task's candidate accelerators in its order (`any_of`, `ordered`, a list or set),
    the first of them taken; `submit --up GPU` takes the candidate of that GPU."""
    errors: list[str] = field(default_factory=list)
    """Every refusal of the file, one line each: the translation goes on past one, so the
    caller shows them all at once with the spec's own validation errors."""


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
    data: Mapping[str, Any],
    origins: dict[Path_, str],
    filename: str,
    environ: Mapping[str, str],
    cwd: str,
    up: str | None = None,
    given: Collection[str] = (),
) -> Translation:
    """`environ` gives `null` envs and `~`; `cwd` is what a relative `workdir` starts from,
    as for `sky launch` (SkyPilot reads it against its own current folder, not the task's).
    A refusal is kept in `errors` and the translation goes on (`reader.collect()`)."""
    out = Translation({}, {})
    reader = _Reader(data, origins, filename, out, up)
    keep_sections(data, origins, out.data, out.origins, out.notes)
    for key in data:
        if key in GPUJOB_SECTIONS:
            continue
        with reader.collect():
            reader.known((str(key),), TASK_KEYS, GPUJOB_ONLY)
            if key in REFUSED:
                fix = SERVICE_FIX if key == "service" else "remove it"
                raise reader.refuse((key,), f"{REFUSED[key]} is SkyPilot's own", fix)
            if key in IGNORED:
                out.warnings.append(f"{reader.where(key)}: {key}: SkyPilot-only; ignored")
    stem = re.sub(r"[^a-z0-9_.-]+", "-", str(data.get("name") or _stem(filename)).lower())
    reader.put(("name",), ("name",), stem.strip("-") or "task")
    with reader.collect():
        image = _image(reader)
        reader.put(("image",), ("resources", "image_id"), image, given=image != "host")
    envs: dict[str, str] = {}
    with reader.collect():
        envs = _envs(reader, environ, given)
    if "workdir" not in data:
        reader.put(("workdir",), ("workdir",), None, given=False)
    elif not isinstance(data["workdir"], str):
        with reader.collect():
            git_workdir(reader)
    else:
        with reader.collect():
            workdir = sky_path(data["workdir"], envs, environ, cwd)
            why = f" ({data['workdir']} from the current folder, as SkyPilot reads it)"
            reader.put(("workdir",), ("workdir",), workdir, why=why)
    if "num_nodes" in data:
        reader.put(("nodes",), ("num_nodes",), data["num_nodes"])
    with reader.collect():
        if isinstance(data.get("run"), Mapping):
            why = "SkyPilot's `run` is a shell string, gpujob's a mapping"
            raise reader.gpujob_spec(("run",), why)
        for key in ("setup", "run"):
            value = data.get(key)
            if isinstance(value, list):
                value = "\n".join(map(str, value))
            if value is not None:
                reader.put((key,), (key,), value)
        if data.get("run") is None:
            fix = "add a `run:` block (gpujob runs jobs; `gpujob up` rents hosts)"
            raise reader.refuse(("run",), "a task without `run` only provisions nodes", fix)
    if envs:
        reader.put(("envs",), ("envs",), envs)
    with reader.collect():
        secrets = _secrets(reader) + reader.null_secrets
        if secrets:
            reader.put(("secrets",), ("secrets",), secrets)
    if "config" in data:
        with reader.collect():
            sky_config(reader)
    if data.get("file_mounts"):
        with reader.collect():
            sky_file_mounts(reader, envs, environ, cwd)
    with reader.collect():
        sky_resources(reader)
    return out


def _stem(filename: str) -> str:
    return filename.rsplit("/", 1)[-1].rsplit(".", 1)[0]


@dataclass
class _Reader:
    data: Mapping[str, Any]
    origins: dict[Path_, str]
    filename: str
    out: Translation
    up: str | None = None
    """`submit --up GPU`: a task's candidate of that GPU is taken (sky_resources.py)."""
    null_secrets: list[str] = field(default_factory=list)
    """`NAME: null` envs taken from this environment: secrets."""
    _under: dict[Path_, list[Path_]] | None = None
    """The task's paths by prefix (yaml_lines.under), made on first use."""

    def where(self, *loc: str) -> str:
        for end in range(len(loc), 0, -1):
            if loc[:end] in self.origins:
                return self.origins[loc[:end]]
        return self.filename

    @contextmanager
    def collect(self) -> Iterator[None]:
        """A refusal inside ends only this block: it is kept in `out.errors` and the
        translation goes on, so a file with four problems takes one try."""
        try:
            yield
        except UsageError as err:
            self.out.errors.extend(err.lines())

    def put(self, dst: Path_, src: Path_, value: Any, *, given: bool = True, why: str = "") -> None:
        """`value` at gpujob's `dst`, blamed on SkyPilot's `src`; `given=False`: the task
        leaves `src` out and this is what gpujob does instead (the note says so); `why`
        ends the note."""
        node = self.out.data
        for part in dst[:-1]:
            node = node.setdefault(part, {})
        node[dst[-1]] = value
        where = self.where(*map(str, src)) if given else self.filename
        self.out.origins[dst] = where
        if given:  # the lines inside it too (`envs.NAME`), for a later check's line
            if self._under is None:
                self._under = under(self.origins)
            self.out.origins.update({(*dst, *loc[len(src):]): self.origins[loc]
                                     for loc in self._under.get(tuple(src), ())})  # fmt: skip
        shown = value if not isinstance(value, str) or "\n" not in value else "(shell block)"
        shown = "null" if value is None else shown
        names = ".".join(map(str, src)) if given else f"(no {'.'.join(map(str, src))})"
        self.out.notes.append(f"{where}: {names} -> {'.'.join(map(str, dst))}: {shown}"
                              + DEFAULTS.get(dst, "") * (not given) + why)  # fmt: skip

    def refuse_both(self, resources: Mapping[str, Any], alias: str, name: str) -> None:
        """SkyPilot's own rule (sky/resources.py): an alias and its field never together."""
        if alias in resources and name in resources:
            raise UsageError(
                f"{self.where('resources', alias)}: resources.{alias}: SkyPilot's alias of "
                f"`resources.{name}`, which is given too; keep one (SkyPilot refuses both)"
            )

    def known(self, loc: Path_, keys: Collection[str], gpujobs: Collection[str]) -> None:
        """Refuse a key SkyPilot's schema lacks at `loc`; one of gpujob's own says what the
        file most likely is."""
        name = str(loc[-1])
        if name in keys:
            return
        field_name = ".".join(map(str, loc))
        if name in gpujobs:
            raise self.gpujob_spec(loc, f"`{field_name}` is gpujob's, not SkyPilot's")
        close = difflib.get_close_matches(name, sorted(keys), n=1)
        hint = f"did you mean `{close[0]}`?" if close else "remove it"
        raise UsageError(
            f"{self.where(*map(str, loc))}: {field_name}: unknown key (not in SkyPilot's task "
            f"schema, which refuses it too); {hint}"
        )

    def gpujob_spec(self, loc: Path_, why: str) -> UsageError:
        field_name = ".".join(map(str, loc))
        return UsageError(
            f"{self.where(*map(str, loc))}: {field_name}: this looks like a gpujob spec without "
            f"`image:` ({why}), so it was read as a SkyPilot task; add `image:` (e.g. "
            "`image: host`)"
        )

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


def _envs(reader: _Reader, environ: Mapping[str, str], given: Collection[str]) -> dict[str, str]:
    """SkyPilot's conversions: values through `str()` (`true` -> `True`), `null` required:
    given on the command line (`--env`, `--secret`, `--set envs.NAME=`), else taken from
    this environment as a secret (a token, most often: masked, never in a 0644 file)."""
    envs = reader.data.get("envs") or {}
    if not isinstance(envs, Mapping):
        raise reader.refuse(("envs",), "it must be a mapping of NAME: value", "write one")
    out = {}
    for name, value in envs.items():
        with reader.collect():
            if not isinstance(name, str):
                raise reader.refuse(("envs", name), f"`{name}` is not a variable name",
                                    "write NAME: value")  # fmt: skip
            reserved = reserved_env(str(name))
            if reserved:
                raise UsageError(f"{reader.where('envs', str(name))}: envs.{name}: {reserved}")
            if value is None:
                where = reader.where("envs", str(name))
                if name in given:
                    continue
                if name not in environ:
                    raise UsageError(
                        f"{where}: envs.{name}: required (null in the task): give --secret "
                        f"{name}=VALUE (or export {name} and give --env {name})"
                    )
                reader.null_secrets.append(str(name))
                reader.out.notes.append(
                    f"{where}: envs.{name}: null -> secrets: {name} (taken "
                    "from your environment: masked, never in a 0644 file)"
                )
                continue
            out[str(name)] = str(value)
    return out


def _secrets(reader: _Reader) -> list[str]:
    """Secrets come from the environment only: a value written in the file is refused."""
    secrets = reader.data.get("secrets") or {}
    if isinstance(secrets, list):
        return [str(s).removeprefix("secrets:") for s in secrets]
    if not isinstance(secrets, Mapping):
        raise reader.refuse(("secrets",), "it must be a mapping or a list of names",
                            "write `NAME: null` for each")  # fmt: skip
    names = []
    for name, value in secrets.items():
        with reader.collect():
            if value is not None:
                fix = f"write `{name}: null` and export {name} before submitting"
                raise reader.refuse(
                    ("secrets", str(name)), "gpujob never reads a secret from a file", fix
                )
            names.append(str(name))
    return names
