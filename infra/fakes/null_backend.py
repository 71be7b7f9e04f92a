"""A backend that makes no hosts: loopback addresses nobody listens on, and a log of calls.

Only for tests of the APIs' shape (auth, errors, state machines, the query language): they
need no root and run in milliseconds. Its calls return at once, so the fakes call it inline
(`synchronous`), which keeps the order of states deterministic in those tests.
"""

from __future__ import annotations

import threading


class NullBackend:
    synchronous = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self.live: dict[str, tuple[str, int]] = {}
        self.calls: list[tuple[str, str]] = []
        self.keys: dict[str, list[str]] = {}

    def _address(self, instance_id: str, port: int | None) -> tuple[str, int]:
        with self._lock:
            self._count += 1
            n = self._count
            # 127.0.100.0/24: loopback, so a stray connection attempt stays on this machine.
            where = (f"127.0.100.{n % 250 + 1}", 40000 + n if port is None else port)
            self.live[instance_id] = where
            return where

    def _note(self, what: str, instance_id: str) -> None:
        with self._lock:
            self.calls.append((what, instance_id))

    def launch_vm(self, instance_id: str, ssh_public_key: str) -> tuple[str, int]:
        self._note("launch_vm", instance_id)
        self.keys[instance_id] = ssh_public_key.splitlines()
        return self._address(instance_id, 22)

    def launch_container(
        self,
        instance_id: str,
        image: str,
        ssh_public_key: str,
        onstart: str | None,
        env: dict[str, str],
        *,
        machine_id: int = 1,
        args: list[str] | None = None,
        volumes: dict[str, str] | None = None,
    ) -> tuple[str, int]:
        self._note("launch_container", instance_id)
        self.keys[instance_id] = ssh_public_key.splitlines()
        host, port = self._address(instance_id, None)
        return host, 0 if args is not None else port

    def terminate(self, instance_id: str) -> None:
        self._note("terminate", instance_id)
        with self._lock:
            self.live.pop(instance_id, None)

    def reboot(self, instance_id: str) -> None:
        self._note("reboot", instance_id)

    def drop_ssh(self, instance_id: str) -> None:
        self._note("drop_ssh", instance_id)

    def set_authorized_keys(self, instance_id: str, keys: list[str], *, replace: bool) -> None:
        self._note("replace_keys" if replace else "add_keys", instance_id)
        old = [] if replace else self.keys.get(instance_id, [])
        self.keys[instance_id] = [*old, *keys]

    def stop(self, instance_id: str, grace_s: int = 2) -> None:
        self._note("stop", instance_id)

    def start(self, instance_id: str) -> None:
        self._note("start", instance_id)

    def close(self) -> None:
        for instance_id in list(self.live):
            self.terminate(instance_id)
