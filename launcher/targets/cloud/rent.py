"""What one command rented, until it hands it over: every other way out terminates it.

`gpujob up` hands its hosts over once it has printed them, `submit --up` once its job has
started on them. Until then an error, a refusal, Ctrl-C, SIGTERM or SIGHUP (`interrupts`)
ends in `Rent.undo`: it waits for a launch still in flight, whose answer names the instance
(a second signal ends that wait), then terminates everything launched, an instance whose
launch answer was lost included (found by its tag). A launch that answers after the undo
stopped waiting is terminated by the worker that sent it. Every host is recorded before its
launch call, so what even this misses (the process killed outright) is reconciled by the
next `up` or `down`.

A host with autostop is held (its watcher counts it busy) from its bootstrap until the hand
over, which releases the holds (targets.cloud.autostop.release_holds): no host ends itself while its
command still needs it, and one the command left behind ends once its hold expires.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, wait
from contextlib import contextmanager
from typing import Any

from launcher.clouds.base import STOP, Instance, LostAnswer, Provider, Stopped
from launcher.errors import GpujobError
from launcher.say import say
from launcher.state.hosts import HostsDB
from launcher.targets.cloud.interrupts import cleaning, handled, hurried

WAIT_STEP_S = 0.25
"""How often a cleanup's wait looks whether a signal asked it to stop waiting."""


def tell(text: str) -> None:
    """A cleanup's line; a closed terminal (SIGHUP) does not stop the cleanup."""
    with contextlib.suppress(OSError):
        say(text)


class Rent:
    """The hosts one command launched and has not handed over. Worker threads call `launch`
    and `update`; the main thread `undo`s (at most once) or `keep`s."""

    def __init__(self, what: str) -> None:
        self.what = what  # "up", "submit --up": named in the messages
        self.provider: Provider | None = None
        self.db: HostsDB | None = None
        self.ended: Callable[[Instance], None] = lambda _: None
        self.made: dict[str, Instance] = {}
        self.in_flight: set[str] = set()
        self.unanswered: list[str] = []  # launches whose answer was lost
        self.holds: set[str] = set()  # hosts whose autostop watcher holds until the hand-over
        self.kept = False
        self.closed = False
        self.why = "failed"
        self._lock = threading.Condition()

    def bind(self, provider: Provider, db: HostsDB, ended: Callable[[Instance], None]) -> None:
        """Where the hosts come from and are recorded; `ended(inst)` after each terminate
        (its SSH connection closed, so a command still running there fails at once)."""
        self.provider, self.db, self.ended = provider, db, ended

    def _bound(self) -> tuple[Provider, HostsDB]:
        assert self.provider is not None and self.db is not None, "bind() first"
        return self.provider, self.db

    def launch(self, name: str, label: str, send: Callable[[], Instance]) -> Instance:
        """One launch: its row written before the call (the name is the tag the cloud will
        carry), its answer recorded as it comes. None starts once the command is ending."""
        provider, db = self._bound()
        with self._lock:
            if self.closed or STOP.is_set():
                raise Stopped("interrupted")
            self.in_flight.add(name)
        try:
            db.intend(name, provider.name, label)
            inst = send()
        except BaseException as error:
            lost = isinstance(error, LostAnswer)  # the row stays `launching` for reconcile
            with self._lock:
                self.in_flight.discard(name)
                self.unanswered += [name] if lost else []
                self._lock.notify_all()
            if not lost:
                db.update(name, status="failed")
            raise
        with self._lock:
            self.in_flight.discard(name)
            late = self.closed
            if not late:
                self.made[name] = inst
                db.update(name, inst)
            self._lock.notify_all()
        if late:  # the undo stopped waiting for this answer: the instance goes here
            self._terminate(name, inst)
            raise Stopped("interrupted")
        return inst

    def update(self, name: str, inst: Instance, status: str) -> None:
        """A launched host's progress, recorded; Stopped once the undo has begun (its row
        says terminated by then, and stays so)."""
        _, db = self._bound()
        with self._lock:
            if self.closed:
                raise Stopped("interrupted")
            self.made[name] = inst
            db.update(name, inst, status=status)

    def hold(self, name: str) -> None:
        """`name`'s autostop watcher runs, held until the hand-over (a worker thread)."""
        with self._lock:
            self.holds.add(name)

    def keep(self) -> None:
        """Handed over: the hosts outlive the command, and their autostop holds go (the
        window of each runs from now)."""
        self.kept = True
        with self._lock:
            held = [self.made[name] for name in sorted(self.holds) if name in self.made]
            self.holds.clear()
        if held:
            from launcher.targets.cloud.autostop import release_holds

            release_holds(held, tell)

    def undo(self, interrupted: bool, why: str | None = None) -> None:
        """Terminate everything launched; the waiting for launches still in flight ends at a
        second signal, the terminate calls never do. `why`: a command that ends its rent on
        purpose says so (a ladder, once its last rung ended)."""
        with cleaning():
            with self._lock:
                if self.closed:
                    return
                if self.in_flight:
                    tell(f"waiting for the launch of {', '.join(sorted(self.in_flight))} to "
                         "answer, to terminate what it made (a signal ends this wait)")  # fmt: skip
                while self.in_flight and not hurried():
                    self._lock.wait(WAIT_STEP_S)
                self.closed = True
                self.why = why or ("interrupted" if interrupted else "failed")
                made, self.made = dict(self.made), {}
                unanswered, pending = list(self.unanswered), sorted(self.in_flight)
            if pending:
                tell(f"not waiting for the launch of {', '.join(pending)}: what it makes is "
                     "terminated as soon as it answers")  # fmt: skip
            made.update(self._lost(unanswered))
            for name, inst in made.items():
                self._terminate(name, inst)
            from launcher.targets.cloud.firewall import remove_made

            if self.provider is not None:  # after its hosts: Lambda's rulesets, if any
                remove_made(self.provider, tell, hurried)

    def _lost(self, names: list[str]) -> dict[str, Instance]:
        """Instances of launches whose answer was lost, by their tag. If even the list
        fails, their rows stay `launching` for reconcile."""
        if not names:
            return {}
        provider, db = self._bound()
        found = {}
        try:
            for inst in provider.list():
                if inst.name in names:
                    found[inst.name] = inst
                    db.update(inst.name, inst)
        except GpujobError as error:
            tell(f"could not look for instances of a lost launch answer: {error.one_line()}")
            tell("run `gpujob down --all` to remove anything left")
        return found

    def _terminate(self, name: str, inst: Instance) -> None:
        provider, db = self._bound()
        try:
            provider.terminate(inst.id)
        except Exception as error:  # one failure must not keep the others running
            said = error.one_line() if isinstance(error, GpujobError) else repr(error)
            tell(f"could not terminate {name} ({inst.id}): {said}; run `gpujob down {name}`")
            return
        db.update(name, status="terminated")
        tell(f"terminated {name} ({provider.name} {inst.id}) after the {self.why} {self.what}")
        with contextlib.suppress(Exception):
            self.ended(inst)


def settle(futures: Iterable[Future[Any]]) -> None:
    """Wait for worker threads to stop (each at its next poll, or as its host's connection
    ends) unless a signal says not to: a cleanup's last wait."""
    pending = set(futures)
    while pending and not hurried():
        _, pending = wait(pending, timeout=WAIT_STEP_S)


@contextmanager
def renting(what: str) -> Iterator[Rent]:
    """A renting command's length: signals handled (`interrupts.handled`) and a rent open,
    undone on every way out unless it was kept (`Rent.keep`: the hand-over)."""
    with handled():
        rent = Rent(what)
        try:
            yield rent
        except BaseException as error:
            with cleaning():
                if not rent.kept:
                    rent.undo(interrupted=isinstance(error, KeyboardInterrupt))
            raise
        else:
            if not rent.kept:  # a return before the hand-over: nothing stays rented
                rent.undo(interrupted=False)
