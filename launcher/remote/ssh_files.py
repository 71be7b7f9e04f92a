"""Files to a host over SSH: atomic single files by SFTP, batches in one exec, and the workdir
mirrored by size and mtime. A mixin of SSHConnection, which owns the transport.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

from launcher.errors import GpujobError
from launcher.remote.ignore import shipped_files
from launcher.remote.paramiko_loader import load_paramiko

CONNECT_TIMEOUT_S = 10
BULK_SILENCE_S = 30  # a read of the agent's that sends nothing this long is a dead link

# Writes the files that follow on stdin (a JSON line each, then its bytes): each lands whole
# (a temp file of its final mode from the first byte, renamed over), then the count.
UNPACK = r"""
import json, os, sys
src, count = sys.stdin.buffer, 0
while True:
    head = src.readline()
    if not head:
        break
    meta = json.loads(head)
    path, left = meta["path"], meta["size"]
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, ".%s.%d.tmp" % (os.path.basename(path), os.getpid()))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, meta["mode"])
    with os.fdopen(fd, "wb") as out:
        while left:
            chunk = src.read(min(left, 1 << 20))
            if not chunk:
                os.unlink(tmp)
                sys.exit("%s: the stream ended %d bytes short" % (path, left))
            out.write(chunk)
            left -= len(chunk)
    os.replace(tmp, path)
    count += 1
print(count)
"""


class SSHFiles:
    host: str
    _transport: Any
    _sftp: Any
    _made_dirs: set[str]

    def connect(self) -> None: ...
    def _exec(self, command: str, *, stream: bool = False) -> tuple[int, bytes, bytes]: ...

    def _sftp_client(self) -> Any:
        paramiko = load_paramiko()

        self.connect()
        if self._sftp is None:
            self._sftp = paramiko.SFTPClient.from_transport(self._transport)
        return self._sftp

    def _makedirs(self, folder: str) -> None:
        sftp = self._sftp_client()
        missing = []
        path = PurePosixPath(folder)
        while str(path) not in self._made_dirs and str(path) != path.root:
            try:
                sftp.stat(str(path))
                break
            except FileNotFoundError:
                missing.append(str(path))
                path = path.parent
        for name in reversed(missing):
            with contextlib.suppress(OSError):  # made meanwhile by a concurrent node
                sftp.mkdir(name)
        self._made_dirs.add(folder)

    def put(self, path: str, content: bytes, mode: int) -> None:
        """A temp file in the same folder gets its mode before its first byte, then is renamed
        over the target (posix-rename@openssh.com), so a reader never sees half a file."""
        sftp = self._sftp_client()
        target = PurePosixPath(path)
        self._makedirs(str(target.parent))
        tmp = str(target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"))
        try:
            with sftp.open(tmp, "wb") as handle:
                handle.chmod(mode)
                handle.write(content)
            sftp.posix_rename(tmp, path)
        except BaseException:
            with contextlib.suppress(Exception):
                sftp.remove(tmp)
            raise

    def put_file(self, source: str, path: str, mode: int) -> None:
        self.put(path, Path(source).read_bytes(), mode)

    def put_files(self, files: list[tuple[str, bytes, int]]) -> None:
        """All in one exec (UNPACK reads them from stdin, through the encrypted channel, never
        a command line): one round trip, where SFTP takes five a file, and on a host across
        the internet each is tens of milliseconds."""
        paramiko = load_paramiko()

        self.connect()
        try:
            channel = self._transport.open_session(timeout=CONNECT_TIMEOUT_S)
            channel.settimeout(BULK_SILENCE_S)
            channel.exec_command(shlex.join(["python3", "-c", UNPACK]))
            with channel:
                for path, content, mode in files:
                    head = {"path": path, "size": len(content), "mode": mode}
                    channel.sendall(json.dumps(head).encode() + b"\n")
                    channel.sendall(content)
                channel.shutdown_write()
                out = channel.makefile("rb").read()
                err = channel.makefile_stderr("rb").read()
                code = channel.recv_exit_status()
        except (paramiko.SSHException, EOFError, OSError) as error:
            raise GpujobError(
                f"{self.host}: writing {len(files)} file(s) failed: {error}"
            ) from None
        if code != 0 or out.strip() != str(len(files)).encode():
            said = err.decode(errors="replace").strip().splitlines()
            raise GpujobError(
                f"{self.host}: writing {len(files)} file(s) failed (exit {code}): "
                f"{said[-1] if said else out.decode(errors='replace').strip()}",
                "check the free disk and the permissions of the home folder on the host",
            )

    def sync_dir(
        self, source: str, path: str, excludes: tuple[str, ...], mirror: bool = False
    ) -> int:
        """Ship what differs in size or mtime (whole seconds, as SFTP keeps them) from one
        `find` listing of the host's copy; shipped files keep their mtime and mode, and each
        lands whole (a temp file renamed over), never written over in place. With `mirror`,
        files the source no longer has are removed there."""
        have = self._remote_listing(path)
        src = Path(source)
        sent, wanted = 0, set()
        for rel in shipped_files(src, excludes):
            wanted.add(rel)
            stat = (src / rel).stat()
            if have.get(rel) == (stat.st_size, int(stat.st_mtime)):
                continue
            target = PurePosixPath(f"{path}/{rel}")
            sftp = self._sftp_client()  # opened only when something moves
            self._makedirs(str(target.parent))
            tmp = str(target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"))
            sftp.put(str(src / rel), tmp)
            sftp.chmod(tmp, stat.st_mode & 0o777)
            sftp.utime(tmp, (int(stat.st_atime), int(stat.st_mtime)))
            sftp.posix_rename(tmp, str(target))
            sent += 1
        if mirror:
            for rel in sorted(have.keys() - wanted):
                with contextlib.suppress(OSError):
                    self._sftp_client().remove(f"{path}/{rel}")
        return sent

    def _remote_listing(self, path: str) -> dict[str, tuple[int, int]]:
        script = 'if [ -d "$1" ]; then find "$1" -type f -printf "%s %T@ %P\\0"; fi'
        code, out, err = self._exec(shlex.join(["sh", "-c", script, "sh", path]))
        if code != 0:
            raise GpujobError(f"{self.host}: cannot list {path}: {err.decode().strip()}")
        listing = {}
        for entry in out.split(b"\0"):
            if entry:
                size, mtime, rel = entry.decode(errors="surrogateescape").split(" ", 2)
                listing[rel] = (int(size), int(float(mtime)))
        return listing
