"""A SLURM job's requeue, on the batch host: the script starts again from the top. Stdlib only.

Shipped beside the agent for a SLURM job with `recovery:` (queued with `--requeue`). SLURM
requeues it itself on a node failure or a preemption, or when asked (`scontrol requeue`),
and sets SLURM_RESTART_COUNT. The batch script calls `start` before it touches anything:

- first attempt: the planned files that the script then edits (each node's run.sh and
  job.json, node_ips: node addresses go in there) and the secrets each agent deletes at its
  start are copied into `requeue/` in the job's folder (0700, files 0600, only the job's user
  reads them), so that a later attempt starts from the plan, not from the last attempt;
- a later attempt: counted against `recovery.max_restarts` (over it: every node recorded
  failed, saying so, and the copies removed); else each node's status of the last attempt
  moved into `node-N/attempt-K/`, the planned files and secrets put back, and the newest
  complete checkpoint of this job's own checkpoint folder chosen (printed: the script
  exports it as GPUJOB_RESUME_FROM), with one line in node 0's log saying so.

`end` removes the copies once the job has ended for good (every node recorded its own end;
`gpujob cancel` removes them too). Nothing here prints a secret.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import ckpt_store

KEPT = "requeue"
PLANNED = ("run.sh", "job.json")
SECRETS = ("secrets.json", "secrets.env", "storage.json", "notify.json")
"""What each node's agent deletes once its job started (the cancel's SECRETS_RM, too)."""
PER_ATTEMPT = ("status.json", "cancel-requested", "hooks-down.done")
"""A node's record of one attempt: moved aside so the next attempt's agent starts afresh
(a requeue's TERM reaches each agent as a cancel, which a later start would obey)."""
OVER = 3
"""`start`'s exit code when max_restarts is used up: the script ends the job failed."""


def keep(job_dir: Path, nnodes: int) -> None:
    """The first attempt's copies of what a later one needs as planned."""
    kept = job_dir / KEPT
    kept.mkdir(mode=0o700, exist_ok=True)
    os.chmod(kept, 0o700)
    _copy(job_dir / "node_ips", kept / "node_ips")
    for rank in range(nnodes):
        into = kept / f"node-{rank}"
        into.mkdir(mode=0o700, exist_ok=True)
        for name in PLANNED + SECRETS:
            _copy(job_dir / f"node-{rank}" / name, into / name)


def restore(job_dir: Path, nnodes: int) -> None:
    """The planned files and the secrets back where the first attempt found them."""
    kept = job_dir / KEPT
    _copy(kept / "node_ips", job_dir / "node_ips", mode=0o644)
    for rank in range(nnodes):
        node_dir = job_dir / f"node-{rank}"
        for name in PLANNED:
            _copy(kept / f"node-{rank}" / name, node_dir / name, mode=0o644)
        for name in SECRETS:
            _copy(kept / f"node-{rank}" / name, node_dir / name)


def set_aside(job_dir: Path, nnodes: int, attempt: int) -> None:
    """Each node's record of the attempt that ended (its log stays: the next one appends)."""
    for rank in range(nnodes):
        node_dir = job_dir / f"node-{rank}"
        into = node_dir / f"attempt-{attempt}"
        into.mkdir(exist_ok=True)
        for name in PER_ATTEMPT:
            if (node_dir / name).exists():
                os.replace(node_dir / name, into / name)
    (job_dir / "time-up").unlink(missing_ok=True)


def resume_choice(checkpoint_dir: Path) -> ckpt_store.Checkpoint | None:
    """The newest complete checkpoint in the job's own folder (its marker written): a
    requeued job never resumes from a half-written save, nor from another run's."""
    return ckpt_store.latest_complete(checkpoint_dir)


def requeue_line(attempt: int, found: ckpt_store.Checkpoint | None) -> str:
    frm = f"resuming from {found.name}" if found else "no complete checkpoint yet: from the start"
    return f"requeued by SLURM (attempt {attempt}): {frm}"


def over_line(restarts: int, max_restarts: int) -> str:
    return (f"requeued by SLURM (attempt {restarts + 1}) but recovery.max_restarts "
            f"({max_restarts}) is used up: the job ends failed")  # fmt: skip


def start(job_dir: Path, nnodes: int, restarts: int, max_restarts: int,
          checkpoint_dir: Path) -> tuple[int, str, str]:  # fmt: skip
    """(exit code, the line to say or '', the checkpoint to resume from or '')."""
    if restarts <= 0:
        keep(job_dir, nnodes)
        return 0, "", ""
    set_aside(job_dir, nnodes, restarts)
    if restarts > max_restarts:
        line = over_line(restarts, max_restarts)
        for rank in range(nnodes):
            _write_json(job_dir / f"node-{rank}" / "status.json", {
                "state": "failed", "exit_code": 1, "reason": line, "ended_at": time.time(),
                "slurm_restart": restarts})  # fmt: skip
        end(job_dir)
        _say(job_dir, line)
        return OVER, line, ""
    restore(job_dir, nnodes)
    found = resume_choice(checkpoint_dir)
    line = requeue_line(restarts + 1, found)
    _say(job_dir, line)
    return 0, line, str(found.path) if found else ""


def end(job_dir: Path) -> None:
    shutil.rmtree(job_dir / KEPT, ignore_errors=True)


def ended_for_good(job_dir: Path, nnodes: int) -> bool:
    """Every node recorded an end of its own (succeeded, failed, timed out): the job's end.
    A node `cancelled` (the TERM of a requeue looks like a cancel), `lost` or with no end
    (its host died: NODE_FAIL) may be followed by another attempt, which needs the copies;
    `gpujob cancel` removes them itself."""
    own = ("succeeded", "failed", "timed out")
    return all(_read_json(job_dir / f"node-{rank}" / "status.json").get("state") in own
               for rank in range(nnodes))  # fmt: skip


def _copy(source: Path, dest: Path, mode: int = 0o600) -> None:
    """Atomic, created with `mode` (never readable by others, even for a moment)."""
    try:
        data = source.read_bytes()
    except FileNotFoundError:
        return
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, mode)
    os.replace(tmp, dest)


def _write_json(path: Path, data: dict[str, object]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _say(job_dir: Path, line: str) -> None:
    """Into node 0's log (what `gpujob logs` shows) and SLURM's output file (stderr)."""
    config = _read_json(job_dir / "node-0" / "job.json")
    try:
        with open(job_dir / "node-0" / str(config.get("log", "job.log")), "ab") as log:
            log.write(f"[gpujob] {line}\n".encode())
    except OSError:
        pass
    print(f"[gpujob] {line}", file=sys.stderr)


def _read_json(path: Path) -> dict[str, object]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def main(argv: list[str]) -> int:
    """`start JOB_DIR NNODES RESTARTS MAX_RESTARTS CHECKPOINT_DIR` (prints the checkpoint to
    resume from, or nothing) | `end JOB_DIR NNODES` (the copies go if the job has ended)."""
    if len(argv) == 3 and argv[0] == "end":
        if ended_for_good(Path(argv[1]), int(argv[2])):
            end(Path(argv[1]))
        return 0
    if len(argv) == 6 and argv[0] == "start":
        job_dir, nnodes, restarts, max_restarts, checkpoint_dir = argv[1:]
        code, _, resume = start(Path(job_dir), int(nnodes), int(restarts or 0),
                                int(max_restarts), Path(checkpoint_dir))  # fmt: skip
        if resume:
            print(resume)
        return code
    print("usage: requeue.py start JOB_DIR NNODES RESTARTS MAX_RESTARTS CHECKPOINT_DIR | "
          "end JOB_DIR NNODES", file=sys.stderr)  # fmt: skip
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
