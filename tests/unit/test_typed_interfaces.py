"""The new layout's packages have no `Any` at their interfaces: every function and class
another package imports from them says what it takes and gives (its parameters, its return,
a class's public methods and fields), so mypy (`make test`) checks the callers. Inside a
package, and inside a function, `Any` may stay where a library gives nothing better."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from planning import REPO

PACKAGES = ("targets", "jobs", "commands", "supervise", "clouds")


def modules() -> list[Path]:
    return sorted(p for name in PACKAGES for p in (REPO / "launcher" / name).rglob("*.py"))


def mentions_any(node: ast.AST | None) -> bool:
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):  # a quoted annotation
        return mentions_any(ast.parse(node.value, mode="eval").body)
    names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)}
    return "Any" in names


def signature_problems(function: ast.FunctionDef | ast.AsyncFunctionDef, where: str) -> list[str]:
    arguments = function.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    found = [f"{where}({a.arg})" for a in every if mentions_any(a.annotation)]
    if mentions_any(function.returns):
        found.append(f"{where} -> return")
    return found


def public(name: str) -> bool:
    return not name.startswith("_") or name == "__init__"


def package_of(module: str) -> str:
    """`launcher.targets.cloud.rent` -> `targets`: the layer it belongs to."""
    return module.split(".")[1] if module.count(".") else module


def imported_from_outside() -> dict[str, set[str]]:
    """Each module's names that modules of another package import (inside functions too)."""
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / "launcher").rglob("*.py")):
        here = package_of(".".join(path.relative_to(REPO).with_suffix("").parts))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("launcher."):
                module = str(node.module)
                if package_of(module) != here:
                    found.setdefault(module, set()).update(a.name for a in node.names)
    return found


IMPORTED = imported_from_outside()


def interface_problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    name = path.relative_to(REPO).as_posix()
    outside = IMPORTED.get(".".join(path.relative_to(REPO).with_suffix("").parts), set())
    found = []
    for node in tree.body:
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        if node.name not in outside:
            continue
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found += signature_problems(node, f"{name}:{node.lineno} {node.name}")
        else:
            for item in node.body:
                where = f"{name}:{item.lineno} {node.name}"
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and public(item.name):
                    found += signature_problems(item, f"{where}.{item.name}")
                elif (
                    isinstance(item, ast.AnnAssign)
                    and isinstance(item.target, ast.Name)
                    and public(item.target.id)
                    and mentions_any(item.annotation)
                ):
                    found.append(f"{where}.{item.target.id}")
    return found


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(REPO / "launcher")))
def test_no_any_at_an_interface(path: Path) -> None:
    assert not interface_problems(path)
