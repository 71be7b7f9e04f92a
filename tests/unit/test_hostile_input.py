"""Hostile and broken input through the real CLI: each is refused in bounded time and memory
with one line per mistake naming the file and line (exit 2), never a traceback. The files
are generated here: an alias bomb, 5000-deep nesting, a binary file, a huge file, keys
written twice; and a file with several mistakes shows them all at once, in line order."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

VALID = "name: t\nimage: host\nrun:\n  entrypoint: train.py\n"


def _alias_bomb() -> bytes:
    rows = [VALID.rstrip("\n"), "a: &a [" + ", ".join(["lol"] * 9) + "]"]
    for level in range(9):
        name, previous = f"l{level}", "a" if level == 0 else f"l{level - 1}"
        rows.append(f"{name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
    return ("\n".join(rows) + "\n").encode()


def _string_alias_bomb() -> bytes:
    """A 208 KB file: one 100 KB string and 2000 aliases of it, 200 MB once expanded."""
    aliases = ", ".join(["*x"] * 2000)
    return (VALID + f'  args: [&x "{"a" * 100_000}", {aliases}]\n').encode()


# (id, the file's bytes, where (`:LINE`), what the line says)
CASES = [
    ("alias-bomb", _alias_bomb(), ":10", "more than 100000 values once its aliases are expanded"),
    ("string-alias-bomb", _string_alias_bomb(), ":5",
     "more than 8 MiB once its aliases are expanded"),
    ("deep-nesting", b"name: t\nx: " + b"[" * 5000 + b"]" * 5000 + b"\n", ":2",
     "nesting deeper than 64 levels"),
    ("binary", b"name: t\n\x89PNG\r\n\x1a\n\xff\xfe\x00", ":2", "not UTF-8 text (byte 0x89)"),
    ("control-bytes", b"name: t\nx: \x00\x01\n", ":2", "not a text file: control character 0x00"),
    ("too-large", VALID.encode() + b"#" * (2 << 20) + b"\n", ":1",
     "the job spec is larger than 1024 KiB"),
    ("duplicate-key", (VALID + "  entrypoint: other.py\n").encode(), ":5",
     "run.entrypoint: key written twice (also at line 4)"),
    ("duplicate-top-key", (VALID + "name: u\n").encode(), ":5",
     "name: key written twice (also at line 1)"),
    ("nodes-over-bound", (VALID + "nodes: 100000\n").encode(), ":5",
     "nodes: Input should be less than or equal to 1024"),
    ("long-int", (VALID + "nodes: " + "1" * 5000 + "\n").encode(), ":5",
     "a number of more than 64 characters"),
    ("long-hex", (VALID + "nodes: 0x" + "f" * 5000 + "\n").encode(), ":5",
     "a number of more than 64 characters"),
    ("sexagesimal", (VALID + "nodes: " + "1:3" * 300_000 + "\n").encode(), ":5",
     "nodes: Input should be a valid integer"),
    ("complex-key", (VALID + "? [a, b]\n: 1\n").encode(), ":5", "a key that is a list or mapping"),
    ("profile-list", (VALID + "profile: []\n").encode(), ":5", "profile: give a profile's name"),
    ("profiles-int-keys", (VALID + "profiles: {1: 2}\nprofile: x\n").encode(), ":6",
     "profile: give a profile's name"),
    ("sky-env-null-name", b"run: echo hi\nenvs: {null: null}\n", ":2",
     "envs.None: SkyPilot's `envs.None`: gpujob cannot honour it (`None` is not a variable"),
    ("sky-mount-long-name", b"run: echo hi\nfile_mounts:\n  /dst: /" + b"a" * 300 + b"\n", ":3",
     "file_mounts./dst: /" + "a" * 300 + ": cannot look at it: File name too long"),
    ("recursive-alias", b"name: t\nx: &a [1, *a]\n", ":2",
     "alias *a refers to the node that contains it"),
]  # fmt: skip


@pytest.mark.parametrize(("data", "where", "says"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_hostile_spec_is_one_line_with_file_and_line(
    gpujob: Callable, tmp_path: Path, data: bytes, where: str, says: str
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_bytes(data)
    for args in (("submit", str(spec), "--dry-run"), ("submit", str(spec), "--job-id", "h-1")):
        result = gpujob(*args)
        assert result.exit_code == 2, result
        assert result.stderr.startswith(f"gpujob: error: {spec}{where}: {says}"), result.stderr
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert result.stdout == ""
    assert not (tmp_path / "state" / "jobs").exists()


def test_merge_keys_are_not_duplicates(gpujob: Callable, tmp_path: Path) -> None:
    """`<<: *base` then an override of one of its keys is YAML's merge, not a key twice."""
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: t\nimage: host\nrun:\n  <<: &base {entrypoint: a.py, args: [x]}\n"
        "  entrypoint: train.py\n"
    )
    (tmp_path / "train.py").write_text("print(1)\n")
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "train.py" in result.stdout


@pytest.mark.parametrize("kind", ["gpujob", "skypilot"])
def test_every_validation_error_of_a_file_at_once_in_line_order(
    gpujob: Callable, tmp_path: Path, kind: str
) -> None:
    spec = tmp_path / "job.yaml"
    if kind == "gpujob":
        spec.write_text(
            "name: t\nimage: host\nnodes: two\nrun:\n  entrypiont: a.py\n"
            "  nproc_per_node: x\nnodse: 3\n"
        )
        expected = [
            ":3: nodes: Input should be a valid integer",
            ":5: run.entrypiont: unknown key; did you mean `entrypoint`?",
            ":6: run.nproc_per_node: Input should be a valid integer",
            ":7: nodse: unknown key; did you mean `nodes`?",
        ]
    else:
        spec.write_text(
            "name: t\nnum_nodes: two\nenvs:\n  A: 1\nrun: |\n  python train.py\n"
            "workdir: .\nresources:\n  accelerators: L4:1\n"
        )
        expected = [":2: nodes: Input should be a valid integer"]
    result = gpujob("submit", str(spec), "--dry-run", "--set", "run.args=5")
    assert result.exit_code == 2, result
    lines = result.stderr.splitlines()
    assert "Traceback" not in result.stderr
    wanted = [f"gpujob: error: {spec}{text}" for text in expected]
    wanted.append("gpujob: error: --set run.args: run.args: Input should be a valid list")
    assert len(lines) == len(wanted), result.stderr
    for line, start in zip(lines, wanted, strict=True):
        assert line.startswith(start), (line, start)


def test_a_dry_runs_plan_grows_linearly_with_the_nodes(gpujob: Callable, tmp_path: Path) -> None:
    """Each node's part of the plan is the same size at 40 and at 400 nodes: no node carries
    a list of every node (the addresses are one file per host)."""
    (tmp_path / "train.py").write_text("print(1)\n")
    per_node = []
    for nodes in (40, 400):
        spec = tmp_path / f"job-{nodes}.yaml"
        spec.write_text(VALID + f"nodes: {nodes}\n")
        result = gpujob("submit", str(spec), "--dry-run", "--job-id", "scale-1")
        assert result.exit_code == 0, result.stderr
        per_node.append(len(result.stdout) / nodes)
    assert per_node[1] < per_node[0] * 1.1, per_node


L4_TASK = "name: t\nimage: host\nresources:\n  accelerators: L4:2\nrun:\n  entrypoint: train.py\n"

# (id, the spec, the command line after the spec, what the one line starts with)
FLAG_CASES = [
    ("provider-without-up", VALID, ["--provider", "vast"], "--provider goes with --up"),
    ("max-price-without-up", VALID, ["--max-price", "2"], "--max-price goes with --up"),
    ("disk-without-up", VALID, ["--disk", "5"], "--disk goes with --up"),
    ("allow-cpu-without-up", VALID, ["--allow-cpu"], "--allow-cpu goes with --up"),
    ("negative-max-price", VALID, ["--up", "a100", "--max-price", "-1"],
     "Invalid value for '--max-price': -1.0 is not in the range x>0; see `gpujob submit --help`"),
    ("negative-max-cost", VALID, ["--up", "a100", "--max-cost", "-5"],
     "Invalid value for '--max-cost': -5.0 is not in the range x>=0"),
    ("json-followed", VALID, ["--json"], "--json prints the plan (with --dry-run) or the started"),
    ("gpu-count-differs", L4_TASK, ["--up", "a100:1", "--dry-run"],
     "--up a100:1 rents 1 GPU(s) per host but {spec}:4: resources.accelerators L4:2 asks 2. "
     "write --up a100:2, or --set resources.accelerators=A100:1"),
    ("unknown-choice", VALID, ["--runtime", "podman"],
     "Invalid value for '--runtime': 'podman' is not one of 'auto', 'docker', 'bare'"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "flags", "says"), [c[1:] for c in FLAG_CASES],
                         ids=[c[0] for c in FLAG_CASES])  # fmt: skip
def test_a_flag_that_would_do_nothing_or_lie_is_one_line(
    gpujob: Callable, tmp_path: Path, text: str, flags: list[str], says: str
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(text)
    (tmp_path / "train.py").write_text("print(1)\n")
    result = gpujob("submit", str(spec), *flags)
    assert result.exit_code == 2, result
    assert result.stderr.startswith(f"gpujob: error: {says.format(spec=spec)}"), result.stderr
    assert len(result.stderr.splitlines()) == 1 and result.stdout == ""


def test_a_set_flag_is_parsed_under_the_same_bounds(gpujob: Callable, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(VALID)
    levels = ["&l0 [" + ", ".join(["x"] * 10) + "]"]
    for level in range(1, 6):
        levels.append(f"&l{level} [" + ", ".join([f"*l{level - 1}"] * 10) + "]")
    result = gpujob("submit", str(spec), "--dry-run", "--set", f"x=[{', '.join(levels)}]")
    assert result.exit_code == 2, result
    assert result.stderr.startswith("gpujob: error: --set x:1: more than 100000 values")


@pytest.mark.parametrize(("command", "says"), [
    (["up", "a100", "--json"], "--json goes with --host"),
    (["up", "a100", "--max-price", "-3"], "Invalid value for '--max-price': -3.0"),
    (["image", "build", "lab-cpu", "--json"], "--json goes with --dry-run"),
])  # fmt: skip
def test_other_commands_refuse_idle_flags_and_negative_prices(
    gpujob: Callable, command: list[str], says: str
) -> None:
    result = gpujob(*command)
    assert result.exit_code == 2, result
    assert result.stderr.startswith(f"gpujob: error: {says}"), result.stderr
    assert len(result.stderr.splitlines()) == 1


def test_up_without_a_count_rents_the_count_the_task_asks_and_says_so(
    clouds: dict, gpujob: Callable, tmp_path: Path
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(L4_TASK)
    (tmp_path / "train.py").write_text("print(1)\n")
    result = gpujob("submit", str(spec), "--up", "a100", "--dry-run", "--allow-cpu")
    said = (f"gpujob: --up a100: {spec}:4: resources.accelerators L4:2 asks 2 GPUs per node; "
            "renting a100:2")  # fmt: skip
    assert said in result.stderr.splitlines(), result.stderr


def _on_a_terminal(tmp_path: Path, *args: str) -> bytes:
    """The real CLI with stdout and stderr on a pty, as a user at a terminal runs it."""
    import os
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    env = {**os.environ, "GPUJOB_STATE_DIR": str(tmp_path / "state"),
           "GPUJOB_CACHE_DIR": str(tmp_path / "cache")}  # fmt: skip
    with subprocess.Popen([sys.executable, "-m", "launcher", *args], stdout=follower,
                          stderr=follower, env=env, cwd=tmp_path) as proc:  # fmt: skip
        os.close(follower)
        out = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the pty's other end closed: the command is done
                break
            if not chunk:
                break
            out += chunk
        proc.wait(timeout=60)
    os.close(leader)
    return out


def test_dry_run_on_a_terminal_shows_escapes_not_obeys_them(
    gpujob: Callable, tmp_path: Path
) -> None:
    """A spec's `echo "\\e]52;..."` cannot set the clipboard while `submit --dry-run` shows
    it on a terminal; through a pipe it is the spec's text as written."""
    spec = tmp_path / "job.yaml"
    spec.write_text('name: t\nimage: host\nrun: "echo \\e]52;c;aGk=\\a"\n')
    shown = _on_a_terminal(tmp_path, "submit", str(spec), "--dry-run")
    assert b"]52;c;aGk=" in shown, shown
    assert b"\x1b]52" not in shown and b"\x07" not in shown, shown
    assert b"^[]52;c;aGk=^G" in shown, shown
    piped = gpujob("submit", str(spec), "--dry-run")
    assert "\x1b]52;c;aGk=\x07" in piped.stdout, piped.stdout


def test_screen_lets_one_line_up_through_not_many() -> None:
    from launcher.runtime.screen import terminal_safe

    out, _ = terminal_safe(b"a\x1b[A\x1b[1Ab\x1b[5Ac\x1b[99A", final=True)
    assert out == b"a\x1b[A\x1b[1Ab^[[5Ac^[[99A"


def _ended_job(job_id: str, last_line: str) -> None:
    import time

    from launcher.state.db import JobRecord, StateDB

    StateDB().add_job(JobRecord(
        id=job_id, name="t", spec_path="/x/job.yaml", provider="local", runtime="bare",
        hosts=["localhost"], node_dirs=["/x"], state="succeeded", exit_code=0,
        created_at=time.time(), ended_at=time.time(), last_line=last_line,
    ))  # fmt: skip


def test_status_shows_a_jobs_escapes_on_a_terminal(gpujob: Callable, tmp_path: Path) -> None:
    _ended_job("t-1", "done \x1b]52;c;aGk=\x07 \x1b[5A")
    shown = _on_a_terminal(tmp_path, "status")
    assert b"t-1" in shown, shown
    assert b"\x1b" not in shown and b"\x07" not in shown, shown
    assert b"done ^[]52;c;aGk=^G ^[[5A" in shown, shown


def test_a_damaged_job_row_is_one_line_naming_db_and_job(gpujob: Callable) -> None:
    import sqlite3

    from launcher.state.db import StateDB

    _ended_job("t-2", "done")
    db = StateDB()
    with sqlite3.connect(db.path) as conn:
        conn.execute("UPDATE jobs SET hosts='{not json' WHERE id='t-2'")
    result = gpujob("status")
    assert result.exit_code == 1, result
    assert result.stderr.startswith(f"gpujob: error: {db.path}: job t-2: its record cannot be")
    assert len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.parametrize("folder", ["/etc", "/home", "~", "/", "STATE"])
def test_a_local_checkpoints_dir_that_is_not_the_jobs_own_is_one_line(
    gpujob, tmp_path: Path, folder: str
) -> None:
    """The job prunes checkpoint-N folders in its checkpoints.dir and a local container mounts
    it read-write: a system folder, the home, or gpujob's own state is refused."""
    import os

    chosen = {"~": os.path.expanduser("~"), "STATE": os.environ["GPUJOB_STATE_DIR"]}.get(
        folder, folder
    )
    (tmp_path / "w").mkdir()
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"name: c\nimage: host\nworkdir: w\nrun: echo hi\ncheckpoints:\n  dir: {chosen}\n"
    )
    result = gpujob("submit", str(spec), "--dry-run")
    assert result.exit_code == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "checkpoints.dir" in result.stderr and "Traceback" not in result.stderr
