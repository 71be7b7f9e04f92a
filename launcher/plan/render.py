"""Jinja rendering for shell: every `{{ value }}` is shell-quoted unless it is a `Word`.

Quoting is the default (a `finalize` hook), not something each template must remember, so a
spec string holding `$(touch /tmp/pwned)` or a backtick reaches the program as a literal.
"""

from __future__ import annotations

import shlex
from functools import cache
from typing import Any


class Word(str):
    """Text already safe as shell (a variable name, a checked identifier): not quoted."""


def _shell_finalize(value: Any) -> str:
    if isinstance(value, Word):
        return value
    return shlex.quote(str(value))


def _word(value: str) -> Word:
    if not value.replace("_", "a").isalnum():
        raise ValueError(f"{value!r} is not a shell identifier")
    return Word(value)


def _argv(groups: list[list[str]]) -> Word:
    """A command line, one group of words per line: `--flag value` pairs read at a glance."""
    return Word(" \\\n    ".join(shlex.join(group) for group in groups if group))


@cache
def _shell_environment() -> Any:
    from launcher.resources import template_environment

    env = template_environment(finalize=_shell_finalize)
    env.filters["word"] = _word
    env.filters["argv"] = _argv
    return env


def render_shell(template: str, **context: Any) -> str:
    return _shell_environment().get_template(template).render(**context)
