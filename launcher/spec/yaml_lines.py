"""YAML with the line of every key: the one parser behind job specs and image definitions,
so that any error can name the line to change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from launcher.errors import UsageError

Path_ = tuple[str | int, ...]


def parse_yaml(
    text: str, filename: str, what: str, example: str
) -> tuple[dict[str, Any], dict[Path_, int]]:
    """The mapping and the line of every key and item in it, by path (`("run", "args", 0)`);
    a syntax error or a document that is not a mapping is one line naming file and line."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{filename}:{mark.line + 1}:{mark.column + 1}" if mark else filename
        raise UsageError(
            f"{where}: YAML syntax error: {err.problem or err.context}",
            "fix the YAML at that line (indentation, a missing `:` or an unclosed quote)",
        ) from None
    except yaml.YAMLError as err:
        raise UsageError(f"{filename}: YAML error: {err}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{filename}:1: {what}", example)
    lines: dict[Path_, int] = {}
    record_lines(node, (), lines)
    return data, lines


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


def dotted(lines: dict[Path_, int]) -> dict[str, int]:
    """The same lines keyed `requirements.3`, as pydantic locations print."""
    return {".".join(map(str, loc)): line for loc, line in lines.items() if loc}


def read_yaml(
    path: Path, kind: str, what: str, example: str
) -> tuple[dict[str, Any], dict[Path_, int]]:
    """`path`'s mapping and the line of every key; a file that cannot be read is
    one line naming it (`kind`: "job spec", "image definition")."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UsageError(f"{path}: no such {kind}", "check the path") from None
    except OSError as err:
        raise UsageError(f"{path}: cannot read the {kind}: {err.strerror}") from None
    return parse_yaml(text, str(path), what, example)
