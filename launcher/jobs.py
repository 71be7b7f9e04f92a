"""The job commands as functions: submit, logs, status, cancel. The CLI only parses and prints.

This is the apply side: it loads a spec, asks `plan/` for a Plan, shows it or carries it out
through `runtime/`, and records the job in the state db.
"""

from __future__ import annotations

import os
import secrets as random
import sys
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from launcher.errors import GpujobError, UsageError
from launcher.state.db import JobRecord, StateDB

LOG = sys.stderr


def say(text: str) -> None:
    LOG.write(f"gpujob: {text}\n")
    LOG.flush()


@dataclass(frozen=True)
class SubmitOptions:
    spec_path: str
    sets: tuple[str, ...] = ()
    dry_run: bool = False
    as_json: bool = False
    detach: bool = False
    job_id: str | None = None
    on: str | None = None


def new_job_id(name: str) -> str:
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S')}-{random.token_hex(2)}"


def submit(options: SubmitOptions) -> int:
    from launcher.agent import AGENT_SOURCE, CHECKPOINT_SOURCES, INIT_LOCK_SOURCE
    from launcher.plan.build import JOB_ID, Sources, build_plan
    from launcher.plan.show import plan_json, plan_text
    from launcher.spec.image import load_image_definition
    from launcher.spec.load import load_job_spec
    from launcher.storage.preflight import preflight

    loaded = load_job_spec(options.spec_path, options.sets)
    spec = loaded.spec
    if not loaded.workdir.is_dir():
        raise UsageError(f"{loaded.where('workdir')}: workdir: {loaded.workdir} is not a folder")
    secret_values = _secret_values(loaded)
    try:
        image = load_image_definition(spec.image, loaded.path.parent)
    except UsageError as err:
        raise UsageError(f"{loaded.where('image')}: image: {err.message}", err.hint) from None
    target, connections, host_records = _placement(options, spec, image)
    job_id = options.job_id or new_job_id(spec.name)
    if not JOB_ID.match(job_id):
        raise UsageError(
            f"--job-id {job_id!r}: a job id is letters, digits, `.`, `_` and `-` (up to 128)",
            "leave out --job-id to get a new one",
        )
    sources = Sources(
        workdir=str(loaded.workdir),
        agent=str(AGENT_SOURCE),
        init_lock=str(INIT_LOCK_SOURCE),
        spec_where=loaded.where("run", "args"),
        checkpoint_modules=CHECKPOINT_SOURCES,
    )
    sync = preflight(loaded, target, image, say)
    plan = build_plan(spec, target, job_id, secret_values, image, sources, sync)
    if options.dry_run:
        sys.stdout.write(plan_json(plan) if options.as_json else plan_text(plan))
        return 0
    from launcher.storage.preflight import check_before_start, env_dir

    try:
        check_before_start(loaded, plan, env_dir(target, image), connections, say)
        return _start(options, plan, loaded, connections, host_records)
    finally:
        for conn in connections.values():
            conn.close()


def _placement(options: SubmitOptions, spec: Any, image: Any) -> tuple[Any, dict[str, Any], Any]:
    """Where the job runs: this machine, or the `--on` host (contacted once for its $HOME
    and python3 version, except in a dry run, which contacts nothing)."""
    if options.on is None:
        from launcher.providers.local import local_connections, local_target

        target = local_target(spec, image)
        return target, dict(local_connections()), list(target.hosts)
    from launcher.providers import ssh as ssh_hosts

    entry = ssh_hosts.resolve_host(options.on)
    if options.dry_run:
        return ssh_hosts.ssh_target(spec, image, entry, "~", "?"), {}, []
    conn = ssh_hosts.connect(entry)
    try:
        home, python = ssh_hosts.host_facts(conn)
        target = ssh_hosts.ssh_target(spec, image, entry, home, python)
    except BaseException:
        conn.close()
        raise
    return target, {entry.name: conn}, [entry.to_record()] * spec.nodes


def _start(
    options: SubmitOptions, plan: Any, loaded: Any, connections: dict[str, Any], hosts: list[str]
) -> int:
    from launcher.runtime.apply import apply_plan

    spec, job_id = loaded.spec, plan.job_id

    db = StateDB()
    if db.job(job_id) is not None and db.job(job_id).id == job_id:  # type: ignore[union-attr]
        raise UsageError(f"job id {job_id} is taken", "leave out --job-id to get a new one")
    say(f"job {job_id}: {spec.name}, {plan.world_size} rank(s) on {plan.provider}")
    db.add_job(
        JobRecord(
            id=job_id, name=spec.name, spec_path=str(loaded.path), provider=plan.provider,
            runtime=plan.runtime, hosts=hosts, node_dirs=plan.node_dirs,
            state="starting", exit_code=None, created_at=time.time(), ended_at=None,
            last_line=None,
        )
    )  # fmt: skip
    try:
        apply_plan(plan, connections, say)
    except BaseException:
        db.update_job(job_id, "failed", exit_code=1, last_line="failed to start")
        raise
    db.update_job(job_id, "running")
    if options.detach:
        say(f"detached; follow it with: gpujob logs {job_id} -f")
        print(job_id)
        return 0
    return logs(job_id, follow=True, connections=_job_connections(db.job(job_id), connections))


def _secret_values(loaded: Any) -> dict[str, str]:
    values = {}
    for index, name in enumerate(loaded.spec.secrets):
        if name not in os.environ:
            raise UsageError(
                f"{loaded.where('secrets', index)}: secrets: {name} is not set in your environment",
                f"export {name}=... before submitting (its value is never written to the spec,"
                " a command line or a log)",
            )
        values[name] = os.environ[name]
    return values


def _job_or_fail(db: StateDB, reference: str) -> JobRecord:
    job = db.job(reference)
    if job is None:
        raise UsageError(f"no job `{reference}`", "`gpujob status` lists the jobs")
    return job


def _job_connections(job: JobRecord | None, opened: dict[str, Any] | None = None) -> list[Any]:
    """One Connection per node, in rank order, shared by the nodes of one host."""
    assert job is not None
    if job.provider != "ssh":
        from launcher.providers.local import local_connections

        local = local_connections()
        return [local[host] for host in job.hosts]
    from launcher.providers import ssh as ssh_hosts

    by_host = dict(opened or {})
    conns = []
    for record in job.hosts:
        entry = ssh_hosts.HostEntry.from_record(record)
        if entry.name not in by_host:
            by_host[entry.name] = ssh_hosts.connect(entry)
        conns.append(by_host[entry.name])
    return conns


def _close_all(conns: list[Any]) -> None:
    for conn in {id(c): c for c in conns}.values():
        conn.close()


def logs(
    reference: str,
    *,
    follow: bool,
    node: int | None = None,
    tail: int | None = None,
    connections: list[Any] | None = None,
) -> int:
    db = StateDB()
    job = _job_or_fail(db, reference)
    conns = connections or _job_connections(job)
    try:
        return _logs(db, job, conns, follow=follow, node=node, tail=tail)
    finally:
        _close_all(conns)


def _logs(
    db: StateDB,
    job: JobRecord,
    conns: list[Any],
    *,
    follow: bool,
    node: int | None,
    tail: int | None,
) -> int:
    from launcher.runtime.logs import NodeStream, follow_logs, job_exit_code

    streams = [
        NodeStream(rank=rank, node_dir=node_dir, connection=conns[rank])
        for rank, node_dir in enumerate(job.node_dirs)
        if node is None or rank == node
    ]
    if not streams:
        raise UsageError(f"job {job.id} has no node {node}; it has {len(job.node_dirs)}")
    if tail is not None:
        for stream in streams:
            stream.offset = _tail_offset(stream, tail)
    try:
        done = follow_logs(streams, sys.stdout.buffer, follow=follow, prefix=len(job.node_dirs) > 1)
    except KeyboardInterrupt:
        say(f"stopped following; the job goes on (gpujob logs {job.id} -f)")
        return 130
    except BrokenPipeError:
        _quiet_stdout()
        return 0
    states = {stream.status.get("state") for stream in done}
    if follow or states <= {"succeeded", "failed", "cancelled", "lost"}:
        code = job_exit_code(done)
        state = _job_state(done)
        if state in ("succeeded", "failed", "cancelled", "lost"):
            final = _final_line(done[0])
            db.update_job(job.id, state, exit_code=code, last_line=final)
            if follow:
                say(f"job {job.id} {state} (exit code {code})")
            return code
    return 0


def _quiet_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _tail_offset(stream: Any, lines: int) -> int:
    """Offset of the last `lines` lines, reading backwards from the end: a 10 GB log is
    never read whole."""
    size = _log_size(stream)
    start, found = size, b""
    while start > 0 and found.count(b"\n") <= lines:
        start = max(0, start - (64 << 10))
        data, _ = stream.connection.read_log(stream.node_dir, start)
        found = data[: size - start]
    keep = found.rstrip(b"\n").split(b"\n")[-lines:] if lines else []
    return size - len(b"\n".join(keep)) - (1 if found.endswith(b"\n") and keep else 0)


def _log_size(stream: Any) -> int:
    path = f"{stream.node_dir}/job.log"
    if stream.connection.host == "local":
        return Path(path).stat().st_size if Path(path).exists() else 0
    result = stream.connection.run(["stat", "-c", "%s", path])
    return int(result.stdout.strip()) if result.ok else 0


def _job_state(streams: list[Any]) -> str:
    states = [stream.status.get("state") for stream in streams]
    for state in ("lost", "failed", "cancelled"):
        if state in states:
            return state
    return states[0] if len(set(states)) == 1 else "running"


def _final_line(stream: Any) -> str | None:
    from launcher.runtime.logs import last_line

    data, _ = stream.connection.read_log(stream.node_dir, max(0, stream.offset - 4096))
    return last_line(data)


def status_rows(limit: int = 20) -> list[dict[str, Any]]:
    """Jobs, newest first, refreshed from their agents (local reads; one SSH command per node
    of a remote job that has not ended; an unreachable host leaves the recorded state)."""
    db = StateDB()
    rows = []
    for job in db.jobs(limit):
        state, code = job.state, job.exit_code
        if not job.terminal:
            state, code = _refresh(db, job)
        runtime_s = (job.ended_at or time.time()) - job.created_at
        rows.append(
            {
                "id": job.id, "name": job.name, "state": state, "exit_code": code,
                "nodes": len(job.node_dirs), "provider": job.provider,
                "runtime_s": round(runtime_s, 1), "last_line": job.last_line or "",
                "warning": _care_warning(job),
            }
        )  # fmt: skip
    return rows


def _care_warning(job: JobRecord) -> str:
    """The agent's disk warning or the reason it stopped the job (checkpoint care)."""
    if job.provider != "local":
        return ""
    from launcher.agent.agent import status_of

    for node_dir in job.node_dirs:
        status = status_of(Path(node_dir))
        text = status.get("stopped_reason") or (status.get("disk") or {}).get("warning")
        if text:
            return str(text)
    return ""


def _node_statuses(job: JobRecord) -> list[dict[str, Any]] | None:
    if job.provider == "local":
        from launcher.agent.agent import status_of

        return [status_of(Path(node_dir)) for node_dir in job.node_dirs]
    import json

    conns = _job_connections(job)
    try:
        results = [conn.run(_agent_argv(job, node_dir, "status")) for conn, node_dir
                   in zip(conns, job.node_dirs, strict=True)]  # fmt: skip
        return [json.loads(r.stdout) for r in results] if all(r.ok for r in results) else None
    except (GpujobError, ValueError):
        return None
    finally:
        _close_all(conns)


def _refresh(db: StateDB, job: JobRecord) -> tuple[str, int | None]:
    statuses = _node_statuses(job)
    if statuses is None:
        return job.state, job.exit_code
    states = [s.get("state") for s in statuses]
    for state in ("lost", "failed", "cancelled", "running", "starting", "succeeded"):
        if state in states:
            code = next((s.get("exit_code") for s in statuses if s.get("state") == state), None)
            if state in ("lost", "failed", "cancelled", "succeeded"):
                db.update_job(job.id, state, exit_code=code if code is not None else 1)
            return state, code
    return job.state, job.exit_code


def _agent_argv(job: JobRecord, node_dir: str, *args: str) -> list[str]:
    """The agent runs with the host's python3 on SSH hosts, with this Python locally."""
    python = sys.executable if job.provider == "local" else "python3"
    agent = str(PurePosixPath(node_dir).parent / "gpujob-agent.py")
    return [python, agent, args[0], node_dir, *args[1:]]


def cancel(reference: str, grace_s: float, dry_run: bool) -> int:
    db = StateDB()
    job = _job_or_fail(db, reference)
    commands = [_agent_argv(job, node_dir, "cancel", f"{grace_s:g}") for node_dir in job.node_dirs]
    if dry_run:
        import shlex

        for argv in commands:
            print(shlex.join(argv))
        return 0
    conns = _job_connections(job)
    try:
        for rank, argv in enumerate(commands):
            result = conns[rank].run(argv)
            if not result.ok:
                raise GpujobError(f"node {rank}: cancel failed: {result.stderr.strip()}")
    finally:
        _close_all(conns)
    db.update_job(job.id, "cancelled")
    say(f"job {job.id} cancelled")
    return 0
