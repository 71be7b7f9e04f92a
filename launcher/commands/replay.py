"""`gpujob replay JOB [--step N] [--rank K] [--on HOST|local] [--set KEY=VALUE] -- CMD`: one
failing step of a distributed job run again on one GPU, from what gpujob_capture saved.

The capture (`captures/rank-K/step-N.pt`) and the checkpoint saved before that step come from
the job's run folder in S3 (`checkpoints.sync_to`) or, for a job without one, from its
checkpoint folder; the agent's `replay_run.py` finds, pulls and runs where the step replays,
here or on `--on HOST`, so the capture never passes through this machine on its way there.

`CMD` gets GPUJOB_REPLAY_INPUT (the capture), GPUJOB_REPLAY_CHECKPOINT (the checkpoint's
folder, empty when none was saved before the step), GPUJOB_REPLAY_STEP/RANK, the job spec's
`envs:`, and each `--set KEY=VALUE` as the variable KEY over them: the way to re-run the step
with a flag changed (seed 003's `--no-flash-attn`). It runs as rank 0 of a world of one on the
first visible GPU, under `deepspeed --num_gpus=1` when the job's launcher is DeepSpeed.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from launcher.errors import GpujobError, UsageError

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class ReplayRequest:
    job: str
    command: tuple[str, ...]
    step: int | None = None
    rank: int | None = None
    on: str | None = None
    sets: tuple[str, ...] = field(default_factory=tuple)


def parse_sets(sets: tuple[str, ...]) -> dict[str, str]:
    """`KEY=VALUE` pairs as environment variables; a malformed one is a usage error."""
    values: dict[str, str] = {}
    for item in sets:
        key, equals, value = item.partition("=")
        if not equals or not ENV_NAME.fullmatch(key):
            raise UsageError(f"--set {item!r}: give KEY=VALUE with KEY a variable name",
                             "e.g. --set FAST_PATH=0 (the command sees FAST_PATH=0)")  # fmt: skip
        values[key] = value
    return values


def replay(request: ReplayRequest) -> int:
    if not request.command:
        raise UsageError("give the command to run after `--`",
                         "e.g. gpujob replay JOB --on local -- python replay.py")  # fmt: skip
    for flag, value in (("--step", request.step), ("--rank", request.rank)):
        if value is not None and value < 0:
            raise UsageError(f"{flag} {value}: must be 0 or more")
    sets = parse_sets(request.sets)
    from launcher.state.readonly import JobsView

    job = JobsView().job(request.job)
    if job is None:
        raise UsageError(f"no job `{request.job}`", "`gpujob status` lists the jobs")
    spec = _spec(job)
    body: dict[str, Any] = {
        "step": request.step, "rank": request.rank, "argv": list(request.command),
        "launcher": spec.run.launcher_name if spec else None,
        "env": {**({k: str(v) for k, v in spec.envs.items()} if spec else {}), **sets},
    }  # fmt: skip
    remote_host = request.on not in (None, "local")
    body.update(_source(job, spec, remote_host))
    if not remote_host:
        from launcher.agent import CAPTURE_SOURCE
        from launcher.paths import state_dir

        body.update(dest=str(state_dir() / "replay" / job.id), cwd=os.getcwd(),
                    pylib=str(CAPTURE_SOURCE.parent))  # fmt: skip
        return _run_here(body)
    assert request.on is not None
    job_dir = PurePosixPath(job.node_dirs[0]).parent
    body.update(dest=f"~/.gpujob/replay/{job.id}", cwd=str(job_dir / "workdir"),
                output_to_stderr=True)  # fmt: skip
    return _run_on(request.on, body)


def _spec(job: Any) -> Any:
    """The job's spec as its file reads now (its launcher, envs, checkpoint folder), or None
    where the file is gone or no longer loads."""
    from launcher.say import say
    from launcher.spec.load import load_job_spec

    try:
        return load_job_spec(job.spec_path, ()).spec
    except GpujobError as err:
        say(f"warning: job {job.id}'s spec does not load ({err.one_line()}): the command gets "
            "none of its envs, and no DeepSpeed runner; --set what it needs")  # fmt: skip
        return None


def _source(job: Any, spec: Any, remote_host: bool) -> dict[str, Any]:
    """Where the captures are: the run's folder in S3 (beside the logs the agents ship), or
    the job's checkpoint folder where it has no sync target (read where the step replays),
    as node 0's job.json names it when that is on this machine, else as the spec does."""
    if job.logs_to:
        from launcher.storage import rclone_config
        from launcher.storage.remotes import credentials
        from launcher.storage.shipped_logs import shipped_remote

        remote = shipped_remote(job)
        env = rclone_config.env_vars(remote, credentials(remote), for_hosts=remote_host)
        return {"run": job.logs_to.rsplit("/logs/", 1)[0], "rclone_env": env}
    written = Path(job.node_dirs[0]) / "job.json"  # the agent's own word, where it is here
    if written.is_file():
        care = json.loads(written.read_text()).get("checkpoints") or {}
        if care.get("dir"):
            return {"run": None, "local_dir": care["dir"]}
    if spec is None:
        raise GpujobError(
            f"job {job.id}: its spec {job.spec_path} no longer loads, and without "
            "checkpoints.sync_to only it names the checkpoint folder"
        )
    job_dir = PurePosixPath(job.node_dirs[0]).parent
    return {"run": None, "local_dir": str(job_dir / spec.checkpoints.dir)}


def _run_here(body: dict[str, Any]) -> int:
    """The runner as a child of this process, the terminal its own (a debugger works); the
    request, keys included, in a 0600 file the runner deletes once read."""
    from launcher.agent import REPLAY_SOURCE

    runner = str(REPLAY_SOURCE)
    fd, path = tempfile.mkstemp(prefix="gpujob-replay-", suffix=".json")
    with os.fdopen(fd, "w") as out:  # mkstemp's file is 0600 from the start
        json.dump(body, out)
    try:
        return subprocess.run([sys.executable, runner, path], check=False).returncode
    finally:
        Path(path).unlink(missing_ok=True)


def _run_on(on: str, body: dict[str, Any]) -> int:
    """The runner and the sync modules into ~/.gpujob/bin there (as sync-ckpt --on does),
    gpujob_capture into its pylib/, the request on its stdin; the command's output shown as
    it comes (on stderr)."""
    from launcher.agent import CAPTURE_SOURCE, CHECKPOINT_SOURCES, REPLAY_SOURCE
    from launcher.remote import hosts as ssh_hosts
    from launcher.remote.facts import host_facts

    conn = ssh_hosts.connect(ssh_hosts.resolve_host(on))
    try:
        folder = f"{host_facts(conn).home}/.gpujob/bin"
        for source in (*CHECKPOINT_SOURCES, str(REPLAY_SOURCE)):
            conn.put_file(source, f"{folder}/{PurePosixPath(source).name}", 0o644)
        body["pylib"] = f"{folder}/pylib"
        conn.put_file(str(CAPTURE_SOURCE), f"{folder}/pylib/{CAPTURE_SOURCE.name}", 0o644)
        argv = ["python3", f"{folder}/replay_run.py", "-"]
        result = conn.run(argv, stream=True, input=json.dumps(body).encode())
    finally:
        conn.close()
    sys.stdout.write(result.stdout)
    return result.exit_code
