"""Misbehaviour on request: the failures a real cloud shows now and then, made to order.

A test queues `Fault`s (through `POST /_fake/faults` or `FakeControl.fault`); each matching
call consumes one. `Knobs` are the slower, standing settings: how long booting lasts, whether
new instances stay booting for ever, whether the rate limiter is on. Both are plain data so
that the HTTP control endpoint and the Python handle share one definition.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, fields
from typing import Any

ACTIONS = ("error", "html", "delay", "drop")


@dataclass
class Fault:
    """One kind of misbehaviour for the next `count` calls of operation `op` ("*" = any).

    - `error`: answer `status` with the API's documented error body for `code` (or with
      `body` verbatim: a string is sent as text/plain, anything else as JSON); `retry_after`
      adds that header (Lambda only; Vast never sends one).
    - `html`: answer `status` (default 502) with an HTML page, as a proxy in front would.
    - `delay`: sleep `seconds`, then answer normally (a client with a shorter timeout times out).
    - `drop`: close the connection without an answer.
    With `handle_first`, a `delay` or `drop` happens after the real work was done: the
    launch that created an instance whose id the client never heard of. `skip` lets that
    many matching calls through first.
    """

    action: str = "error"
    op: str = "*"
    method: str | None = None
    status: int | None = None
    code: str | None = None
    message: str | None = None
    body: Any = None
    retry_after: int | None = None
    seconds: float = 0.0
    count: int = 1
    skip: int = 0
    handle_first: bool = False

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Fault:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown fault fields: {sorted(unknown)}; known: {sorted(known)}")
        fault = cls(**data)
        if fault.action not in ACTIONS:
            raise ValueError(f"fault action must be one of {ACTIONS}, not {fault.action!r}")
        if fault.action == "error" and fault.status is None:
            raise ValueError("an error fault needs a status")
        return fault

    def matches(self, op: str, method: str) -> bool:
        return self.op in ("*", op) and self.method in (None, method)


class FaultBook:
    """The queue of pending faults; the first that matches a call is the one used."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._faults: list[Fault] = []

    def add(self, fault: Fault) -> None:
        with self._lock:
            self._faults.append(fault)

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def pending(self) -> list[dict[str, Any]]:
        with self._lock:
            return [asdict(f) for f in self._faults]

    def take(self, op: str, method: str) -> Fault | None:
        with self._lock:
            for fault in self._faults:
                if not fault.matches(op, method):
                    continue
                if fault.skip > 0:
                    fault.skip -= 1
                    return None
                fault.count -= 1
                if fault.count <= 0:
                    self._faults.remove(fault)
                return fault
        return None


@dataclass
class Knobs:
    """Standing settings. Lifecycles advance on reads and on time, whichever a test prefers:
    an instance leaves `booting` once its host is up AND it was read `boot_reads` times in
    that state AND `boot_seconds` passed. Tests use reads (no wall clock); demos use seconds.
    """

    boot_seconds: float = 0.0
    boot_reads: int = 0
    terminate_seconds: float = 0.0
    terminate_reads: int = 0
    boot_forever: bool = False
    rate_limits: bool = False
    rate_scale: float = 1.0
    quota: int = 20
    ssh_key_field: str = "public_key"
    """Vast: the field `GET /ssh/` names a key's text in (`public_key` per Vast's OpenAPI;
    `ssh_key` in vast-cli's test of `show ssh-keys`, `key` in an answer issue 30 saw)."""
    instance_key: bool = True
    """Vast: new containers get CONTAINER_API_KEY (off: an instance without its own key,
    whose autostop cannot work)."""

    def update(self, data: dict[str, Any]) -> None:
        known = {f.name for f in fields(self)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown knobs: {sorted(unknown)}; known: {sorted(known)}")
        for key, value in data.items():
            setattr(self, key, value)

    def as_json(self) -> dict[str, Any]:
        return asdict(self)
