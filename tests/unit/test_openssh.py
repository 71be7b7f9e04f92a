"""The `ssh` argv gpujob runs, where its master connections live, and how ssh's own failures
are told from a remote command's (the lab tests run them against real sshd)."""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from launcher.errors import GpujobError
from launcher.paths import run_dir
from launcher.remote.openssh import (
    Client,
    Endpoint,
    socket_path,
    ssh_failure,
)
from launcher.remote.openssh import close_state as close

ENDPOINT = Endpoint("gpu", "198.51.100.4", 2200, "ubuntu", ("/absent/key",))


@pytest.fixture
def private_tmp(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short TMPDIR of its own (a long one is not used for sockets: see below)."""
    short = Path(tempfile.mkdtemp(prefix="gjt", dir="/tmp"))
    monkeypatch.setenv("TMPDIR", str(short))
    monkeypatch.setattr(tempfile, "tempdir", None)
    yield short
    shutil.rmtree(short)


def test_the_remote_command_is_one_argument_after_the_host(tmp_path: Path) -> None:
    remote = shlex.join(["echo", "a b; rm -rf /", "$HOME"])
    argv = Client(ENDPOINT, tmp_path / "pins file", tmp_path / "sock").command(remote)
    assert argv[-3:] == ["--", "198.51.100.4", remote]
    options = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-o")
    assert options["StrictHostKeyChecking"] == "yes"
    assert options["BatchMode"] == "yes"
    assert options["UserKnownHostsFile"] == f'"{tmp_path / "pins file"}"'
    assert options["ControlMaster"] == "auto" and options["ControlPath"] == str(tmp_path / "sock")
    assert argv[argv.index("-p") + 1] == "2200" and argv[argv.index("-l") + 1] == "ubuntu"
    assert argv[1:3] == ["-F", os.devnull]  # nothing in ~/.ssh/config loosens the checks
    assert "-i" not in argv  # a key file that is not there is not offered


def test_ssh_failures_are_told_from_a_remote_commands_exit_255() -> None:
    assert ssh_failure(255, b"client_loop: send disconnect: Broken pipe\n") is not None
    assert ssh_failure(255, b"ssh: connect to host 10.0.0.2 port 22: Connection refused\n")
    assert ssh_failure(255, "mux_client_read_packet: read header failed: Broken pipe")
    assert ssh_failure(255, b"my program gave up\n") is None
    assert ssh_failure(1, b"ssh: connect to host x port 22: Connection refused\n") is None


def test_masters_live_in_a_private_folder_per_state_dir(private_tmp: Path) -> None:
    long_state = Path("/very/long/state/dir/" + "x" * 200)
    one, other = run_dir(long_state), run_dir(Path("/another/state"))
    assert one != other and one.parent == other.parent == private_tmp / f"gpujob-{os.getuid()}"
    assert one.stat().st_mode & 0o777 == 0o700 and one.parent.stat().st_mode & 0o777 == 0o700
    assert len(str(socket_path(ENDPOINT, long_state))) < 108  # a unix socket path's limit


def test_a_planted_control_folder_is_refused(private_tmp: Path) -> None:
    elsewhere = private_tmp / "elsewhere"
    elsewhere.mkdir()
    (private_tmp / f"gpujob-{os.getuid()}").symlink_to(elsewhere)
    with pytest.raises(GpujobError, match="not a folder of this user's"):
        run_dir(Path("/state"))


def test_stopping_the_masters_of_a_state_dir_that_made_none_creates_nothing(
    private_tmp: Path,
) -> None:
    assert close(Path("/state")) == 0
    assert list(private_tmp.iterdir()) == []


def test_a_tmpdir_too_long_for_a_socket_path_gives_way_to_tmp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    long_tmp = tmp_path / ("t" * 60)
    long_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(long_tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    from launcher.paths import run_dir_path

    assert run_dir_path(Path("/state")).parent == Path(f"/tmp/gpujob-{os.getuid()}")


def test_only_a_named_key_shuts_out_the_agents_keys(tmp_path: Path) -> None:
    key = tmp_path / "id_test"
    key.write_text("not read here")
    for explicit in (True, False):
        endpoint = Endpoint("h", "192.0.2.1", 22, "root", (str(key),), explicit_key=explicit)
        argv = Client(endpoint, tmp_path / "pins", tmp_path / "sock").command("true")
        assert argv[argv.index("-i") + 1] == str(key)
        assert ("IdentitiesOnly=yes" in argv) is explicit
