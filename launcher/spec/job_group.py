"""SkyPilot's job groups: one YAML file of several documents, the first a header (`name`,
`execution: parallel`, optionally `primary_tasks` and `termination_delay`), each following
document one task with its own resources, num_nodes, setup and run, all started together.

The shape is SkyPilot's own (docs/source/examples/job-groups.rst and
sky/utils/dag_utils.py `_load_job_group` in skypilot-org/skypilot): the header's known keys
are `name`, `execution`, `primary_tasks`, `termination_delay` (others are warned about and
ignored, as SkyPilot does); the group's and each task's name are letters, digits, `-` and `_`;
task names are unique; `primary_tasks` names tasks of the file; `termination_delay` is a
duration (`30s`, `5m`, a bare number of seconds) or a mapping of task name (or `default`) to
one. Each task document is read by the same loader as a one-task file (spec/load.py, with
`task=`), so a task's errors name their own line in the file, and every error of every
document comes at once.

Addresses (sky/jobs/job_group_networking.py): SkyPilot injects `SKYPILOT_JOBGROUP_NAME` and
makes `{task}-{node}.{group}` resolve through /etc/hosts; an earlier version also gave
`SKYPILOT_JOBGROUP_HOST_{TASK}` (the task's name upper-cased, `-` as `_`), the address of
each task's node 0. gpujob gives both variables, the latter holding an address that works
without any /etc/hosts entry (127.0.0.1 on this machine, the host's address with --on),
because it writes no system file on this machine.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from launcher.errors import GpujobError, ManyUsageErrors, UsageError
from launcher.spec.yaml_lines import Path_, _BoundedLoader, read_text, record_lines

HEADER_KEYS = ("name", "execution", "primary_tasks", "termination_delay")
NAME = re.compile(r"[A-Za-z0-9_-]+")
DURATION = re.compile(r"(\d+)([smhdw]?)")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
GROUP_NAME_ENV = "SKYPILOT_JOBGROUP_NAME"
HOST_ENV = "SKYPILOT_JOBGROUP_HOST_{}"
SKY_HOSTNAME = re.compile(
    r"([A-Za-z0-9_-]+?)-(\d+)\.(\$\{?SKYPILOT_JOBGROUP_NAME\}?|[A-Za-z0-9_-]+)"
)
"""`trainer-0.${SKYPILOT_JOBGROUP_NAME}` (or the group's name written out): SkyPilot's host
names, which resolve only through the /etc/hosts entries SkyPilot writes on its clusters."""


@dataclass(frozen=True)
class Document:
    data: Any
    lines: dict[Path_, int]
    line: int
    """The document's first line in the file."""


@dataclass(frozen=True)
class GroupTask:
    name: str
    nodes: int
    primary: bool


@dataclass(frozen=True)
class JobGroup:
    name: str
    path: Path
    tasks: tuple[GroupTask, ...]
    delays: dict[str, float] = field(default_factory=dict)
    """Seconds before an auxiliary task is stopped once every primary task succeeded (by
    task name; absent: at once)."""
    warnings: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()
    """The header's and the task names' mistakes; the tasks' own fields are checked by
    spec/load.py, and `by_line` puts them all in the file's order."""

    def delay(self, task: str) -> float:
        return self.delays.get(task, self.delays.get("default", 0.0))


def read_documents(path: Path) -> list[Document]:
    """Every YAML document of the file, each with the line of every key (lines counted in
    the whole file), composed under the same bounds as a one-document spec."""
    text = read_text(path, "job spec")
    loader = _BoundedLoader(text, str(path))
    documents = []
    try:
        while loader.check_node():
            node = loader.get_node()
            lines: dict[Path_, int] = {}
            record_lines(node, (), lines)
            data = loader.construct_document(node)
            documents.append(Document(data, lines, node.start_mark.line + 1))
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        raise UsageError(f"{where}: YAML syntax error: {err.problem or err.context}",
                         "fix the YAML at that line") from None  # fmt: skip
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: YAML error: {err}") from None
    finally:
        loader.dispose()
    return documents


def is_group_file(path: str | Path) -> bool:
    """A file whose first YAML document is a mapping with `execution: parallel` (SkyPilot's
    test, `_is_job_group_configs`): only that document is read, so a mistake further on is
    reported by the group's loader at its line, not as a stray second document. A file that
    cannot be read is not one: its own loader says why."""
    try:
        with Path(path).open("rb") as file:
            head = file.read(1 << 20)
    except OSError:
        return False
    if b"execution" not in head:  # most specs, without parsing
        return False
    loader = _BoundedLoader(head.decode("utf-8", "replace"), str(path))
    try:
        node = loader.get_node() if loader.check_node() else None
        first = loader.construct_document(node) if node is not None else None
    except (yaml.YAMLError, GpujobError):
        return False
    finally:
        loader.dispose()
    return isinstance(first, Mapping) and first.get("execution") == "parallel"


def task_document(path: Path, task: str) -> tuple[dict[str, Any], dict[Path_, int]]:
    """The document of the group's task named `task` (spec/load.py's `task=`)."""
    for document in read_documents(path)[1:]:
        if isinstance(document.data, dict) and document.data.get("name") == task:
            return document.data, document.lines
    raise UsageError(
        f"{path}: no task `{task}` in this job group",
        "the group's tasks are the `name:` of each document after the first",
    )


def read_group(path: Path) -> JobGroup:
    """The header and each task's name, node count and role, with every mistake of the
    header and of the tasks' names (the tasks' own fields: spec/load.py, per task)."""
    documents = read_documents(path)
    header = documents[0]
    # an empty document (a trailing `---`) is skipped, as SkyPilot skips it
    tasks = [document for document in documents[1:] if document.data is not None]
    errors: list[str] = []
    warnings: list[str] = []

    def at(document: Document, *loc: str | int) -> str:
        return f"{path}:{document.lines.get(tuple(loc), document.line)}"

    if not isinstance(header.data, dict):
        raise UsageError(f"{path}:{header.line}: the job group's header must be a mapping",
                         "name: my-group\nexecution: parallel")  # fmt: skip
    name = header.data.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        errors.append(f"{at(header, 'name')}: name: the job group needs a name of letters, "
                      "digits, `-` and `_` (SkyPilot's rule: it is part of each task's "
                      "address)")  # fmt: skip
    for key in header.data:
        if key not in HEADER_KEYS:
            warnings.append(f"{at(header, key)}: {key}: not a job group header key "
                            f"({', '.join(HEADER_KEYS)}); ignored, as SkyPilot does")  # fmt: skip
    names: list[str] = []
    nodes: list[int] = []
    for document in tasks:
        data = document.data
        task = data.get("name") if isinstance(data, dict) else None
        if not isinstance(data, dict):
            errors.append(f"{path}:{document.line}: each document after the header is one "
                          "task (a mapping with `name:`, `resources:`, `run:`...)")  # fmt: skip
        elif not isinstance(task, str) or not NAME.fullmatch(task):
            errors.append(f"{at(document, 'name')}: name: each task of a job group needs a "
                          "name of letters, digits, `-` and `_` (it names the task's address "
                          "and its log lines)")  # fmt: skip
        elif task in names:
            errors.append(f"{at(document, 'name')}: name: a second task named `{task}`; "
                          "each task of a job group has its own name")  # fmt: skip
        else:
            names.append(task)
            count = data.get("num_nodes", data.get("nodes", 1))
            nodes.append(count if isinstance(count, int) and count > 0 else 1)
    if not tasks:
        errors.append(f"{path}:{header.line}: a job group needs at least one task document "
                      "after its header")  # fmt: skip
    for document in tasks:
        warnings += _hostnames(document, str(name), names, at)
    primary = _primary(header, names, at, errors)
    delays = _delays(header, names, at, errors)
    group_tasks = tuple(GroupTask(task, count, not primary or task in primary)
                        for task, count in zip(names, nodes, strict=True))  # fmt: skip
    return JobGroup(str(name), path, group_tasks, delays, tuple(warnings), tuple(errors))


def by_line(errors: list[str], path: Path) -> ManyUsageErrors:
    """Every error of the file in one, in the order of its lines."""

    def line(text: str) -> int:
        number = text.removeprefix(f"{path}:").partition(":")[0]
        return int(number) if text.startswith(f"{path}:") and number.isdigit() else 0

    return ManyUsageErrors(sorted(dict.fromkeys(errors), key=line))


def _hostnames(document: Document, group: str, names: list[str], at: Any) -> list[str]:
    """A `run:`/`setup:` that dials a task by SkyPilot's host name: said, with the variable
    that holds the address here."""
    found = []
    data = document.data if isinstance(document.data, dict) else {}
    for key in ("setup", "run"):
        text = data.get(key)
        for match in SKY_HOSTNAME.finditer(text if isinstance(text, str) else ""):
            task, node, suffix = match.groups()
            if task not in names or (not suffix.startswith("$") and suffix != group):
                continue
            better = f"${host_env_name(task)}" if node == "0" else "its node's address"
            found.append(f"{at(document, key)}: {key}: `{match[0]}` is SkyPilot's host name, "
                         "resolved only by the /etc/hosts entries SkyPilot writes on its "
                         f"clusters; gpujob writes none: use {better}")  # fmt: skip
    return found


def _primary(header: Document, names: list[str], at: Any, errors: list[str]) -> list[str]:
    primary = header.data.get("primary_tasks")
    if primary is None:
        return []
    if not isinstance(primary, list) or any(not isinstance(p, str) for p in primary):
        errors.append(f"{at(header, 'primary_tasks')}: primary_tasks: a list of the group's "
                      "task names")  # fmt: skip
        return []
    for index, task in enumerate(primary):
        if task not in names:
            errors.append(f"{at(header, 'primary_tasks', index)}: primary_tasks: no task "
                          f"`{task}` in this group; its tasks: {', '.join(names)}")  # fmt: skip
    return list(primary)


def _delays(header: Document, names: list[str], at: Any, errors: list[str]) -> dict[str, float]:
    given = header.data.get("termination_delay")
    if given is None:
        return {}
    pairs = given.items() if isinstance(given, dict) else [("default", given)]
    delays: dict[str, float] = {}
    for task, value in pairs:
        loc = ("termination_delay", task) if isinstance(given, dict) else ("termination_delay",)
        match = DURATION.fullmatch(str(value)) if isinstance(value, str | int) else None
        if task != "default" and task not in names:
            errors.append(f"{at(header, *loc)}: termination_delay: no task `{task}` in this "
                          f"group; give `default` or one of: {', '.join(names)}")  # fmt: skip
        elif match is None or isinstance(value, bool):
            errors.append(f"{at(header, *loc)}: termination_delay: a duration such as 30s, "
                          f"5m or 1h (got {value!r})")  # fmt: skip
        else:
            delays[str(task)] = float(int(match[1]) * UNITS[match[2]])
    return delays


def host_env_name(task: str) -> str:
    """`SKYPILOT_JOBGROUP_HOST_ROLLOUT_SERVER` for the task `rollout-server`."""
    return HOST_ENV.format(task.upper().replace("-", "_"))


def group_env(group: JobGroup, addresses: Mapping[str, str]) -> dict[str, str]:
    """What every task of the group is given: the group's name and each task's node-0
    address (its own included, as SkyPilot's `get_job_group_env_vars` did)."""
    env = {GROUP_NAME_ENV: group.name}
    for task in group.tasks:
        env[host_env_name(task.name)] = addresses[task.name]
    return env
