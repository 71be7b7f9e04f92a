"""`gpujob ssh HOST -- CMD` is `ssh HOST CMD`: through the real CLI and a lab host's sshd.

The words after `--` are one command line for the remote login shell (OpenSSH joins them
with spaces, unquoted), stdin reaches the command, and its exit code is gpujob's.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from labtools import read_some

from infra.fakes.lab_backend import children, comm
from launcher.agent.agent_os import descendants

pytestmark = pytest.mark.lab

GPUJOB = str(Path(sys.executable).with_name("gpujob"))
HOST = "sshcmd"  # with the lab's prefix: gjlab-sshcmd in the default lab
TOOLS = ("ip", "sshd", "ssh", "nsenter", "unshare")


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A lab host with sshd only, named `lab` in a hosts.yaml (and `stranger`, as a user it
    refuses), and a private state dir (so the first command pins its key); removed at the
    end, with the bridge if this made it."""
    search = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
    absent = [tool for tool in TOOLS if shutil.which(tool, path=search) is None]
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (network namespaces, sshd)")
    if absent:
        pytest.skip(f"missing {', '.join(absent)}: run `bash infra/install-deps.sh`")
    import infra.lab
    from infra.lab import naming, network, state
    from launcher.remote.openssh import close_state

    folder = tmp_path_factory.mktemp("sshcmd")
    bridge_was_up = network.link_exists(naming.bridge())
    try:
        host = infra.lab.create_host(HOST)
        hosts_file = folder / "hosts.yaml"
        hosts_file.write_text(
            f"hosts:\n  - {{name: lab, address: {host.address}, user: root,"
            f" key: {infra.lab.user_key()}}}\n"
            f"  - {{name: stranger, address: {host.address}, user: nobody-here,"
            f" key: {infra.lab.user_key()}}}\n"  # a user the host does not have
        )
        yield dict(
            os.environ, GPUJOB_STATE_DIR=str(folder / "state"), GPUJOB_HOSTS_FILE=str(hosts_file)
        )
    finally:
        close_state(folder / "state")
        infra.lab.destroy_host(HOST)
        if not bridge_was_up and not state.read_state()["hosts"]:
            network.remove_bridge()


def gpujob_ssh(
    env: dict[str, str], *command: str, stdin: bytes = b"", host: str = "lab"
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [GPUJOB, "ssh", host, "--", *command], env=env, input=stdin, capture_output=True,
        timeout=120,
    )  # fmt: skip


def test_the_words_are_one_command_line_for_the_remote_shell(env: dict[str, str]) -> None:
    done = gpujob_ssh(env, "echo a; echo b")
    assert (done.returncode, done.stdout) == (0, b"a\nb\n"), done.stderr
    spaced = gpujob_ssh(env, "echo", "a", "b")
    assert (spaced.returncode, spaced.stdout) == (0, b"a b\n"), spaced.stderr


def test_variables_expand_on_the_host(env: dict[str, str]) -> None:
    """`$HOME` is the host's (root's /root there), not this machine's, nor a literal."""
    done = gpujob_ssh(env, "echo $HOME; cd; pwd")
    assert done.returncode == 0, done.stderr
    home, pwd = done.stdout.decode().splitlines()
    assert home == pwd == "/root"


def test_stdin_reaches_the_command(env: dict[str, str]) -> None:
    done = gpujob_ssh(env, "cat", stdin=b"x\n")
    assert (done.returncode, done.stdout) == (0, b"x\n"), done.stderr
    counted = gpujob_ssh(env, "wc -c", stdin=b"\0" * 1_000_000)
    assert (counted.returncode, counted.stdout.strip()) == (0, b"1000000"), counted.stderr


def test_the_exit_code_is_the_commands(env: dict[str, str]) -> None:
    done = gpujob_ssh(env, "echo out; echo err >&2; exit 7")
    assert (done.returncode, done.stdout, done.stderr) == (7, b"out\n", b"err\n")
    assert gpujob_ssh(env, "exit 255").returncode == 255
    assert gpujob_ssh(env, "no-such-command-here").returncode == 127


def test_a_refused_login_is_exit_255_and_one_line(env: dict[str, str]) -> None:
    """ssh's own failure: 255, as `ssh` exits, and gpujob's one line instead of ssh's."""
    done = gpujob_ssh(env, "touch /root/reached", host="stranger")
    assert done.returncode == 255
    lines = done.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "accepted none of the keys" in lines[0], lines
    assert done.stdout == b""


def test_a_connection_dropped_under_the_command_is_exit_255_and_one_line(
    env: dict[str, str],
) -> None:
    """The host's sshd processes for gpujob's connection are killed (by pid) while the
    command waits on stdin: ssh's failure, not the command's exit code."""
    from infra.lab import state
    from infra.lab.hosts import host_name

    client = subprocess.Popen(
        [GPUJOB, "ssh", "lab", "--", "echo started; cat"], env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert client.stdout is not None
        assert read_some(client.stdout, "the command's first line") == b"started\n"
        listener = state.read_state()["hosts"][host_name(HOST)]["sshd"]["pid"]
        for session in children(listener):
            for pid in [session, *[p for p in descendants(session) if comm(p).startswith("sshd")]]:
                os.kill(pid, signal.SIGKILL)
        _, err = client.communicate(timeout=120)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert client.returncode == 255
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and "the connection dropped" in lines[0], lines
    after = gpujob_ssh(env, "echo back")  # the next command makes a new connection
    assert (after.returncode, after.stdout) == (0, b"back\n"), after.stderr
