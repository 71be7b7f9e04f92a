"""sqlite under the user's state dir: jobs, their nodes, and how far each log was streamed.

The db is a cache of what the hosts say (the agent's `status.json` is the truth for a job);
it lets `gpujob status` answer without contacting anything, and `logs -f` resume at an offset.
Standard library only: `gpujob status` must start fast.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from launcher.agent.states import TERMINAL
from launcher.errors import GpujobError
from launcher.paths import state_dir
from launcher.state.faults import check_version, mark_version, state_faults

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    spec_path TEXT NOT NULL,
    provider TEXT NOT NULL,
    runtime TEXT NOT NULL,
    hosts TEXT NOT NULL,
    node_dirs TEXT NOT NULL,
    state TEXT NOT NULL,
    exit_code INTEGER,
    created_at REAL NOT NULL,
    ended_at REAL,
    last_line TEXT,
    logs_to TEXT,
    scheduler_job TEXT,
    starter TEXT,
    unconfirmed INTEGER
);
CREATE INDEX IF NOT EXISTS jobs_by_time ON jobs (created_at);
CREATE INDEX IF NOT EXISTS jobs_by_name ON jobs (name, created_at);
CREATE TABLE IF NOT EXISTS log_offsets (
    job_id TEXT NOT NULL,
    node INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    PRIMARY KEY (job_id, node)
);
"""

ADDED = (("logs_to", "TEXT"), ("scheduler_job", "TEXT"), ("starter", "TEXT"),
         ("unconfirmed", "INTEGER"))  # fmt: skip
"""Nullable columns added after the first layout, each added where a db lacks it."""
JOB_COLUMNS = ("id", "name", "spec_path", "provider", "runtime", "hosts", "node_dirs", "state",
               "exit_code", "created_at", "ended_at", "last_line", "logs_to", "scheduler_job",
               "starter", "unconfirmed")  # fmt: skip
"""Named in every INSERT and SELECT: a db whose columns are in another order still works."""
SELECT_JOBS = f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs"


def add_columns(conn: sqlite3.Connection) -> None:
    """Each missing column added on its own, in one write transaction that reads the table
    again (`BEGIN IMMEDIATE`): a process killed between two adds leaves a db the next one
    completes, and two processes migrating at once both go on ("duplicate column" is the
    other one's add, already there)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(jobs)")}
    if all(name in have for name, _ in ADDED):
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        have = {row[1] for row in conn.execute("PRAGMA table_info(jobs)")}
        for name, kind in ADDED:
            if name not in have:
                try:
                    conn.execute(f"ALTER TABLE jobs ADD COLUMN {name} {kind}")
                except sqlite3.OperationalError as err:
                    if "duplicate column" not in str(err):
                        raise
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


@dataclass(frozen=True)
class JobRecord:
    id: str
    name: str
    spec_path: str
    provider: str
    runtime: str
    hosts: list[str]
    node_dirs: list[str]
    state: str
    exit_code: int | None
    created_at: float
    ended_at: float | None
    last_line: str | None
    logs_to: str | None = None
    """Where the agents ship the node logs (rclone path in S3), for after the host is gone."""
    scheduler_job: str | None = None
    """The job's id in a cluster's scheduler (SLURM's job id), where one queued it."""
    starter: str | None = None
    """Who is starting the job (state/starter.py): a `starting` job whose starter is gone
    was interrupted, and the next command resolves it."""
    unconfirmed: bool = False
    """The recorded end was written by a client that could not ask the agents (a start that
    broke): `status` asks them again."""

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL


class StateDB:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or state_dir() / "state.db"
        with state_faults(self.path):
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._schema_ready = False

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        with state_faults(self.path):
            conn = sqlite3.connect(self.path, timeout=30)
            try:
                if not self._schema_ready:  # once per instance: a follow writes per read
                    version = check_version(conn, self.path)
                    conn.executescript(SCHEMA)
                    add_columns(conn)
                    mark_version(conn, version)
                    self._schema_ready = True
                with conn:
                    yield conn
            finally:
                conn.close()

    def add_job(self, job: JobRecord) -> None:
        with self._connect() as conn:
            conn.execute(
                f"INSERT INTO jobs ({', '.join(JOB_COLUMNS)}) VALUES"
                f" ({', '.join('?' * len(JOB_COLUMNS))})",
                (
                    job.id, job.name, job.spec_path, job.provider, job.runtime,
                    json.dumps(job.hosts), json.dumps(job.node_dirs), job.state,
                    job.exit_code, job.created_at, job.ended_at, job.last_line, job.logs_to,
                    job.scheduler_job, job.starter, int(job.unconfirmed),
                ),
            )  # fmt: skip

    def update_job(
        self,
        job_id: str,
        state: str,
        exit_code: int | None = None,
        last_line: str | None = None,
        unconfirmed: bool = False,
    ) -> None:
        """`unconfirmed`: the state is the client's guess, not the agents' word (an end
        written when a start broke); `status` asks the agents again."""
        ended = time.time() if state in TERMINAL else None
        with self._connect() as conn:
            conn.execute(
                "UPDATE jobs SET state=?, exit_code=COALESCE(?, exit_code),"
                " ended_at=COALESCE(ended_at, ?), last_line=COALESCE(?, last_line),"
                " unconfirmed=? WHERE id=?",
                (state, exit_code, ended, last_line, int(unconfirmed), job_id),
            )

    def reopen_job(self, job_id: str, state: str) -> None:
        """A job recorded as ended by a client that could not know, found running: its end
        forgotten."""
        with self._connect() as conn:
            conn.execute(
                "UPDATE jobs SET state=?, exit_code=NULL, ended_at=NULL, unconfirmed=0 WHERE id=?",
                (state, job_id),
            )

    def restart_job(self, job: JobRecord) -> None:
        """The same job on new hosts (a recovery): its hosts and node folders replaced, its
        end forgotten, and each node's log followed from byte 0 again (a new log)."""
        with self._connect() as conn:
            conn.execute(
                "UPDATE jobs SET provider=?, runtime=?, hosts=?, node_dirs=?, state=?,"
                " exit_code=NULL, ended_at=NULL, last_line=NULL, logs_to=?, starter=?,"
                " unconfirmed=0 WHERE id=?",
                (job.provider, job.runtime, json.dumps(job.hosts), json.dumps(job.node_dirs),
                 job.state, job.logs_to, job.starter, job.id),
            )  # fmt: skip
            conn.execute("DELETE FROM log_offsets WHERE job_id=?", (job.id,))

    def jobs(self, limit: int = 50) -> list[JobRecord]:
        with self._connect() as conn:
            rows = conn.execute(
                SELECT_JOBS + " ORDER BY created_at DESC LIMIT ?", (limit,)
            ).fetchall()
        return [_record(row, self.path) for row in rows]

    def job(self, reference: str) -> JobRecord | None:
        """By id, unique id prefix, or name (the newest job of that name). Each lookup uses
        an index: `status` asks once per job it shows, over however long a history."""
        with self._connect() as conn:
            row = conn.execute(SELECT_JOBS + " WHERE id = ?", (reference,)).fetchone()
            if row is None and reference:
                after = reference[:-1] + chr(ord(reference[-1]) + 1)  # ids with the prefix
                row = conn.execute(
                    SELECT_JOBS + " WHERE id >= ? AND id < ? OR name = ?"
                    " ORDER BY created_at DESC LIMIT 1",
                    (reference, after, reference),
                ).fetchone()
        return _record(row, self.path) if row else None

    def offset(self, job_id: str, node: int) -> int:
        with self._connect() as conn:
            row = conn.execute(
                "SELECT offset FROM log_offsets WHERE job_id=? AND node=?", (job_id, node)
            ).fetchone()
        return row[0] if row else 0

    def set_offset(self, job_id: str, node: int, offset: int) -> None:
        with self._connect() as conn:
            conn.execute(
                "INSERT INTO log_offsets VALUES (?,?,?) ON CONFLICT(job_id, node)"
                " DO UPDATE SET offset=excluded.offset",
                (job_id, node, offset),
            )


def _record(row: tuple, path: Path) -> JobRecord:
    """A row as a record; a row whose JSON columns were damaged (by hand, a full disk) is
    one line naming the db and the job, not a traceback from every `status`."""
    try:
        return _parsed(row)
    except (ValueError, TypeError) as err:
        raise GpujobError(
            f"{path}: job {row[0]}: its record cannot be read ({err})",
            f"repair or delete that row: sqlite3 {path} \"DELETE FROM jobs WHERE id='{row[0]}'\"",
        ) from None


def _parsed(row: tuple) -> JobRecord:
    return JobRecord(
        id=row[0], name=row[1], spec_path=row[2], provider=row[3], runtime=row[4],
        hosts=json.loads(row[5]), node_dirs=json.loads(row[6]), state=row[7],
        exit_code=row[8], created_at=row[9], ended_at=row[10], last_line=row[11],
        logs_to=row[12] if len(row) > 12 else None,
        scheduler_job=row[13] if len(row) > 13 else None,
        starter=row[14] if len(row) > 14 else None,
        unconfirmed=bool(row[15]) if len(row) > 15 else False,
    )  # fmt: skip
