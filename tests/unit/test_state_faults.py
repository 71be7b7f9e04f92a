"""The state dir, whatever the disk does: a damaged, truncated or newer-version state db, a
read-only state dir and a full disk each give one line naming the path and what to do (exit
1) from `status` and `submit`, never a traceback, and leave the db as it was. The small disks
are real tmpfs mounts of a few MB, made here and unmounted after (root)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

SPEC = "name: t\nimage: host\nrun:\n  entrypoint: train.py\n"


def _damaged(db: Path) -> None:
    db.write_bytes(os.urandom(4096))


def _truncated(db: Path) -> None:
    with sqlite3.connect(db) as conn:  # a db with rows in it, cut mid-page
        conn.execute("CREATE TABLE filler (x TEXT)")
        conn.executemany("INSERT INTO filler VALUES (?)", [("x" * 500,)] * 200)
    os.truncate(db, 3000)


def _newer(db: Path) -> None:
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA user_version = 99")


# (id, what breaks the db made by a first `status`, what the line says)
DB_FAULTS = [
    ("damaged", _damaged, "the state db is damaged (file is not a database). move it aside"),
    ("truncated", _truncated, "the state db is damaged (database disk image is malformed)"),
    ("newer-version", _newer, "the state db was written by a newer gpujob (schema version 99"),
]


def _one_line(result: object, path: Path, says: str, code: int = 1) -> None:
    assert result.exit_code == code, result  # type: ignore[attr-defined]
    lines = result.stderr.splitlines()  # type: ignore[attr-defined]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr  # type: ignore[attr-defined]
    assert lines[0].startswith(f"gpujob: error: {path}"), lines[0]
    assert says in lines[0], lines[0]


@pytest.mark.parametrize("command", ["status", "submit"])
@pytest.mark.parametrize(("breaks", "says"), [c[1:] for c in DB_FAULTS],
                         ids=[c[0] for c in DB_FAULTS])  # fmt: skip
def test_a_broken_state_db_is_one_line_and_left_as_it_was(
    gpujob: Callable, state_dir: Path, tmp_path: Path, command: str, breaks: Callable, says: str
) -> None:
    assert gpujob("status").exit_code == 0
    db = state_dir / "state.db"
    breaks(db)
    before = db.read_bytes()
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "job.yaml").write_text(SPEC)
    args = ["submit", str(tmp_path / "job.yaml"), "--job-id", "f-1"] if command == "submit" else []
    result = gpujob(*(args or [command]))
    _one_line(result, db, says)
    assert db.read_bytes() == before


@pytest.mark.parametrize("command", ["status", "submit"])
@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_a_read_only_or_full_state_disk_is_one_line(
    gpujob: Callable, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    small_disk: Callable, command: str, fault: str,
) -> None:  # fmt: skip
    disk = small_disk("1m")
    state = disk / "state"
    monkeypatch.setenv("GPUJOB_STATE_DIR", str(state))
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print(1)\n")
    (work / "job.yaml").write_text(SPEC)
    code = 1
    if fault == "read-only":
        subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        says, where = "cannot write in the state dir (Read-only file system)", state
    else:
        state.mkdir()
        with open(disk / "filler", "wb") as filler, pytest.raises(OSError):
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        says, where = "the disk of the state dir is full. free some space on it", state
        if command == "submit":  # the job's folder would be there too: the budget says so first
            says, where, code = f"0.00 GiB free at {state}: short by", work / "job.yaml", 2
    args = ["submit", str(work / "job.yaml"), "--job-id", "f-1"] if command == "submit" else []
    result = gpujob(*(args or [command]))
    _one_line(result, where, says, code)


def test_a_new_state_db_records_its_schema_version(gpujob: Callable, state_dir: Path) -> None:
    assert gpujob("status").exit_code == 0
    with sqlite3.connect(state_dir / "state.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (2,)


def test_a_schema_1_db_is_read_and_migrated(gpujob: Callable, state_dir: Path) -> None:
    """A db an older gpujob wrote (no record of who starts a job) keeps its jobs."""
    state_dir.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(state_dir / "state.db") as conn:
        conn.executescript(
            "CREATE TABLE jobs (id TEXT PRIMARY KEY, name TEXT NOT NULL, spec_path TEXT NOT NULL,"
            " provider TEXT NOT NULL, runtime TEXT NOT NULL, hosts TEXT NOT NULL,"
            " node_dirs TEXT NOT NULL, state TEXT NOT NULL, exit_code INTEGER,"
            " created_at REAL NOT NULL, ended_at REAL, last_line TEXT, logs_to TEXT,"
            " scheduler_job TEXT);"
            "INSERT INTO jobs VALUES ('old-1', 'old', 'job.yaml', 'local', 'bare', '[\"local\"]',"
            " '[\"/nowhere/node0\"]', 'succeeded', 0, 1.0, 2.0, 'done', NULL, NULL);"
            "PRAGMA user_version = 1;"
        )
    result = gpujob("status", "--json")
    assert result.exit_code == 0, result.stderr
    assert '"old-1"' in result.stdout and '"succeeded"' in result.stdout
    with sqlite3.connect(state_dir / "state.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone() == (2,)


def test_checkpoints_on_another_disk_are_measured_there(
    gpujob: Callable, tmp_path: Path, small_disk: Callable
) -> None:
    """The job folder's disk has room, the 4 MB disk of an absolute checkpoints.dir has
    not: refused naming that disk (before, the job folder's disk was measured and the job
    crashed at its first save)."""
    disk = small_disk("4m")
    (tmp_path / "train.py").write_text("print(1)\n")
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC + f"checkpoints:\n  dir: {disk}/ckpt\n  size_gb: 0.01\n  keep_last: 1\n")
    refused = gpujob("submit", str(spec), "--dry-run")
    assert refused.exit_code == 2, refused
    assert f"{spec}:7: disk budget: checkpoints 2 x 0.01 GiB = 0.02 GiB" in refused.stderr
    assert f"free at {disk}: short by" in refused.stderr
    spec.write_text(SPEC + f"checkpoints:\n  dir: {disk}/ckpt\n  size_gb: 0.001\n  keep_last: 1\n")
    fits = gpujob("submit", str(spec), "--dry-run")
    assert fits.exit_code == 0, fits.stderr
    assert f"disk budget: checkpoints 2 x 0.00 GiB = 0.00 GiB; 0.00 GiB free at {disk}\n" in (
        fits.stderr
    )
    assert "disk budget: workdir " in fits.stderr
