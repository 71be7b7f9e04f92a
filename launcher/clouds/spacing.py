"""Calls a cloud limits to one per so many seconds, made one at a time and spaced by this
process instead of answered 429 and retried: Lambda's launch (one per 12 s, OpenAPI 1.10)
and Vast's create (one per 4.5 s a key, its OAS `x-rate-limit`), which `up --count N`
makes N of."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from launcher.clouds.base import pause


class Spacing:
    """One call at a time, the next at least `interval_s` after the last one ended (the
    interval from the environment variable `env` where it is set: tests, whose fakes run
    the limits faster)."""

    def __init__(self, env: str, interval_s: float) -> None:
        self.env = env
        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._last = 0.0

    @contextmanager
    def turn(self) -> Iterator[None]:
        with self._lock:
            interval = float(os.environ.get(self.env, self.interval_s))
            wait = self._last + interval - time.monotonic()
            if self._last and wait > 0:
                pause(wait)
            try:
                yield
            finally:
                self._last = time.monotonic()
