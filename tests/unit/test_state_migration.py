"""The state db's added columns: a migration cut between two adds, and two processes
migrating the same db at once, leave a db every command works with (issue 25)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from launcher.state.db import JobRecord, StateDB

OLD_JOBS = (
    "CREATE TABLE jobs (id TEXT PRIMARY KEY, name TEXT NOT NULL, spec_path TEXT NOT NULL,"
    " provider TEXT NOT NULL, runtime TEXT NOT NULL, hosts TEXT NOT NULL,"
    " node_dirs TEXT NOT NULL, state TEXT NOT NULL, exit_code INTEGER,"
    " created_at REAL NOT NULL, ended_at REAL, last_line TEXT, logs_to TEXT,"
    " scheduler_job TEXT{});PRAGMA user_version = 1;"
)
ADD = (
    "from pathlib import Path; import sys, time; from launcher.state.db import StateDB, JobRecord;"
    "go = Path(sys.argv[3])\nwhile not go.exists(): time.sleep(0.0005)\n"
    "db = StateDB(Path(sys.argv[1])); db.add_job(JobRecord(sys.argv[2], 'n', 'j.yaml', 'local',"
    " 'bare', ['local'], ['/nowhere'], 'succeeded', 0, 1.0, 2.0, 'done'))"
)


def _job(job_id: str) -> JobRecord:
    return JobRecord(job_id, "n", "j.yaml", "local", "bare", ["local"], ["/nowhere"],
                     "starting", None, 1.0, None, None, starter="1:2")  # fmt: skip


def test_a_db_cut_between_two_added_columns_is_completed(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with sqlite3.connect(db) as conn:  # killed after `starter` was added, before `unconfirmed`
        conn.executescript(OLD_JOBS.format(", starter TEXT"))
    state = StateDB(db)
    state.add_job(_job("j-1"))
    record = state.job("j-1")
    assert record is not None and (record.starter, record.unconfirmed) == ("1:2", False)
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (1,)


def test_two_processes_migrating_at_once_both_go_on(tmp_path: Path) -> None:
    for attempt in range(5):
        db = tmp_path / f"state-{attempt}.db"
        with sqlite3.connect(db) as conn:
            conn.executescript(OLD_JOBS.format(""))
        go = tmp_path / f"go-{attempt}"  # both wait for it: they migrate at the same moment
        procs = [subprocess.Popen([sys.executable, "-c", ADD, str(db), f"j-{n}", str(go)],
                                  stderr=subprocess.PIPE) for n in range(2)]  # fmt: skip
        time.sleep(1.0)
        go.touch()
        for proc in procs:
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0, err.decode()
        assert {job.id for job in StateDB(db).jobs()} == {"j-0", "j-1"}
