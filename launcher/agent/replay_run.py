"""`gpujob replay` where the step runs again (this machine or `--on HOST`): find the capture,
pull it and the checkpoint before it, run the user's command on one GPU with them named.

Stdlib only, shipped beside ckpt_sync (it pulls checkpoints the verified way). Reads one JSON
request from a 0600 file it deletes, or stdin (`-`), so the remote's keys are never on a
command line. Exit: the command's own; before it runs, 2 for a step or rank that is not there
and 1 for a failure, each said in one `gpujob: error:` line.

Checkpoint-N holds the state after step N (the Hugging Face convention the agent's names
follow), so a capture of step N belongs to the newest checkpoint of a step below N.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ckpt_store
import ckpt_sync

CAPTURE = re.compile(r"^rank-(\d+)/step-(\d+)\.pt$")


class Refused(Exception):
    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def captures_in(request: dict[str, Any], rc: ckpt_sync.Rclone) -> dict[tuple[int, int], str]:
    """(step, rank) -> where the capture is: an rclone path in the run's folder, or a file."""
    if request.get("run"):
        where = f"{request['run']}/{ckpt_store.CAPTURES}"
        try:
            listed = rc.run("lsjson", where, "-R", "--files-only", "--no-modtime",
                            "--no-mimetype", what=f"listing {where}", capture=True,
                            changes=False)  # fmt: skip
        except ckpt_sync.SyncError as err:
            if "not found" not in str(err):
                raise
            listed = "[]"  # no capture was ever shipped there
        names = [item["Path"] for item in json.loads(listed or "[]")]
    else:
        where = f"{request['local_dir']}/{ckpt_store.CAPTURES}"
        root = Path(where)
        names = [p.relative_to(root).as_posix() for p in root.glob("rank-*/step-*.pt")]
    found = {}
    for name in names:
        match = CAPTURE.match(name)
        if match:
            found[(int(match.group(2)), int(match.group(1)))] = f"{where}/{name}"
    return found


def about(request: dict[str, Any], rc: ckpt_sync.Rclone, step: int) -> dict[int, dict]:
    """rank -> what `step-N.json` says of that rank's capture of `step` (one rclone cat of
    them all: one JSON line each)."""
    if request.get("run"):
        where = f"{request['run']}/{ckpt_store.CAPTURES}"
        text = rc.run("cat", where, "--include", f"/rank-*/step-{step}.json",
                      what=f"reading {where}", capture=True, changes=False)  # fmt: skip
        lines = text.splitlines()
    else:
        root = Path(request["local_dir"]) / ckpt_store.CAPTURES
        lines = [p.read_text() for p in root.glob(f"rank-*/step-{step}.json")]
    said = {}
    for line in lines:
        try:
            item = json.loads(line)
            said[int(item["rank"])] = item
        except (ValueError, KeyError, TypeError):
            continue
    return said


def choose(found: dict[tuple[int, int], str], step: int | None, rank: int | None,
           where: str, first: dict[int, dict] | None = None) -> tuple[int, int]:  # fmt: skip
    """The step asked for, else the latest; the rank asked for, else the one that saved
    first (`first`: what each rank's `.json` says; the others' errors follow from its), else
    the lowest."""
    have = ", ".join(f"rank-{r}/step-{s}" for s, r in sorted(found)) or "none"
    keys = [k for k in found if (step is None or k[0] == step) and (rank is None or k[1] == rank)]
    if not found:
        raise Refused(f"no capture in {where} (the job saves one with gpujob_capture: a step "
                      "that raised, had a non-finite loss, or was asked for)")  # fmt: skip
    if not keys:
        asked = " ".join(f"--{n} {v}" for n, v in (("step", step), ("rank", rank)) if v is not None)
        raise Refused(f"no capture for {asked} in {where} (there: {have})", 2)
    latest = max(s for s, _ in keys)
    ranks = [r for s, r in keys if s == latest]
    when = first or {}
    return latest, min(ranks, key=lambda r: (when.get(r, {}).get("saved_at", float("inf")), r))


def checkpoint_before(request: dict[str, Any], rc: ckpt_sync.Rclone, step: int,
                      dest: Path) -> str:  # fmt: skip
    """The newest complete checkpoint of a step below `step`, pulled (verified) into `dest`
    from S3 or named where it is; "" when there is none (the program starts fresh)."""
    if request.get("run"):
        names = list(ckpt_sync.remote_markers(rc, request["run"]))
    else:
        names = [c.name for c in ckpt_store.complete(Path(request["local_dir"]))]
    before = [n for n in names if (ckpt_store.step_of(n) or 0) < step]
    if not before:
        return ""
    name = max(before, key=lambda n: ckpt_store.step_of(n) or 0)
    if not request.get("run"):
        return str(Path(request["local_dir"]) / name)
    shutil.rmtree(dest / name, ignore_errors=True)
    ckpt_sync.pull(request["run"], dest, rc, step=ckpt_store.step_of(name))
    return str(dest / name)


def command(request: dict[str, Any]) -> list[str]:
    """The user's command on one GPU: under DeepSpeed's runner when the job's launcher is
    DeepSpeed (its script without the interpreter the command may start with)."""
    argv = list(request["argv"])
    if request.get("launcher") != "deepspeed":
        return argv
    python = "python3"
    if argv and re.fullmatch(r"python[0-9.]*", Path(argv[0]).name):
        python, argv = argv[0], argv[1:]
    return [python, "-u", "-m", "deepspeed.launcher.runner", "--num_gpus=1", *argv]


def one_process_env(request: dict[str, Any], deepspeed: bool) -> dict[str, str]:
    """One rank of a world of one, on the first visible GPU, unless already said."""
    env = dict(os.environ)
    env.setdefault("CUDA_VISIBLE_DEVICES", "0")
    if not deepspeed:  # DeepSpeed's runner sets its own
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        for key, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1"),
                           ("LOCAL_WORLD_SIZE", "1"), ("MASTER_ADDR", "127.0.0.1"),
                           ("MASTER_PORT", str(port))):  # fmt: skip
            env[key] = value
    env.update({str(k): str(v) for k, v in request.get("env", {}).items()})
    if request.get("pylib"):  # `import gpujob_capture` works in the replay as in the job
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (os.path.expanduser(request["pylib"]), env.get("PYTHONPATH")) if p
        )
    return env


def prepare(request: dict[str, Any]) -> tuple[list[str], dict[str, str]]:
    rc = ckpt_sync.Rclone(request.get("rclone_env") or {})
    dest = Path(os.path.expanduser(request["dest"]))
    where = request.get("run") or request.get("local_dir")
    found = captures_in(request, rc)
    step, rank = choose(found, request.get("step"), request.get("rank"), str(where))
    said = {}
    if request.get("rank") is None and sum(1 for s, _ in found if s == step) > 1:
        said = about(request, rc, step)
        step, rank = choose(found, step, None, str(where), said)
    source = found[(step, rank)]
    dest.mkdir(parents=True, exist_ok=True)
    capture = dest / f"rank-{rank}-step-{step}.pt"
    if request.get("run"):
        rc.run("copyto", source, str(capture), what=f"copy of {source}")
    else:
        shutil.copyfile(source, capture)
    error = said.get(rank, {}).get("error")
    say(f"capture: rank {rank}, step {step} ({source}) -> {capture}"
        + (f"; it saved first, on {error}" if error else ""))  # fmt: skip
    checkpoint = checkpoint_before(request, rc, step, dest / "checkpoints")
    say(
        f"checkpoint: {checkpoint}"
        if checkpoint
        else f"checkpoint: none saved before step {step}; the program starts from its own init"
    )
    argv = command(request)
    env = one_process_env(request, argv != request["argv"])
    env.update(GPUJOB_REPLAY_INPUT=str(capture), GPUJOB_REPLAY_CHECKPOINT=checkpoint,
               GPUJOB_REPLAY_STEP=str(step), GPUJOB_REPLAY_RANK=str(rank),
               GPUJOB_CHECKPOINT_DIR=str(dest))  # fmt: skip
    say("running: " + " ".join(argv))
    return argv, env


def say(line: str) -> None:
    sys.stderr.write(f"[gpujob replay] {line}\n")
    sys.stderr.flush()


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        sys.stderr.write("usage: replay_run.py REQUEST.json|-\n")
        return 2
    if argv[0] == "-":
        request = json.load(sys.stdin)
    else:
        try:
            request = json.loads(Path(argv[0]).read_text())
        finally:
            Path(argv[0]).unlink(missing_ok=True)
    try:
        command_argv, env = prepare(request)
    except (Refused, ckpt_sync.SyncError, OSError) as err:
        sys.stderr.write(f"gpujob: error: {err}\n")
        return err.code if isinstance(err, Refused) else 1
    cwd = os.path.expanduser(request.get("cwd") or ".")
    if not os.path.isdir(cwd):  # --on a host the job did not run on: the replay's folder
        cwd = os.path.expanduser(request["dest"])
    out = sys.stderr if request.get("output_to_stderr") else None
    try:
        return subprocess.run(command_argv, env=env, cwd=cwd, stdout=out, check=False).returncode
    except OSError as err:
        sys.stderr.write(f"gpujob: error: cannot run {command_argv[0]}: {err.strerror}\n")
        return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
