"""A resident gpujob: one process per state dir that has the modules of `submit`, `logs`,
`status` and `cancel` imported, and forks a child for each such command.

A submit to a ready host spent 0.4 s of its first second importing Python modules (pydantic's
spec models alone 0.2 s) before it asked the host for anything. The command typed is a thin
client here: it passes its argv, environment, folder and its stdin/stdout/stderr themselves
(SCM_RIGHTS) through a socket to the resident process, whose child runs the command exactly
as the client would have, on the client's terminal or pipes, and sends back the exit code.
Signals the client gets (Ctrl-C, SIGTERM, SIGHUP) are passed on to the child, and a client
that dies is a SIGHUP to its child. No resident process yet: the client runs the command
itself and starts one for the next command; an idle one ends after IDLE_S. The socket sits
in the state dir's private folder (openssh.py's), named by a hash of gpujob's own files, so
a changed gpujob is never served by an old process. `GPUJOB_RESIDENT=0` turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

from launcher.cli import RESIDENT_COMMANDS

IDLE_S = 900
WAKE_S = 5  # how often an idle one checks that it is still wanted
PRELOAD = (
    "launcher.commands", "launcher.jobs", "launcher.joblogs", "launcher.jobstatus",
    "launcher.spec.load", "launcher.spec.image", "launcher.plan.build", "launcher.plan.show",
    "launcher.placement", "launcher.providers.ssh", "launcher.remote.ssh",
    "launcher.runtime.apply", "launcher.runtime.logs", "launcher.storage.preflight",
    "launcher.agent", "jinja2",
)  # fmt: skip
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
LIMITS = ("RLIMIT_NOFILE", "RLIMIT_MEMLOCK", "RLIMIT_STACK", "RLIMIT_CORE", "RLIMIT_NPROC",
          "RLIMIT_AS", "RLIMIT_DATA", "RLIMIT_FSIZE")  # fmt: skip
PACKAGE = Path(__file__).resolve().parent


def eligible(argv: list[str]) -> bool:
    """Commands that never read the terminal: `--up` may ask before it rents, `--debug`
    wants the traceback of a process of its own."""
    return (
        sys.platform.startswith("linux")  # SO_PEERCRED, /proc
        and bool(argv)
        and argv[0] in RESIDENT_COMMANDS
        and not any(a == "--debug" or a.startswith("--up") for a in argv)
        and os.environ.get("GPUJOB_RESIDENT", "1") != "0"
    )


def hand_over(argv: list[str]) -> int | None:
    """The command's exit code as the resident process's child ran it; None when there is
    no resident process to run it (one is started for the next command)."""
    if not eligible(argv):
        return None
    from launcher.errors import GpujobError

    try:
        path = socket_path()
    except (GpujobError, OSError):  # no private folder for it: the command runs here
        return None
    try:
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        client.connect(str(path))
    except OSError:
        _start_server(path)
        return None
    with client:
        try:
            return _run_remotely(client, argv)
        except KeyboardInterrupt:  # before the child was there to pass it to
            sys.stderr.write("gpujob: interrupted\n")
            return 130


def _run_remotely(client: socket.socket, argv: list[str]) -> int | None:
    import resource

    limits = {name: resource.getrlimit(getattr(resource, name)) for name in LIMITS}
    try:
        cwd = os.getcwd()
    except OSError:  # a folder deleted under the shell: the command runs here, and says so
        return None
    request = json.dumps(
        {"argv": argv, "env": dict(os.environ), "cwd": cwd, "umask": _umask(), "limits": limits}
    ).encode()
    try:
        socket.send_fds(client, [struct.pack("!I", len(request)) + request], [0, 1, 2])
        pid = int(_read_message(client)["pid"])
    except (OSError, ValueError, KeyError):
        return None  # it went away before the child was made: run here
    forwarded: list[int] = []

    def forward(signum: int, _frame: object) -> None:
        """To the child's process group, as the terminal would have sent it to ours (its
        `ssh` and helpers included; a log read's `ssh` has a session of its own)."""
        forwarded.append(signum)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signum)

    def suspend(_signum: int, _frame: object) -> None:
        """Ctrl-Z: the child's group stops with us (SIGSTOP: a stop signal sent to a group
        whose parent is gone would be dropped), and goes on when we do."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGSTOP)
        signal.signal(signal.SIGTSTP, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTSTP)
        signal.signal(signal.SIGTSTP, suspend)

    def resume(_signum: int, _frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGCONT)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    signal.signal(signal.SIGTSTP, suspend)
    signal.signal(signal.SIGCONT, resume)
    try:
        answer = _read_message(client)
    except (OSError, ValueError):
        answer = {}
    if "exit" in answer:
        return int(answer["exit"])
    if forwarded:  # the signal ended it, as it would have ended this process
        return 128 + forwarded[-1]
    sys.stderr.write("gpujob: error: the command's process ended without an exit code\n")
    return 1


def _read_message(sock: socket.socket) -> dict:
    """One length-prefixed JSON message; ValueError at the end of the stream."""
    head = _read_exactly(sock, 4)
    return json.loads(_read_exactly(sock, struct.unpack("!I", head)[0]))


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ValueError("the stream ended")
        data += chunk
    return data


def _send_message(sock: socket.socket, message: dict) -> None:
    data = json.dumps(message).encode()
    sock.sendall(struct.pack("!I", len(data)) + data)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


# -- where it lives --------------------------------------------------------------------------


def socket_path() -> Path:
    from launcher.rundir import run_dir

    return run_dir() / f"resident-{code_version()}.sock"


def code_version() -> str:
    """A hash of this Python, of its import folders (a package installed or upgraded
    changes its folder) and of gpujob's files, as they are on disk now."""
    digest = hashlib.sha1(f"{os.path.realpath(sys.prefix)} {sys.version} {PACKAGE}".encode())
    for entry in sys.path:
        if entry.endswith(("site-packages", "dist-packages")):
            with contextlib.suppress(OSError):
                real = os.path.realpath(entry)
                digest.update(f"{real} {os.stat(real).st_mtime_ns}".encode())
    for folder, _, names in sorted(os.walk(PACKAGE)):
        for name in sorted(names):
            if name.endswith((".py", ".j2", ".sh")):
                facts = os.stat(os.path.join(folder, name))
                digest.update(f"{folder}/{name} {facts.st_size} {facts.st_mtime_ns}".encode())
    return digest.hexdigest()[:16]


def _start_server(path: Path) -> None:
    with contextlib.suppress(OSError):
        subprocess.Popen(
            [sys.executable, "-P", "-m", "launcher.resident", str(path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True, close_fds=True, cwd="/",
        )  # fmt: skip


def stop(state: Path | None = None) -> int:
    """End the resident processes of a state dir (a test's end), those still starting too;
    how many were running."""
    from launcher.rundir import existing_run_dir

    folder = existing_run_dir(state)
    stopped = 0
    for pid_file in folder.glob("resident-*.pid") if folder else ():
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            pid = int(pid_file.read_text())
            if b"launcher.resident" in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(pid, signal.SIGTERM)  # not a pid reused by another process
                stopped += 1
        for stale in (pid_file, pid_file.with_suffix(".sock")):
            stale.unlink(missing_ok=True)
    return stopped


# -- the resident process --------------------------------------------------------------------


def serve(path: Path) -> None:
    """Preload, listen, fork a command per client until IDLE_S pass without one, or until
    the socket is removed from under it (`stop`, a test's end): then exit."""
    import importlib
    import time

    try:
        path.with_suffix(".pid").write_text(str(os.getpid()))  # `stop` finds it from now on
    except OSError:
        return  # the folder is gone: stopped before it started
    for name in PRELOAD:
        importlib.import_module(name)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
    except OSError:
        if _answers(path) or not path.parent.is_dir():
            return  # another one serves (started at the same time), or stopped meanwhile
        path.unlink(missing_ok=True)  # left by one that was killed
        listener.bind(str(path))
    path.chmod(0o600)
    mine = path.stat().st_ino
    signal.signal(signal.SIGTERM, lambda *_: _quit(path, mine))
    listener.listen(16)
    listener.settimeout(WAKE_S)
    last = time.monotonic()
    while True:
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            if time.monotonic() - last > IDLE_S or not _still_mine(path, mine):
                _quit(path, mine)
            continue
        last = time.monotonic()
        if _peer_uid(conn) != os.getuid():
            conn.close()
            continue
        if os.fork() == 0:  # a child that forks the command and exits: no zombies here
            listener.close()
            if os.fork() == 0:
                _child(conn)
            os._exit(0)
        conn.close()
        os.wait()


def _still_mine(path: Path, inode: int) -> bool:
    try:
        return path.stat().st_ino == inode
    except FileNotFoundError:
        return False


def _answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
    return True


def _quit(path: Path, inode: int) -> None:
    if _still_mine(path, inode):  # not a successor's
        for stale in (path, path.with_suffix(".pid")):
            stale.unlink(missing_ok=True)
    os._exit(0)


def _peer_uid(conn: socket.socket) -> int:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def _child(conn: socket.socket) -> None:
    code = 1
    try:
        os.setsid()
        message, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
        size = struct.unpack("!I", message[:4])[0]
        body = message[4:]
        body += _read_exactly(conn, size - len(body))  # what the first read did not hold
        request = json.loads(body)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        os.umask(request["umask"])
        _set_limits(request["limits"])
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.stdout.reconfigure(line_buffering=os.isatty(1))
        sys.argv = ["gpujob", *request["argv"]]
        _send_message(conn, {"pid": os.getpid()})
        _watch_client(conn)
        code = _run_command(request["argv"])
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(OSError):
            _send_message(conn, {"exit": code})
        os._exit(code)


def _set_limits(limits: dict[str, list[int]]) -> None:
    """The client's resource limits (`ulimit -n`, `-l`, ...), as far as this process may
    take them: a local job started here inherits them, as from the client."""
    import resource

    for name, (soft, hard) in limits.items():
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(getattr(resource, name), (soft, hard))


def _run_command(argv: list[str]) -> int:
    import atexit

    from launcher.commands import run

    try:
        run(argv)
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    except BaseException:  # a bug: its traceback, as the command in its own process shows it
        import traceback

        traceback.print_exc()
        code = 1
    atexit._run_exitfuncs()
    return code


def _watch_client(conn: socket.socket) -> None:
    """A client that goes away (killed, its terminal closed) is a SIGHUP to this child, as
    it would have been to the command run in the client itself."""
    import threading

    def watch() -> None:
        with contextlib.suppress(OSError):
            while conn.recv(64):
                pass
        os.kill(os.getpid(), signal.SIGHUP)

    threading.Thread(target=watch, daemon=True).start()


if __name__ == "__main__":
    serve(Path(sys.argv[1]))
