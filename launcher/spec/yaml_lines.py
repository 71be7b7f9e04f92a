"""YAML with the line of every key: the one parser behind job specs and image definitions,
so that any error can name the line to change.

The composer is bounded, because a spec is input from anyone: a file past `MAX_BYTES`,
bytes that are not UTF-8, nesting past `MAX_DEPTH`, aliases that expand past `MAX_VALUES`
nodes or `MAX_EXPANDED` characters (a "billion laughs" composes in microseconds and
expands in hours; one long string aliased 2000 times takes gigabytes) and a key written
twice in one mapping (YAML would keep the last, silently) are each refused in one line
while the document is composed, before anything walks the expanded tree.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from launcher.errors import UsageError

Path_ = tuple[str | int, ...]

MAX_BYTES = 1024 * 1024
MAX_DEPTH = 64
MAX_VALUES = 100_000
MAX_EXPANDED = 8 * 1024 * 1024


MAX_NUMBER_CHARS = 64

# YAML 1.2's numbers: no sexagesimal `1:30` (a 1 MiB `1:3:3:...` took 68 s inside PyYAML)
_INT = re.compile(
    r"^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$"
)
_FLOAT = re.compile(
    r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
)


def _resolvers() -> dict[Any, list[tuple[str, re.Pattern[str]]]]:
    """SafeLoader's implicit types less timestamps (a date stays the string written, so
    `name: 2001-13-01` is a name, not a crash) and with YAML 1.2 ints and floats."""
    table: dict[Any, list[tuple[str, re.Pattern[str]]]] = {}
    for first, pairs in yaml.SafeLoader.yaml_implicit_resolvers.items():
        kept = []
        for tag, regexp in pairs:
            if tag.endswith(":timestamp"):
                continue
            if tag.endswith(":int"):
                regexp = _INT
            elif tag.endswith(":float"):
                regexp = _FLOAT
            kept.append((tag, regexp))
        table[first] = kept
    return table


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader whose composer counts each node's expanded size and depth as it goes."""

    def __init__(self, text: str, filename: str) -> None:
        super().__init__(text)
        self.filename = filename
        self.path: list[str | int | None] = []
        self.sizes: dict[int, int] = {}
        self.expanded: dict[int, int] = {}  # characters once aliases are expanded

    yaml_implicit_resolvers = _resolvers()

    def refuse(self, mark: yaml.Mark | None, what: str, fix: str) -> UsageError:
        where = f"{self.filename}:{mark.line + 1}" if mark else self.filename
        return UsageError(f"{where}: {what}", fix)

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) and event.anchor in self.anchors:
            aliased = self.anchors[event.anchor]
            if id(aliased) not in self.sizes:
                raise self.refuse(
                    event.start_mark,
                    f"alias *{event.anchor} refers to the node that contains it",
                    "a spec cannot be recursive; write the value out",
                )
        self.path.append(index.value if isinstance(index, yaml.ScalarNode) else index)
        if len(self.path) > MAX_DEPTH:
            raise self.refuse(
                event.start_mark,
                f"nesting deeper than {MAX_DEPTH} levels",
                "a job spec is a few levels deep; flatten this value",
            )
        node = super().compose_node(parent, index)
        if id(node) not in self.sizes:
            children = node.value if isinstance(node, yaml.SequenceNode) else []
            if isinstance(node, yaml.MappingNode):
                children = [child for pair in node.value for child in pair]
                self.refuse_duplicate_keys(node)
            self.sizes[id(node)] = 1 + sum(self.sizes[id(child)] for child in children)
            own = len(node.value) if isinstance(node, yaml.ScalarNode) else 0
            self.expanded[id(node)] = own + sum(self.expanded[id(c)] for c in children)
        self.path.pop()
        if self.sizes[id(node)] > MAX_VALUES:
            raise self.refuse(
                event.start_mark,
                f"more than {MAX_VALUES} values once its aliases are expanded",
                "use fewer aliases (`*name`) or write the values out",
            )
        if self.expanded[id(node)] > MAX_EXPANDED:
            raise self.refuse(
                event.start_mark,
                f"more than {MAX_EXPANDED // (1024 * 1024)} MiB once its aliases are expanded",
                "use fewer aliases (`*name`) or keep large data out of the spec",
            )
        return node

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """A value Python cannot build (a 5000-digit int) is one line at its node."""
        if node.tag.endswith((":int", ":float")) and len(node.value) > MAX_NUMBER_CHARS:
            raise self.refuse(
                node.start_mark,
                f"a number of more than {MAX_NUMBER_CHARS} characters",
                "write a smaller number, or quote it to make it a string",
            )
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, OverflowError) as err:
            raise self.refuse(node.start_mark, f"cannot read this value: {err}",
                              "quote it to make it a string") from None  # fmt: skip

    def refuse_duplicate_keys(self, node: yaml.MappingNode) -> None:
        seen: dict[str, int] = {}
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.refuse(
                    key_node.start_mark,
                    "a key that is a list or mapping",
                    "write each key as a plain name",
                )
            if key_node.value == "<<":
                continue
            if key_node.value in seen:
                field = ".".join(str(p) for p in (*self.path, key_node.value) if p is not None)
                raise self.refuse(
                    key_node.start_mark,
                    f"{field}: key written twice (also at line {seen[key_node.value]})",
                    "keep one of them: YAML would silently keep the last",
                )
            seen[key_node.value] = key_node.start_mark.line + 1


def parse_yaml(
    text: str, filename: str, what: str, example: str
) -> tuple[dict[str, Any], dict[Path_, int]]:
    """The mapping and the line of every key and item in it, by path (`("run", "args", 0)`);
    a syntax error or a document that is not a mapping is one line naming file and line."""
    lines: dict[Path_, int] = {}
    loader = None
    try:
        loader = _BoundedLoader(text, filename)
        node = loader.get_single_node()
        if node is not None:
            record_lines(node, (), lines)  # before construction merges `<<` keys in place
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        if "found another document" in str(err.problem):  # SkyPilot's job groups, pipelines
            from launcher.spec.sky_unsupported import GROUPS, GROUPS_FIX

            raise UsageError(f"{filename}:{mark.line + 1 if mark else 1}: {GROUPS}",
                             GROUPS_FIX) from None  # fmt: skip
        raise UsageError(
            f"{where}: YAML syntax error: {err.problem or err.context}",
            "fix the YAML at that line (indentation, a missing `:` or an unclosed quote)",
        ) from None
    except yaml.reader.ReaderError as err:
        line = text.count("\n", 0, err.position) + 1
        raise UsageError(
            f"{filename}:{line}: not a text file: control character {err.character:#04x}",
            "give a YAML text file",
        ) from None
    except yaml.YAMLError as err:
        raise UsageError(f"{filename}: YAML error: {err}") from None
    finally:
        if loader is not None:
            loader.dispose()
    if not isinstance(data, dict):
        raise UsageError(f"{filename}:1: {what}", example)
    return data, lines


def parse_value(text: str, where: str) -> Any:
    """One value as YAML reads it (a `--set` flag's), under the same bounds as a file."""
    loader = _BoundedLoader(text, where)
    try:
        node = loader.get_single_node()
        return loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def record_lines(node: yaml.Node, loc: Path_, lines: dict[Path_, int]) -> None:
    lines[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = (*loc, key_node.value)
            lines[key] = key_node.start_mark.line + 1
            record_lines(value_node, key, lines)
            lines[key] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            record_lines(item, (*loc, index), lines)


def under(origins: dict[Path_, str]) -> dict[Path_, list[Path_]]:
    """Every recorded path by each of its prefixes: what lies under a key, found in one
    lookup instead of a scan of every path (a file of many keys would take their square)."""
    index: dict[Path_, list[Path_]] = {}
    for loc in origins:
        for end in range(1, len(loc) + 1):
            index.setdefault(loc[:end], []).append(loc)
    return index


def dotted(lines: dict[Path_, int]) -> dict[str, int]:
    """The same lines keyed `requirements.3`, as pydantic locations print."""
    return {".".join(map(str, loc)): line for loc, line in lines.items() if loc}


def read_yaml(
    path: Path, kind: str, what: str, example: str
) -> tuple[dict[str, Any], dict[Path_, int]]:
    """`path`'s mapping and the line of every key; a file that cannot be read, is too big
    or is not UTF-8 is one line naming it (`kind`: "job spec", "image definition")."""
    return parse_yaml(read_text(path, kind), str(path), what, example)


def read_text(path: Path, kind: str) -> str:
    """The file's text, read under the same bounds as any spec (spec/job_group.py reads
    every document of it)."""
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_BYTES + 1)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such {kind}", "check the path") from None
    except IsADirectoryError:
        raise UsageError(f"{path}: is a folder, not a {kind}", "give the YAML file") from None
    except OSError as err:
        raise UsageError(f"{path}: cannot read the {kind}: {err.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise UsageError(
            f"{path}:1: the {kind} is larger than {MAX_BYTES // 1024} KiB",
            "is it the right file? keep data out of the spec and point to it",
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise UsageError(
            f"{path}:{line}: not UTF-8 text (byte {raw[err.start]:#04x})",
            f"give the YAML file of the {kind}, saved as UTF-8",
        ) from None
    return text
