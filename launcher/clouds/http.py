"""HTTP for the cloud providers: one session, bounded retries, the cloud's error in one line.

Retried: 429 and 502/503/504 (both clouds ask clients to back off; Vast never sends
Retry-After, Lambda's limiter may), and for calls that create nothing, a connection that
failed; each wait is said on stderr, so a long backoff never looks like a hang. A launch
whose answer was lost is never retried blindly: it may have created an instance, and a
second call would create another. `up` records its intent first and `reconcile` finds such
an instance by its tag instead.

`requests` and `tenacity` are imported here, and this module only inside commands.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import requests
from tenacity import (
    RetryCallState,
    retry,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from launcher.clouds.base import LostAnswer, ProviderError

RETRY_STATUS = {429: "rate limited", 502: "bad gateway", 503: "unavailable",
                504: "gateway timeout"}  # fmt: skip
ATTEMPTS = 6
TIMEOUT_S = 60.0
QUICK: ContextVar[float | None] = ContextVar("quick", default=None)
"""Set by `quick_calls`: one try, within this many seconds."""


@contextmanager
def quick_calls(timeout_s: float) -> Iterator[None]:
    """Calls inside are tried once, each within `timeout_s` (`status`: a cloud that hangs or
    refuses is reported unverified at once, not retried for minutes)."""
    token = QUICK.set(timeout_s)
    try:
        yield
    finally:
        QUICK.reset(token)


def backoff_base() -> float:
    """Seconds before the first retry (doubling after). `GPUJOB_RETRY_BASE_S` shortens it in
    tests; real clouds want about 1 s (Lambda: 1 request/s)."""
    return float(os.environ.get("GPUJOB_RETRY_BASE_S", "1.0"))


class Retryable(Exception):
    """A reply worth asking again for; carries it so the last one can be reported."""

    def __init__(self, reply: requests.Response | None, why: str) -> None:
        super().__init__(why)
        self.reply = reply
        self.why = why


def _wait(state: RetryCallState) -> float:
    """Exponential from the base, stretched by up to as much again at random, or the
    server's Retry-After when it is longer (capped). The stretch spreads the retries of the
    calls one command makes at once (`up --count 8`'s creates, `down --all`'s deletes):
    answered 429 together by a per-endpoint limit, they would otherwise all come back at
    the same instant, one would get through each time, and the last ones run out of tries."""
    exp = jittered(wait_exponential(multiplier=backoff_base(), max=60 * backoff_base())(state))
    error = state.outcome.exception() if state.outcome else None
    if isinstance(error, Retryable) and error.reply is not None:
        after = error.reply.headers.get("Retry-After", "")
        if after.isdigit():
            return max(exp, min(float(after), 60.0))
    return exp


def jittered(wait: float) -> float:
    """`wait` to twice `wait`, at random (never shorter than the backoff asked)."""
    return wait * (1.0 + random.random())


def bearer_client(
    cloud: str,
    key: str | None,
    key_variable: str,
    key_page: str,
    url: str,
    describe_error: Callable[..., str],
) -> ApiClient:
    """A cloud's client, its key in an `Authorization: Bearer` header only (a query
    parameter ends up in proxies' logs); a missing key is a usage error naming where to
    make one."""
    from launcher.errors import UsageError

    key = key or os.environ.get(key_variable)
    if not key:
        raise UsageError(f"{key_variable} is not set", f"create one at {key_page}")
    client = ApiClient(cloud, url, {"Authorization": f"Bearer {key}"}, describe_error)
    client.key = key
    return client


class ApiClient:
    """`call(method, path, ...)` -> parsed JSON. `describe_error(reply)` turns an error reply
    into the cloud's own words; it differs per cloud."""

    def __init__(
        self,
        provider: str,
        base_url: str,
        headers: dict[str, str],
        describe_error: Callable[[requests.Response], str],
    ) -> None:
        self.provider = provider
        self.base_url = base_url.rstrip("/")
        self.session = requests.Session()
        self.session.headers.update(headers)
        self.describe_error = describe_error
        self.key: str | None = None
        """The bearer key, for what must carry it elsewhere (Lambda's autostop key file)."""

    def call(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        creates: bool = False,
        url: str | None = None,
    ) -> Any:
        """One API call with bounded retries. `creates`: a lost answer is not retried."""
        target = url or f"{self.base_url}{path}"
        quick = QUICK.get()
        attempts, timeout_s = (1, quick) if quick is not None else (ATTEMPTS, TIMEOUT_S)

        def once() -> Any:
            try:
                reply = self.session.request(
                    method, target, json=json, params=params, timeout=timeout_s
                )
            except requests.RequestException as error:
                if creates:
                    raise LostAnswer(
                        f"{self.provider}: no answer to {method} {path} ({type(error).__name__})",
                        "it may have created an instance; `gpujob up` or `gpujob down --all` "
                        "finds it by its tag",
                    ) from None
                raise Retryable(None, f"no answer ({type(error).__name__})") from None
            if reply.status_code in RETRY_STATUS:
                raise Retryable(reply, f"{reply.status_code} {RETRY_STATUS[reply.status_code]}")
            return reply

        retrying = retry(
            retry=retry_if_exception(lambda e: isinstance(e, Retryable)),
            stop=stop_after_attempt(attempts),
            wait=_wait,
            before_sleep=self._said,
            reraise=True,
        )(once)
        try:
            reply = retrying()
        except Retryable as last:
            detail = self.describe_error(last.reply) if last.reply is not None else last.why
            raise ProviderError(
                f"{self.provider}: {method} {path} still failing after {attempts} tries: {detail}",
                "the cloud is busy or rate-limiting; try again in a minute",
            ) from None
        if not reply.ok:
            raise ProviderError(f"{self.provider}: {self.describe_error(reply)}")
        try:
            return reply.json()
        except ValueError:
            raise ProviderError(
                f"{self.provider}: {method} {path} answered {reply.status_code} with a body that "
                f"is not JSON: {_snippet(reply.text)}"
            ) from None

    def _said(self, state: RetryCallState) -> None:
        """`gpujob: lambda: 429 rate limited; retrying in 2.0 s (attempt 2 of 6)`."""
        error = state.outcome.exception() if state.outcome else None
        why = error.why if isinstance(error, Retryable) else "failed"
        wait = state.next_action.sleep if state.next_action else 0.0
        with contextlib.suppress(OSError):  # a closed terminal must not end the call
            sys.stderr.write(f"gpujob: {self.provider}: {why}; retrying in {wait:.1f} s "
                             f"(attempt {state.attempt_number + 1} of {ATTEMPTS})\n")  # fmt: skip
            sys.stderr.flush()


def _snippet(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def error_json(reply: requests.Response) -> Any:
    """The body as JSON, or None (proxies answer HTML; Vast's 429 is often plain text)."""
    try:
        return reply.json()
    except ValueError:
        return None


def shape_error(provider: str, what: str, expected: str) -> ProviderError:
    """An answer that is not what the API documents: an error, never "nothing there"."""
    return ProviderError(
        f"{provider}: unexpected answer to {what}: expected {expected}",
        "the API may have changed; run with --debug and report it",
    )


def text_of(reply: requests.Response) -> str:
    return _snippet(reply.text) or f"HTTP {reply.status_code}"
