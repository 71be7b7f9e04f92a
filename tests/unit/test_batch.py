"""The batch program that prepares a node in one exec, run for real (this machine's Python in
a subprocess, as the local provider runs it; over SSH the lab tests run the same program)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from launcher.errors import GpujobError
from launcher.remote.batch import File, Run, Sync, run_local


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_the_workdir_ships_only_what_changed_and_mirrors_deletes(tmp_path: Path) -> None:
    src, dest = tmp_path / "src", tmp_path / "host" / "copy"
    (src / "pkg").mkdir(parents=True)
    (src / "train.py").write_text("print('train')\n")
    (src / "pkg" / "model.py").write_text("W = 1\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    (src / "run.sh").chmod(0o755)
    (src / "big.bin").write_bytes(b"x" * 1000)
    (src / ".gpujobignore").write_text("big.bin\n")

    first = run_local([Sync(str(src), str(dest), mirror=True)])
    assert first.sent == 4 and first.ok
    assert tree(dest) == {k: v for k, v in tree(src).items() if k != "big.bin"}
    assert stat.S_IMODE((dest / "run.sh").stat().st_mode) == 0o755
    assert int((dest / "train.py").stat().st_mtime) == int((src / "train.py").stat().st_mtime)

    assert run_local([Sync(str(src), str(dest), mirror=True)]).sent == 0

    (src / "pkg" / "model.py").write_text("W = 22\n")
    (src / "train.py").unlink()
    third = run_local([Sync(str(src), str(dest), mirror=True)])
    assert third.sent == 1
    assert (dest / "pkg" / "model.py").read_text() == "W = 22\n"
    assert not (dest / "train.py").exists()


def test_files_then_commands_in_order_and_a_failure_stops_the_rest(tmp_path: Path) -> None:
    secret = tmp_path / "node" / "secrets.env"
    script = tmp_path / "node" / "run.sh"
    marker = tmp_path / "should-not-exist"
    outcome = run_local(
        [
            File(str(secret), b"TOKEN=abc\n", 0o600),
            File(str(script), b'#!/bin/sh\ncat "$1"\n', 0o755),
            Run((str(script), str(secret))),
            Run(("sh", "-c", "echo no space left >&2; exit 3")),
            Run(("touch", str(marker))),
        ]
    )
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert [run.exit_code for run in outcome.runs] == [0, 3]
    assert outcome.runs[0].stdout == "TOKEN=abc\n"
    assert outcome.runs[1].stderr.strip() == "no space left"
    assert not outcome.ok and not marker.exists()
    assert not [p for p in (tmp_path / "node").iterdir() if p.name.endswith(".tmp")]


def test_a_file_that_cannot_be_written_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("a file, not a folder\n")
    with pytest.raises(GpujobError) as caught:
        run_local([File(str(tmp_path / "plain" / "job.json"), b"{}", 0o644)])
    message = caught.value.message
    assert "preparing the job failed" in message and str(tmp_path / "plain") in message
    assert "\n" not in message and "Traceback" not in message
    assert os.listdir(tmp_path) == ["plain"]


def test_a_commands_stdout_comes_back_byte_for_byte(tmp_path: Path) -> None:
    """As the first read of a job's log does: any bytes, any size, exactly."""
    log = tmp_path / "job.log"
    log.write_bytes(bytes(range(256)) * 1024 + b"50%\r100%\r\n\xff\xfe tail")
    outcome = run_local([Run(("cat", str(log))), Run(("printf", "after"))])
    assert outcome.outputs == [log.read_bytes(), b"after"]
    assert [run.exit_code for run in outcome.runs] == [0, 0]


def test_unreadable_workdir_files_are_one_clear_error_and_dangling_links_are_skipped(
    tmp_path: Path,
) -> None:
    src, dest = tmp_path / "src", tmp_path / "copy"
    src.mkdir()
    (src / "train.py").write_text("print(1)\n")
    (src / "gone").symlink_to(src / "no-such-file")
    assert run_local([Sync(str(src), str(dest)), Run(("true",))]).sent == 1
    assert sorted(p.name for p in dest.iterdir()) == ["train.py"]

    (src / "loop").symlink_to(src / "loop")
    with pytest.raises(GpujobError) as caught:
        run_local([Sync(str(src), str(dest)), Run(("touch", str(tmp_path / "ran")))])
    assert caught.value.message.startswith(f"cannot read {src / 'loop'}: ")
    assert not (tmp_path / "ran").exists()


def test_a_streamed_command_shows_its_stderr_and_keeps_the_tail_for_the_error(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    outcome = run_local([Run(("sh", "-c", "echo pulling layer 1 >&2; echo denied >&2; exit 4"),
                             stream=True)])  # fmt: skip
    assert outcome.runs[0].exit_code == 4
    assert outcome.runs[0].stderr.strip().splitlines()[-1] == "denied"
    assert "pulling layer 1" in capfd.readouterr().err


def test_a_commands_input_reaches_its_stdin_and_no_file(tmp_path: Path) -> None:
    """The start's secrets: through the stream to the command's stdin, never written; a
    command that gets none reads an empty input (never the batch's own stream)."""
    given = b'{"TOKEN": "v4lue"}' + b"x" * 200_000  # more than a pipe holds
    outcome = run_local([
        Run(("python3", "-c", "import sys; sys.stdout.write(str(len(sys.stdin.buffer.read())))"),
            input=given),
        Run(("python3", "-c", "import sys; print(repr(sys.stdin.read()))")),
        File(str(tmp_path / "after"), b"ok"),
    ])  # fmt: skip
    assert [r.stdout for r in outcome.runs] == [str(len(given)), "''\n"]
    assert (tmp_path / "after").read_bytes() == b"ok"  # the stream went on in step
    assert "v4lue" not in repr(Run(("x",), input=given))
