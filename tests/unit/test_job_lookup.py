"""`gpujob logs/cancel/status JOB` find a job by its id, a unique id prefix or its name, over
a long history, by index (issue 32: `status` over 10,000 jobs)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from launcher.state.db import JobRecord, StateDB


def record(job_id: str, name: str, created_at: float) -> JobRecord:
    return JobRecord(id=job_id, name=name, spec_path="job.yaml", provider="local",
                     runtime="bare", hosts=["local"], node_dirs=["/x"], state="succeeded",
                     exit_code=0, created_at=created_at, ended_at=created_at + 1,
                     last_line="")  # fmt: skip


def test_an_exact_id_wins_then_a_prefix_then_the_newest_of_a_name(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "state.db")
    for n, (job_id, name) in enumerate(
        [("train-1", "train"), ("train-10", "train"), ("abc_9", "eval"), ("abcd", "x")]
    ):
        db.add_job(record(job_id, name, 100.0 + n))
    assert (found := db.job("train-1")) and found.id == "train-1"  # exact, not train-10
    assert (found := db.job("train-10")) and found.id == "train-10"
    assert (found := db.job("train")) and found.id == "train-10"  # the name's newest
    assert (found := db.job("abc_")) and found.id == "abc_9"
    assert db.job("ab_d") is None  # "_" is a character of an id, not a wildcard
    assert db.job("nothing") is None
    assert db.job("") is None


def test_the_lookups_use_indexes(tmp_path: Path) -> None:
    db = StateDB(tmp_path / "state.db")
    db.add_job(record("a-1", "a", 1.0))
    conn = sqlite3.connect(db.path)
    plan = " ".join(
        str(row)
        for row in conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM jobs ORDER BY created_at DESC LIMIT 20"
        )
    )
    assert "jobs_by_time" in plan, plan
    plan = " ".join(
        str(row)
        for row in conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM jobs WHERE id >= 'a' AND id < 'b' OR name = 'a'"
        )
    )
    assert "SCAN" not in plan and "MULTI-INDEX OR" in plan, plan  # no row is read in vain
