"""A node's preparation in one exec: the workdir synced by size and mtime, the node's files,
then its commands, all through one stream to a small program on the host.

Every exec is a round trip plus sshd's session setup (tens of milliseconds to a host across
the internet) and SFTP takes about five round trips a file: a submit used to spend seven
execs and an SFTP session before its job started. Here the client sends the workdir's
listing, the host answers with the files it lacks (the one turnaround), and the rest
follows without waiting: those files, the node's files, then the commands, which the host
runs in order until one fails. Nothing after a failed command runs.

The program reads JSON lines on stdin (a file's bytes follow its line) and answers on stdout:

    {"sync": ROOT, "have": {REL: [SIZE, MTIME]}, "mirror": BOOL}  ->  {"need": [REL, ...]}
    {"file": PATH, "size": N, "mode": M, "mtime": T or null} + N bytes
    {"run": ARGV, "stream": BOOL, "input": N or null} + N bytes  ->  {"code": C, "out": N,
                                                          "err": STDERR} + N bytes
    (end of input)  ->  {"done": FILES}        (a failure of its own: {"error": TEXT})

A command's stdout comes back whole, byte for byte (the first read of a job's log is one);
a streamed command's stderr goes straight through (a pull's progress), the others' tail is
answered with their exit code. A command's `input` (the start's secrets) goes to its stdin
from the stream: it never lands in a file on the host. Each file lands whole: a temp file
of its final mode from the first byte, renamed over.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Protocol

from launcher.errors import GpujobError
from launcher.plan.model import SyncDir
from launcher.remote.base import Result
from launcher.remote.ignore import shipped_files

CHUNK = 1 << 20
ANSWER_BYTES = 16384  # what a command's stderr answer keeps (its tail)

HOST_PROGRAM = r"""
import json, os, subprocess, sys, threading
src = sys.stdin.buffer


def say(answer, data=b""):
    sys.stdout.buffer.write(json.dumps(answer).encode() + b"\n" + data)
    sys.stdout.buffer.flush()


def listing(root):
    found = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = os.path.join(folder, name)
            try:
                stat = os.lstat(path)
            except OSError:
                continue
            found[os.path.relpath(path, root)] = [stat.st_size, int(stat.st_mtime)]
    return found


def sync(meta):
    root, want = meta["sync"], meta["have"]
    os.makedirs(root, exist_ok=True)  # an empty folder ships as one: the job cds into it
    have = listing(root)
    if meta["mirror"]:
        for rel in sorted(set(have) - set(want)):
            os.remove(os.path.join(root, rel))
    say({"need": sorted(rel for rel, stat in want.items() if have.get(rel) != stat)})


def receive(meta):
    path, left = meta["file"], meta["size"]
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, ".%s.%d.tmp" % (os.path.basename(path), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, meta["mode"])
        with os.fdopen(fd, "wb") as out:
            while left:
                chunk = src.read(min(left, 1 << 20))
                if not chunk:
                    raise OSError("%s: the stream ended %d bytes short" % (path, left))
                out.write(chunk)
                left -= len(chunk)
        if meta.get("mtime") is not None:
            os.utime(tmp, (meta["mtime"], meta["mtime"]))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def run(meta):
    given = src.read(meta["input"]) if meta.get("input") is not None else None
    proc = subprocess.Popen(meta["run"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL if given is None else subprocess.PIPE)
    if given is not None:  # from a thread: the command may write before it reads
        threading.Thread(target=feed, args=(proc, given), daemon=True).start()
    kept = [b""]

    def drain():  # a streamed command's stderr goes through as it comes; its tail is kept
        while True:
            chunk = os.read(proc.stderr.fileno(), 1 << 16)
            if not chunk:
                return
            if meta["stream"]:
                sys.stderr.buffer.write(chunk)
                sys.stderr.buffer.flush()
            kept[0] = (kept[0] + chunk)[-KEEP:]

    reader = threading.Thread(target=drain)
    reader.start()
    out = proc.stdout.read()
    reader.join()
    code = proc.wait()
    say({"code": code, "out": len(out), "err": kept[0].decode(errors="replace")}, out)
    return code == 0


def feed(proc, given):
    try:
        proc.stdin.write(given)
        proc.stdin.close()
    except OSError:
        pass


files = 0
try:
    for head in iter(src.readline, b""):
        meta = json.loads(head)
        if "sync" in meta:
            sync(meta)
        elif "file" in meta:
            receive(meta)
            files += 1
        elif not run(meta):
            sys.exit(0)
except OSError as err:
    say({"error": "%s: %s" % (err.filename, err.strerror) if err.filename else str(err)})
    sys.exit(1)
say({"done": files})
""".replace("KEEP", str(ANSWER_BYTES))


@dataclass(frozen=True)
class File:
    path: str
    content: bytes = field(repr=False)  # may be a secret
    mode: int = 0o644


@dataclass(frozen=True)
class Run:
    argv: tuple[str, ...]
    stream: bool = False
    input: bytes | None = field(default=None, repr=False)  # may be a secret
    on_sent: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    """Called just before the command goes out: from then on it may run on the host even
    if the connection breaks before its answer (a job's start: apply.py)."""


Sync = SyncDir
"""A folder to mirror or update: the plan's own step, carried as it is."""
Op = Sync | File | Run


@dataclass
class Outcome:
    """What a batch did: workdir files sent, and the commands that ran, in order (only the
    last may have failed; those after it never ran)."""

    sent: int = 0
    runs: list[Result] = field(default_factory=list)
    outputs: list[bytes] = field(default_factory=list)
    """Each command's stdout as bytes, as it wrote them."""

    @property
    def ok(self) -> bool:
        return all(run.ok for run in self.runs)


class HostStopped(Exception):
    """The program stopped reading its input: a command failed (its answer says how), or the
    program itself did (its answer, or the lack of one, says so)."""


class Pipe(Protocol):
    """The program's stdin and stdout, however they reach it (an SSH channel, a pipe)."""

    def send(self, data: bytes) -> None:
        """Raises HostStopped when the program no longer reads."""
        ...

    def end(self) -> None:
        """No more input (raises HostStopped like `send`)."""
        ...

    def readline(self) -> bytes: ...

    def read(self, size: int) -> bytes:
        """Exactly `size` bytes, fewer only at the end of the stream."""
        ...


def run_batch(ops: list[Op], pipe: Pipe, where: str) -> Outcome:
    """Drive the host program through `pipe`. A command that fails stops the host, which
    then reads no more: what could not be sent is not an error, its answer says why."""
    outcome, commands = Outcome(), sum(isinstance(op, Run) for op in ops)
    try:
        for op in ops:
            if isinstance(op, Sync):
                outcome.sent += _sync(op, pipe, where)
            elif isinstance(op, File):
                _send_file(pipe, op.path, len(op.content), op.mode, None, [op.content])
            else:
                if op.on_sent is not None:
                    op.on_sent()
                given = None if op.input is None else len(op.input)
                pipe.send(_line({"run": list(op.argv), "stream": op.stream, "input": given}))
                if op.input:
                    pipe.send(op.input)
        pipe.end()
    except HostStopped:
        pass  # its answers say why
    except OSError as err:  # a workdir file this machine cannot read: end the input, say which
        with contextlib.suppress(HostStopped):
            pipe.end()
        raise GpujobError(
            f"cannot read {err.filename}: {err.strerror}",
            "fix its permissions, or leave it out with .gpujobignore",
        ) from None
    for _ in range(commands):
        answer = _answer(pipe, where)
        if "code" not in answer:
            break
        out = pipe.read(answer["out"])
        outcome.outputs.append(out)
        outcome.runs.append(Result(answer["code"], out.decode(errors="replace"), answer["err"]))
        if answer["code"] != 0:
            return outcome
    else:
        _answer(pipe, where, expect="done")
    return outcome


def _sync(op: Sync, pipe: Pipe, where: str) -> int:
    source = Path(op.source)
    have = {}
    for rel in shipped_files(source, op.excludes):
        try:
            stat = (source / rel).stat()
        except FileNotFoundError:
            continue  # a dangling link, or gone since the walk: nothing to ship
        have[rel] = [stat.st_size, int(stat.st_mtime)]
    pipe.send(_line({"sync": op.path, "have": have, "mirror": op.mirror}))
    need = _answer(pipe, where, expect="need")["need"]
    for rel in need:
        with open(source / rel, "rb") as handle:
            stat = os.fstat(handle.fileno())  # as it is now, not as listed
            _send_file(pipe, f"{op.path}/{rel}", stat.st_size, stat.st_mode & 0o777,
                       stat.st_mtime, _chunks(handle, stat.st_size))  # fmt: skip
    return len(need)


def _chunks(handle: BinaryIO, size: int) -> Iterator[bytes]:
    """Exactly `size` bytes: a file that grows while it is sent is cut there and one that
    shrinks is padded; its size then differs from this one, so the next submit sends it
    again."""
    left = size
    while left:
        chunk = handle.read(min(left, CHUNK)) or b"\0" * min(left, CHUNK)
        left -= len(chunk)
        yield chunk


def _send_file(
    pipe: Pipe, path: str, size: int, mode: int, mtime: float | None, chunks: Iterable[bytes]
) -> None:
    pipe.send(_line({"file": path, "size": size, "mode": mode, "mtime": mtime}))
    for chunk in chunks:
        pipe.send(chunk)


def _line(request: dict[str, object]) -> bytes:
    return json.dumps(request).encode() + b"\n"


def _answer(pipe: Pipe, where: str, expect: str | None = None) -> dict:
    line = pipe.readline()
    try:
        answer = json.loads(line) if line else {}
    except ValueError:
        answer = {"error": line.decode(errors="replace").strip()[-300:]}
    if "error" in answer or not answer or (expect and expect not in answer):
        said = answer.get("error") or "the program on the host ended without an answer"
        raise GpujobError(
            f"{where}: preparing the job failed: {said}",
            "check the free disk and the permissions of the home folder on the host",
        )
    return answer


class ProcessPipe:
    """The program as a child process: this machine's Python (the local provider's host), or
    `ssh` running it on a host (ssh.py)."""

    def __init__(self, argv: list[str], stderr: int | None = None) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr
        )

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
        except (BrokenPipeError, ValueError):  # it exited (or we closed its input already)
            raise HostStopped from None

    def end(self) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            raise HostStopped from None

    def readline(self) -> bytes:
        assert self.proc.stdout is not None
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.flush()  # a sync's listing waits for its answer
        return self.proc.stdout.readline()

    def read(self, size: int) -> bytes:
        assert self.proc.stdout is not None
        return self.proc.stdout.read(size)

    def close(self) -> None:
        if self.proc.stdin and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):  # it stopped reading: a command failed
                self.proc.stdin.close()
        if self.proc.stdout:
            self.proc.stdout.close()
        self.proc.wait()


def run_local(ops: list[Op]) -> Outcome:
    pipe = ProcessPipe([sys.executable, "-c", HOST_PROGRAM])
    try:
        return run_batch(ops, pipe, "this machine")
    finally:
        pipe.close()
