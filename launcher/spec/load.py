"""Load a job YAML, apply its profile and `--set` overrides, validate, and explain failures.

Every error is one line that names the file, the line, the field and what to do: the YAML is
composed once to remember where each key was written, and pydantic's error location is mapped
back to that line (or to the `--set` that introduced the value).
"""

from __future__ import annotations

import copy
import difflib
import os
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from launcher.errors import ManyUsageErrors, UsageError
from launcher.spec import skypilot
from launcher.spec.both_worlds import own_spec_names, rclone_remotes
from launcher.spec.candidates import taken
from launcher.spec.env_flags import apply_env_flags, flag_environ, provided
from launcher.spec.job import JobSpec
from launcher.spec.run import FieldError
from launcher.spec.skypilot import Translation
from launcher.spec.yaml_lines import Path_, parse_value, read_yaml


@dataclass(frozen=True)
class LoadedSpec:
    spec: JobSpec
    path: Path
    origins: dict[Path_, str] = field(default_factory=dict)
    translation: Translation | None = None
    """Set when the file is a SkyPilot task: its fields as gpujob's, for `--dry-run`."""

    @property
    def workdir(self) -> Path | None:
        """None: nothing is shipped (`workdir: null`, a SkyPilot task without one)."""
        if self.spec.workdir is None:
            return None
        return (self.path.parent / self.spec.workdir).resolve()

    def where(self, *loc: str | int) -> str:
        """`file:line` (or the `--set` flag) that wrote the field at `loc`."""
        return _origin_of(self.origins, loc, str(self.path))


def load_job_spec(
    path: str | Path,
    sets: list[str] | tuple[str, ...] = (),
    *,
    up: str | None = None,
    envs: tuple[str, ...] = (),
    secrets: tuple[str, ...] = (),
    task: str | None = None,
) -> LoadedSpec:
    """`up`: `submit --up GPU`, which picks a SkyPilot task's candidate of that GPU; `envs`
    and `secrets`: `submit --env`/`--secret` (spec/env_flags.py); `task`: the document of
    that name in a job group's file (spec/job_group.py)."""
    path = Path(path)
    if task is not None:
        from launcher.spec.job_group import task_document

        data, lines = task_document(path, task)
    else:
        data, lines = read_yaml(
            path,
            "job spec",
            "a job spec is a mapping of keys such as `name`, `image`, `run`",
            "`gpujob init quickstart` writes an example; `gpujob schema` lists every field",
        )
    origins = {loc: f"{path}:{line}" for loc, line in lines.items()}
    translation = None
    overrides = [_parse_set(item) for item in sets]
    if skypilot.is_task(data):
        given = provided(envs, secrets, [key for key, _ in overrides])
        translation = skypilot.translate(
            data, origins, str(path), flag_environ(), os.getcwd(), up, given
        )
        data, origins = translation.data, translation.origins
    apply_env_flags(data, origins, envs, secrets, flag_environ())
    refusals = list(translation.errors) if translation else own_spec_names(data, origins, str(path))
    refusals += rclone_remotes(data, origins, str(path))
    for key, _ in overrides:
        flag = f"--set {'.'.join(map(str, key))}"
        origins[key] = flag
        for end in range(1, len(key)):
            origins.setdefault(key[:end], flag)
    profile = next((value for key, value in overrides if key == ("profile",)), data.get("profile"))
    if profile is not None:
        data = _apply_profile(data, profile, origins, str(path))
    for key, value in overrides:
        _claim_replaced_parents(data, key, origins)
        _set_path(data, key, value)
    try:
        spec = JobSpec.model_validate(data)
    except ValidationError as err:
        raise _explain(err, origins, str(path), refusals) from None
    if refusals:
        raise _many(refusals, str(path))
    if translation is None:  # a task's translation takes its candidate itself
        spec = spec.model_copy(update={"resources": taken(spec.resources, up)})
    return LoadedSpec(spec=spec, path=path, origins=origins, translation=translation)


def load_requested(request: Mapping[str, Any]) -> LoadedSpec:
    """The spec as a launch request asked for it (`spec_path`, `sets`, `up`, `envs`,
    `secrets`: a LaunchRequest's fields, or recovery's record of them): the launch,
    `--resume-from` and recovery's checkpoint look-up read the same spec, env flags included."""
    return load_job_spec(request["spec_path"], tuple(request.get("sets") or ()),
                         up=request.get("up"), envs=tuple(request.get("envs") or ()),
                         secrets=tuple(request.get("secrets") or ()),
                         task=request.get("group_task"))  # fmt: skip


def _parse_set(item: str) -> tuple[Path_, Any]:
    key, sep, raw = item.partition("=")
    if not sep or not key or any(not part for part in key.split(".")):
        raise UsageError(f"--set {item}: write it as KEY=VALUE, e.g. --set run.nproc_per_node=4")
    try:
        value = parse_value(raw, f"--set {key}") if raw else ""
    except yaml.YAMLError:
        value = raw
    if isinstance(value, int | float) and not isinstance(value, bool) and str(value) != raw:
        value = raw  # `1.10`, `0755`: keep what was typed; the field's type converts it
    parts: list[str | int] = [int(p) if p.isdigit() else p for p in key.split(".")]
    return tuple(parts), value


def _claim_replaced_parents(data: Any, key: Path_, origins: dict[Path_, str]) -> None:
    """A `--set a.b=x` that turns a scalar `a` into a mapping is blamed for `a` too."""
    node = data
    for end, part in enumerate(key[:-1], start=1):
        node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict | list):
            for rest in range(end, len(key)):
                origins[key[:rest]] = f"--set {'.'.join(map(str, key))}"
            return


def _set_path(data: dict[str, Any], key: Path_, value: Any) -> None:
    target: Any = data
    for part in key[:-1]:
        if isinstance(target, list) and isinstance(part, int) and part < len(target):
            target = target[part]
            continue
        if not isinstance(target, dict):
            raise UsageError(f"--set {'.'.join(map(str, key))}: `{part}` is not a mapping")
        if not isinstance(target.get(part), dict | list):
            target[part] = {}
        target = target[part]
    if (
        isinstance(target, list) and isinstance(key[-1], int) and key[-1] < len(target)
    ) or isinstance(target, dict):
        target[key[-1]] = value
    else:
        raise UsageError(f"--set {'.'.join(map(str, key))}: cannot set a field there")


def _apply_profile(
    data: dict[str, Any], profile: Any, origins: dict[Path_, str], filename: str
) -> dict[str, Any]:
    profiles = data.get("profiles") or {}
    if (
        not isinstance(profile, str)
        or not isinstance(profiles, dict)
        or any(not isinstance(name, str) for name in profiles)
    ):
        raise UsageError(
            f"{_origin_of(origins, ('profile',), filename)}: profile: give a profile's name, "
            "and `profiles:` as a mapping of names to overrides",
            "profiles:\n  big: {nodes: 4}\nprofile: big",
        )
    if profile not in profiles:
        known = ", ".join(sorted(profiles))
        raise UsageError(
            f"{_origin_of(origins, ('profile',), filename)}: profile: no profile `{profile}` "
            f"in {filename}",
            f"known profiles: {known}" if known else "add a `profiles:` mapping to the spec",
        )
    merged = copy.deepcopy(data)
    merged["profile"] = profile
    overrides = profiles[profile] or {}
    if not isinstance(overrides, dict):
        raise UsageError(f"{filename}: profiles.{profile} must be a mapping of overrides")
    from launcher.spec.yaml_lines import under

    src = ("profiles", profile)
    _deep_merge(merged, overrides, src, (), origins, under(origins))
    return merged


def _deep_merge(
    base: dict[str, Any], extra: dict[str, Any], src: Path_, dst: Path_,
    origins: dict[Path_, str], index: dict[Path_, list[Path_]],
) -> None:  # fmt: skip
    """`extra` (the profile at `src`) over `base` (at `dst`); each overriding value's lines
    are recorded at its new place, found through `index` (the profile's paths by prefix)."""
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value, (*src, key), (*dst, key), origins, index)
            continue
        base[key] = copy.deepcopy(value)
        for loc in index.get((*src, key), ()):
            origins[(*dst, key, *loc[len(src) + 1 :])] = origins[loc]


def _origin_of(origins: dict[Path_, str], loc: Path_, default: str) -> str:
    for end in range(len(loc), -1, -1):
        if loc[:end] in origins:
            return origins[loc[:end]]
    return default


def _explain(
    err: ValidationError, origins: dict[Path_, str], filename: str, refusals: list[str]
) -> UsageError:
    """Every error of the file at once, one line each, in the order of the file's lines
    (`--set` flags after them), so that a file with four mistakes takes one try. With a
    SkyPilot task's refusals, a field the refusal left out is not also "missing"."""
    errors = [e for e in err.errors() if not (refusals and e["type"] == "missing")]
    return _many([*refusals, *(_explain_one(error, origins, filename) for error in errors)],
                 filename)  # fmt: skip


def _many(lines: list[str], filename: str) -> UsageError:
    return ManyUsageErrors(sorted(set(lines), key=lambda text: _line_order(text, filename)))


def _line_order(text: str, filename: str) -> tuple[int, int, str]:
    if text.startswith(f"{filename}:"):
        number = text[len(filename) + 1 :].partition(":")[0]
        return (0, int(number) if number.isdigit() else 0, text)
    return (1, 0, text)


def _explain_one(error: Any, origins: dict[Path_, str], filename: str) -> str:
    loc: Path_ = tuple(part for part in error["loc"] if not str(part).startswith("function-"))
    cause = (error.get("ctx") or {}).get("error")
    if isinstance(cause, FieldError):
        loc = cause.loc
    field_name = ".".join(map(str, loc)) or "(top level)"
    where = _origin_of(origins, loc, filename)
    error_type = error["type"]
    message = error["msg"].removeprefix("Value error, ")
    if error_type == "extra_forbidden":
        known = _field_names(JobSpec, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean `{close[0]}`?" if close else f"known keys: {', '.join(known)}"
        return f"{where}: {field_name}: unknown key; {hint}"
    if error_type == "missing":
        return f"{where}: {field_name}: required field is missing; add `{loc[-1]}:` to the spec"
    got = error.get("input")
    shown = f" (got {got!r})" if isinstance(got, str | int | float | bool) else ""
    if loc[:1] == ("notify",):  # a value there may be a webhook's URL pasted in: a secret
        shown = ""
    return f"{where}: {field_name}: {message}{shown}"


def _field_names(model: type[BaseModel], loc: Path_) -> list[str]:
    """The keys allowed at `loc`, for "did you mean"."""
    annotation: Any = model
    for part in loc:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            info = annotation.model_fields.get(str(part))
            if info is None:
                return []
            annotation = info.annotation
        elif typing.get_origin(annotation) in (dict, list):
            annotation = typing.get_args(annotation)[-1]
        else:
            return []
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return list(annotation.model_fields)
    return []


def _unwrap(annotation: Any) -> Any:
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return options[0] if len(options) == 1 else annotation
    return annotation
