"""Work for many hosts at once: a job of 16 nodes is prepared, checked and started in the time
of its slowest host, not the sum of them (each step is mostly waiting on its host).

Items of one host keep their order on one thread (a host's connection serves one command
at a time, and a job placed with all its nodes on one host prepares them in turn, as
before); different hosts run side by side. Every item runs to its end, then the first
failure in item order is raised, so the error a user sees does not depend on which host
answered first.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

Item = TypeVar("Item")
Out = TypeVar("Out")

MAX_THREADS = 32
"""More hosts than this share threads (each thread takes the next host's items)."""


def per_host(
    items: Sequence[Item], host_of: Callable[[Item], Hashable], work: Callable[[Item], Out]
) -> list[Out]:
    """`work(item)` for every item, those of one host in order, hosts at once; the results
    in item order, or the first item's exception (in item order) once all have ended."""
    groups: dict[Hashable, list[int]] = {}
    for index, item in enumerate(items):
        groups.setdefault(host_of(item), []).append(index)
    results: dict[int, Out] = {}
    errors: dict[int, BaseException] = {}
    if len(groups) <= 1:  # one host: this thread, no pool (a Ctrl-C lands where it always did)
        for index, item in enumerate(items):
            try:
                results[index] = work(item)
            except BaseException as err:
                errors[index] = err
                break  # one host: what follows it would have run after the failure
        return _ordered(results, errors, len(items))
    queue = list(groups.values())
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                indexes = queue.pop(0)
            for index in indexes:
                try:
                    results[index] = work(items[index])
                except BaseException as err:
                    errors[index] = err
                    break  # this host's later items would have followed the failure

    threads = [threading.Thread(target=worker, daemon=True)
               for _ in range(min(len(groups), MAX_THREADS))]  # fmt: skip
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:  # Ctrl-C: the hosts' commands got it too; their ends are awaited
        for thread in threads:
            thread.join()
        raise
    return _ordered(results, errors, len(items))


def _ordered(results: dict[int, Out], errors: dict[int, BaseException], count: int) -> list[Out]:
    if errors:
        raise errors[min(errors)]
    return [results[index] for index in range(count)]
