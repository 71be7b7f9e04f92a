"""The dry-run view of a Plan: literal argv and whole files, secrets as `***`."""

from __future__ import annotations

import dataclasses
import json
import shlex
from typing import Any

from launcher.plan.model import CopyFile, Plan, RunCommand, SyncDir, WriteFile

MASK = "***"


def plan_text(plan: Plan) -> str:
    head = (
        f"job {plan.job_id}: {plan.name} on {plan.provider} ({plan.runtime} runtime), "
        f"{len(plan.nodes)} node(s) x {plan.nproc_per_node} rank(s) = world size {plan.world_size}"
    )
    lines = [head]
    if plan.grad_accum_steps is not None:
        lines.append(f"grad_accum_steps = {plan.grad_accum_steps}")
    if plan.image_ref:
        lines.append(f"image {plan.image_ref}")
    for check in plan.checks:
        lines.append(
            f"before start: {', '.join(check.from_hosts)} must reach node 0 at "
            f"{check.address}:{check.port} (a listener on {check.host} for the check)"
        )
    for node in plan.nodes:
        lines.append("")
        lines.append(f"node {node.rank} on {node.host}: job dir {node.job_dir}")
        for step in node.steps:
            lines.extend(_step_lines(step))
    return "\n".join(lines) + "\n"


def _step_lines(step: object) -> list[str]:
    if isinstance(step, WriteFile):
        out = [f"  write {step.path} (mode {step.mode:04o})"]
        body = _masked(step.content) if step.secret else step.content
        out.extend(f"    | {line}".rstrip() for line in body.splitlines())
        return out
    if isinstance(step, CopyFile):
        return [f"  copy  {step.source} -> {step.path} (mode {step.mode:04o})"]
    if isinstance(step, SyncDir):
        excluded = ", ".join(step.excludes)
        if step.via is None:
            return [f"  sync  {step.source}/ -> {step.path}/ (excluding {excluded})"]
        return [f"  sync  {step.source}/ -> {step.via}/ (changed files only; excluding "
                f"{excluded})", f"  copy  {step.via}/ -> {step.path}/ (on the host)"]  # fmt: skip
    if isinstance(step, RunCommand):
        if "\n" in step.argv[-1]:
            out = [f"  run   {shlex.join(step.argv[:-1])} <script>"]
            out.extend(f"    | {line}".rstrip() for line in step.argv[-1].splitlines())
        else:
            out = [f"  run   {shlex.join(step.argv)}"]
        out.append(f"        # {step.why}")
        return out
    raise TypeError(f"unknown plan step {step!r}")


def _masked(content: str) -> str:
    """Names stay (a reader checks which secrets go where), values never show."""
    try:
        values = json.loads(content)
    except ValueError:
        names = [line.split("=", 1)[0] for line in content.splitlines() if "=" in line]
        return "".join(f"{name}={MASK}\n" for name in names) or MASK
    return json.dumps({key: MASK for key in values}, sort_keys=True)


def plan_json(plan: Plan) -> str:
    def convert(value: Any) -> Any:
        if isinstance(value, WriteFile) and value.secret:
            return {**dataclasses.asdict(value), "content": _masked(value.content), "kind": "write"}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            kind = {WriteFile: "write", CopyFile: "copy", SyncDir: "sync", RunCommand: "run"}
            data = {f.name: convert(getattr(value, f.name)) for f in dataclasses.fields(value)}
            if type(value) in kind:
                data["kind"] = kind[type(value)]
            return data
        if isinstance(value, tuple | list):
            return [convert(item) for item in value]
        return value

    return json.dumps(convert(plan), indent=2) + "\n"
