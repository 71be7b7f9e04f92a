"""The layout's rule, read from the source: a target's kind is compared only where targets
are defined (targets/, the cloud modules, cli/); everything else asks a Target and its
traits (STYLE.md: `if provider == "slurm"` is the smell)."""

from __future__ import annotations

import re

from planning import REPO

KIND_COMPARISON = re.compile(
    r'(provider|kind) *(==|!=) *"|(==|!=) *"(slurm|lambda|vast|local|ssh)"|startswith\("slurm:'
)
"""The project hook's pattern, and the `--on slurm:` test."""
ALLOWED = ("launcher/targets/", "launcher/clouds/", "launcher/cli/")
ELSEWHERE: dict[str, str] = {}
"""Files the pattern matches for another reason, and why."""


def test_no_kind_name_is_compared_outside_the_targets() -> None:
    found = []
    for path in sorted((REPO / "launcher").rglob("*.py")):
        name = path.relative_to(REPO).as_posix()
        if name.startswith(ALLOWED) or name in ELSEWHERE:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if KIND_COMPARISON.search(line):
                found.append(f"{name}:{number}: {line.strip()}")
    assert not found, "ask the Target's traits instead:\n" + "\n".join(found)


def test_the_exceptions_still_need_to_be_exceptions() -> None:
    """An exception whose file no longer matches is dropped from the list."""
    for name in ELSEWHERE:
        assert KIND_COMPARISON.search((REPO / name).read_text()), name
