"""A recorded job's parts on the apply side: the record by reference, and one connection
per node to reach its agents."""

from __future__ import annotations

from typing import Any

from launcher.errors import UsageError
from launcher.state.db import JobRecord, StateDB


def job_or_fail(db: StateDB, reference: str) -> JobRecord:
    job = db.job(reference)
    if job is None:
        raise UsageError(f"no job `{reference}`", "`gpujob status` lists the jobs")
    return job


def job_connections(job: JobRecord | None, opened: dict[str, Any] | None = None) -> list[Any]:
    """One Connection per node, in rank order, shared by the nodes of one host (one SSH
    connection per host for the whole command)."""
    assert job is not None
    if job.provider == "local":
        from launcher.targets.local import local_connections

        local = local_connections()
        return [local[host] for host in job.hosts]
    from launcher.remote import hosts as ssh_hosts

    by_host = dict(opened or {})
    conns = []
    for record in job.hosts:
        entry = ssh_hosts.HostEntry.from_record(record)
        if entry.name not in by_host:
            by_host[entry.name] = ssh_hosts.connect(entry)
        conns.append(by_host[entry.name])
    return conns


def close_all(conns: list[Any]) -> None:
    for conn in {id(c): c for c in conns}.values():
        conn.close()
