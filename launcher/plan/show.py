"""The dry-run view of a Plan: literal argv and whole files, secrets as `***`, in the order
apply carries them out (each node's preparation, the checks before start, the starts and
what a failed start undoes).

Argv is shown as a shell would take it (`shlex` quoting). A host's home folder a dry run
could not ask for is `<home>`, left outside the quotes: `<home>/.gpujob/jobs/...` is the
path the host's home will prefix, not a path to paste.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Iterable
from typing import Any

from launcher.plan.model import (
    HOME_SHOWN,
    UNKNOWN_HOME,
    CopyFile,
    JobLimits,
    Plan,
    ReachCheck,
    RunCommand,
    SecretInput,
    SyncDir,
    WriteFile,
)
from launcher.spec.limits import show_duration

MASK = "***"


def plan_text(plan: Plan) -> str:
    each = "1 process" if plan.one_process_per_node else f"{plan.nproc_per_node} rank(s)"
    head = (
        f"job {plan.job_id}: {plan.name} on {plan.provider} ({plan.runtime} runtime), "
        f"{len(plan.nodes)} node(s) x {each} = world size {plan.world_size}"
    )
    lines = [head]
    if plan.grad_accum_steps is not None:
        lines.append(f"grad_accum_steps = {plan.grad_accum_steps}")
    if plan.image_ref:
        lines.append(f"image {plan.image_ref}")
    if plan.limits is not None:
        lines.extend(limit_lines(plan.limits))
    lines.extend(plan.buckets)
    for node in plan.nodes:  # several nodes: each one's start comes after every preparation
        lines.append("")
        lines.append(f"node {node.rank} on {node.host}: job dir {shown(node.job_dir)}")
        for step in node.steps if plan.starts_in_batch else node.preparation:
            lines.extend(step_lines(step))
    if not plan.starts_in_batch:
        lines.extend(_start_lines(plan))
    return "\n".join(lines) + "\n"


def limit_lines(limits: JobLimits) -> list[str]:
    """One line per limit the agents keep: what ends the job, and how."""
    lines = []
    if limits.max_duration_s is not None:
        kept = (f"last checkpoint synced to {limits.sync_to}" if limits.sync_to else
                "checkpoints kept on the host")  # fmt: skip
        lines.append(
            f"time limit: {show_duration(limits.max_duration_s)} (max_duration), then SIGTERM, "
            f"{limits.grace_s} s grace, {kept}; the job ends `timed out` (exit code 124)"
        )
    if limits.idle_gpu is not None:
        idle = limits.idle_gpu
        window = show_duration(float(idle["minutes"]) * 60)  # type: ignore[arg-type]
        then = ("a warning in the log and `gpujob status`" if idle["action"] == "warn" else
                f"warned at half of it, then SIGTERM, {limits.grace_s} s grace; the job ends "
                "`failed`")  # fmt: skip
        lines.append(
            f"GPU idle: every GPU of the host under {idle['below_percent']:g}% for {window} "
            f"(resources.idle_gpu, from nvidia-smi): {then}"
        )
    return lines


def _start_lines(plan: Plan) -> list[str]:
    """A job of several nodes: the checks, then the starts, then the undo of a failed one."""
    lines = []
    for check in plan.checks:
        lines.extend(_check_lines(check))
    after = " and the checks passed" if plan.checks else ""
    lines += ["", f"start, once every node is prepared{after}:"]
    for node in plan.nodes:
        lines.extend(_run_lines(node.start, f"node {node.rank} on {node.host}: "))
    undo = [node for node in plan.nodes if node.on_failure is not None]
    if undo:
        lines += [
            "",
            "if a node fails to start, every node whose start went out is stopped (its "
            "own too, if unanswered; a start that comes after its cancel refuses):",
        ]
        for node in undo:
            assert node.on_failure is not None
            lines.extend(_run_lines(node.on_failure, f"node {node.rank} on {node.host}: "))
    return lines


def _check_lines(check: ReachCheck) -> list[str]:
    lines = [
        "",
        f"before start: {', '.join(check.from_hosts)} must reach node 0 at "
        f"{check.address}:{check.port} (a listener on {check.host} for the check; "
        f"{check.timeout_s} s at most)",
    ]
    listen = RunCommand(check.listen, "hold node 0's rendezvous port open, count who dials")
    dial = RunCommand(check.dial, "dial node 0's rendezvous port")
    lines.extend(_run_lines(listen, f"on {check.host}: "))
    lines.extend(_run_lines(dial, f"on {', '.join(check.from_hosts)}: "))
    return lines


def step_lines(step: object) -> list[str]:
    if isinstance(step, WriteFile):
        out = [f"  write {shown(step.path)} (mode {step.mode:04o})"]
        body = _masked(step.content) if step.secret else shown(step.content)
        out.extend(f"    | {line}".rstrip() for line in body.splitlines())
        return out
    if isinstance(step, CopyFile):
        return [f"  copy  {step.source} -> {shown(step.path)} (mode {step.mode:04o})"]
    if isinstance(step, SyncDir):
        how = "changed files only, files deleted here deleted there" if step.mirror else (
            "changed files only")  # fmt: skip
        named = f"{', '.join(step.excludes)} and " if step.excludes else ""
        return [f"  sync  {step.source}/ -> {shown(step.path)}/ ({how}; excluding "
                f"{named}what .gitignore/.gpujobignore name)"]  # fmt: skip
    if isinstance(step, RunCommand):
        return _run_lines(step)
    raise TypeError(f"unknown plan step {step!r}")


def _run_lines(step: RunCommand, where: str = "") -> list[str]:
    """`run ARGV`; a multi-line script argument is shown as `<script>`, then line by line."""
    verb = f"  {where}run " if where else "  run   "
    script = next((i for i, word in enumerate(step.argv) if "\n" in word), None)
    if script is None:
        out = [verb + shell_join(step.argv)]
    else:
        words = [shell_word(w) for w in step.argv]
        words[script] = "<script>"
        out = [verb + " ".join(words)]
        out.extend(f"    | {line}".rstrip() for line in shown(step.argv[script]).splitlines())
    out.append(f"        # {step.why}")
    if step.input is not None:
        given = ", ".join(f"{name}={MASK}" for name in step.input.names)
        out.append(f"        # on its stdin, never in a file on the host: {given}")
    return out


def shell_word(word: str) -> str:
    """One argv word as a shell takes it, the unknown home left outside the quotes; an empty
    word stays a word (`''`)."""
    if not word:
        return "''"
    pieces = word.split(UNKNOWN_HOME)
    return HOME_SHOWN.join(shlex.quote(piece) if piece else "" for piece in pieces)


def shell_join(argv: Iterable[str]) -> str:
    return " ".join(shell_word(word) for word in argv)


def shown(text: str) -> str:
    """A path or a file's text with the unknown home as `<home>`. Where the text quoted a
    path under it (`'/.gpujob-unknown-home/a b'`), the placeholder moves out of the quotes:
    `<home>'/a b'`, the same words to a shell."""
    return text.replace(f"'{UNKNOWN_HOME}", f"{HOME_SHOWN}'").replace(UNKNOWN_HOME, HOME_SHOWN)


def _masked(content: str) -> str:
    """Names stay (a reader checks which secrets go where), values never show."""
    try:
        values = json.loads(content)
    except ValueError:
        names = [line.split("=", 1)[0] for line in content.splitlines() if "=" in line]
        return "".join(f"{name}={MASK}\n" for name in names) or MASK
    return json.dumps({key: MASK for key in values}, sort_keys=True)


KINDS: dict[type, str] = {WriteFile: "write", CopyFile: "copy", SyncDir: "sync", RunCommand: "run"}


def as_json(value: Any) -> Any:
    """A Plan or any of its parts as the dry run's JSON shows it: fields as they are (argv
    as lists of words), the unknown home as `<home>`, secrets' values `***`. The executor's
    trace of the steps it ran (runtime/trace.py) uses it too, so the two compare as equals."""
    if isinstance(value, SecretInput):
        return {"names": list(value.names), "content": MASK, "on": "stdin"}
    if isinstance(value, WriteFile) and value.secret:
        return {**dataclasses.asdict(value), "path": shown(value.path),
                "content": _masked(value.content), "kind": "write"}  # fmt: skip
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        data = {f.name: as_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
        if type(value) in KINDS:
            data["kind"] = KINDS[type(value)]
        return data
    if isinstance(value, tuple | list):
        return [as_json(item) for item in value]
    if isinstance(value, dict):
        return {key: as_json(item) for key, item in value.items()}
    return shown(value) if isinstance(value, str) else value


def plan_data(plan: Plan) -> dict[str, Any]:
    """The Plan as `plan_json` prints it, before the text: `starts_in_batch` says whether
    the start ends the node's one batch."""
    data: dict[str, Any] = as_json(plan)
    if not plan.one_process_per_node:  # ranks: world_size and nproc_per_node say it all
        del data["one_process_per_node"]
    if not plan.buckets:
        del data["buckets"]
    data["starts_in_batch"] = plan.starts_in_batch
    return data


def plan_json(plan: Plan) -> str:
    return json.dumps(plan_data(plan), indent=2) + "\n"
