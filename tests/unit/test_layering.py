"""The dependency rule of STYLE.md, read from the source: the agent is standard library only,
spec/ and plan/ import nothing that does I/O, and the CLI starts without the heavy libraries."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from planning import REPO

LAUNCHER = REPO / "launcher"
SIDE_EFFECTS = ("clouds", "remote", "runtime", "state", "storage", "images", "targets", "jobs",
                "supervise", "commands", "cli")  # fmt: skip
IO_LIBRARIES = {"subprocess", "socket", "sqlite3", "paramiko", "boto3", "docker",
                "requests", "urllib", "http", "shutil"}  # fmt: skip


def imports(path: Path) -> set[str]:
    """Absolute names of every module `path` imports, at any depth (inside functions too)."""
    package = ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (LAUNCHER / folder).rglob("*.py"))


SHIPPED_BESIDE = {p.stem for p in (LAUNCHER / "agent").glob("*.py")}
"""The agent's own modules, shipped beside it and imported as siblings on the host."""


@pytest.mark.parametrize("path", sources("agent"), ids=lambda p: p.name)
def test_the_agent_is_standard_library_only(path: Path) -> None:
    tops = {name.split(".")[0] for name in imports(path)}
    assert "launcher" not in tops
    allowed = set(sys.stdlib_module_names) | {"__future__"} | SHIPPED_BESIDE
    assert tops <= allowed, tops - allowed


@pytest.mark.parametrize("path", sources("spec", "plan"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_spec_and_plan_import_nothing_that_does_io(path: Path) -> None:
    names = imports(path)
    forbidden = {f"launcher.{layer}" for layer in SIDE_EFFECTS}
    assert not {n for n in names if any(n == f or n.startswith(f"{f}.") for f in forbidden)}
    assert not {n for n in names if n.split(".")[0] in IO_LIBRARIES}


def test_the_cli_starts_without_heavy_imports() -> None:
    heavy = ["pydantic", "jinja2", "yaml", "paramiko", "boto3", "docker", "requests", "rich"]
    probe = (
        "import sys, launcher.cli, launcher.cli.app; "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert result.stdout.strip() == "[]"


def test_the_layers_hold_by_import_linter() -> None:
    """pyproject.toml's contracts: each package imports only those below it, imports made
    inside functions included (where a cycle hides once start-up work moves imports there)."""
    tool = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run([str(tool)], capture_output=True, text=True, cwd=REPO, check=False)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "0 broken" in result.stdout
