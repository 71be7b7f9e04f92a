"""gpujob's own known_hosts: a host key is pinned on first contact and refused if it changes.

The file is OpenSSH's format (`HOST KEYTYPE BASE64`, `[addr]:port` for a port other than 22),
so `gpujob ssh HOST` can hand it to the real `ssh` client unchanged. It lives in the state dir,
not in `~/.ssh`, so gpujob never edits the user's own trust decisions. No paramiko here: the
checks are plain text and unit-tested without a network.

A static host (hosts.yaml, user@addr) is pinned per address. A rented host's pin belongs to
its instance: `gpujob:<provider>:<id>:<addr>:<port>`, which `ssh` is given as HostKeyAlias.
Clouds hand a terminated machine's address to the next one, and that next one is another
instance, so it is met as a first contact, never refused as a changed key; `down` removes
the pins of what it terminates (`forget_instance`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from launcher.errors import GpujobError


def host_id(address: str, port: int) -> str:
    """The name OpenSSH writes for a host: bare on port 22, `[address]:port` otherwise."""
    return address if port == 22 else f"[{address}]:{port}"


INSTANCE_PIN = "gpujob:"


def instance_key(provider: str, instance_id: str) -> str:
    """Which rented instance a connection is for: `<provider>:<id>`."""
    return f"{provider}:{instance_id}"


def pin_name(address: str, port: int, instance: str | None = None) -> str:
    """The name a host's key is pinned under: the address (`host_id`) for a static host,
    the instance and its address for a rented one. Lower case, as `ssh` matches it."""
    if instance is None:
        return host_id(address, port)
    return f"{INSTANCE_PIN}{instance}:{address}:{port}".lower()


def fingerprint(key_base64: str) -> str:
    """OpenSSH's `SHA256:` fingerprint of a public key blob (what `ssh-keygen -lf` prints)."""
    digest = hashlib.sha256(base64.b64decode(key_base64)).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


@dataclass(frozen=True)
class PinnedKey:
    host: str
    key_type: str
    key_base64: str
    line_number: int


def parse_known_hosts(text: str) -> list[PinnedKey]:
    """Plain (unhashed) lines only: gpujob writes this file itself and never hashes names."""
    pins = []
    for number, raw in enumerate(text.splitlines(), start=1):
        parts = raw.split()
        if len(parts) < 3 or raw.lstrip().startswith(("#", "@", "|")):
            continue
        for host in parts[0].split(","):
            pins.append(PinnedKey(host, parts[1], parts[2], number))
    return pins


_WRITING = threading.Lock()


class KnownHosts:
    """Pins in one file of mode 0600; appends are atomic (write a copy, rename over)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def pins_for(self, host: str) -> list[PinnedKey]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        return [pin for pin in parse_known_hosts(text) if pin.host == host]

    def check(self, host: str, key_type: str, key_base64: str) -> bool:
        """True when the key was already pinned; pins it on first contact; raises on a change.

        Another key type for a pinned host counts as a change too: a server that offers a
        different algorithm than the one we pinned cannot prove it is the same machine.
        """
        with _WRITING:  # `up --count N` pins N hosts from N threads at once
            pins = self.pins_for(host)
            if any(p.key_type == key_type and p.key_base64 == key_base64 for p in pins):
                return True
            if pins:
                raise changed_key_error(host, pins[0], key_type, key_base64, self.path)
            self._append(f"{host} {key_type} {key_base64}\n")
            return False

    def forget_instance(self, instance: str) -> int:
        """Drop every pin of a rented instance (at any address it had): it is gone, and its
        addresses will serve other machines. How many went."""
        prefix = f"{INSTANCE_PIN}{instance}:".lower()
        with _WRITING:
            try:
                lines = self.path.read_text().splitlines(keepends=True)
            except FileNotFoundError:
                return 0
            kept = [ln for ln in lines if not ln.split() or not ln.split()[0].startswith(prefix)]
            if len(kept) < len(lines):
                self._write("".join(kept))
            return len(lines) - len(kept)

    def _append(self, line: str) -> None:
        try:
            old = self.path.read_text()
        except FileNotFoundError:
            old = ""
        if old and not old.endswith("\n"):
            old += "\n"
        self._write(old + line)

    def _write(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, self.path)


def changed_key_error(
    host: str, pinned: PinnedKey, key_type: str, key_base64: str, path: Path
) -> GpujobError:
    return GpujobError(
        f"host key of {host} changed: pinned {pinned.key_type} {fingerprint(pinned.key_base64)}"
        f", host now offers {key_type} {fingerprint(key_base64)}; refusing to connect",
        f"if the host was really re-installed, check the new fingerprint out of band, then "
        f"remove line {pinned.line_number} of {path}",
    )
