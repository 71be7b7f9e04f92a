"""The instances of one `up --count N`, rented and watched together.

Vast lets one key search offers once per 6 s and show an instance once per 2 s (its OAS
`x-rate-limit` notes, reference §6); eight hosts that each searched and polled on their own
spent most of an `up --count 8` waiting out 429s. Here the launches share one search (read
again after a refusal, as before, or once it is a minute old), and the waiters share one
`list` call a poll; a host the list does not show (yet) is described on its own.
"""

from __future__ import annotations

import threading
import time

from launcher.clouds.base import (
    GpuRequest,
    Instance,
    Offer,
    Provider,
    poll_interval,
    poll_until_running,
)

FRESH_S = 60.0  # an offer list older than this is read again before the next launch


class OfferBook:
    """One search for many launches. An offer is a pool of capacity on Lambda (an instance
    type in a region: launched from again and again) but one machine on Vast, gone once
    rented: `single_use` keeps a rented one from being offered to the next launch."""

    def __init__(
        self,
        provider: Provider,
        request: GpuRequest,
        single_use: bool,
        offers: list[Offer] | None = None,
    ) -> None:
        """`offers`: a search just made for `request` (the one `up` showed), used first."""
        self.provider = provider
        self.request = request
        self.single_use = single_use
        self._lock = threading.Lock()
        self._offers = offers
        self._read_at = time.monotonic()
        self._taken: set[str] = set()

    def offers(self) -> list[Offer]:
        with self._lock:
            if self._offers is None or time.monotonic() - self._read_at > FRESH_S:
                self._offers = self.provider.offers(self.request)
                self._read_at = time.monotonic()
            return [o for o in self._offers if o.raw_id not in self._taken]

    def refused(self) -> None:
        """An offer was refused: the market moved, so the next launch reads it again."""
        with self._lock:
            self._offers = None

    def took(self, offer: Offer) -> None:
        if self.single_use:
            with self._lock:
                self._taken.add(offer.raw_id)


class StatusBoard:
    """One `list` call a poll interval, read by every waiter of the same `up`."""

    def __init__(self, provider: Provider) -> None:
        self.provider = provider
        self._lock = threading.Lock()
        self._seen: dict[str, Instance] = {}
        self._read_at = float("-inf")

    def read(self, instance_id: str) -> Instance:
        with self._lock:
            if time.monotonic() - self._read_at >= poll_interval() * 0.9:
                self._seen = {inst.id: inst for inst in self.provider.list()}
                self._read_at = time.monotonic()
            seen = self._seen.get(instance_id)
        return seen if seen is not None else self.provider.describe(instance_id)

    def wait_until_running(self, instance_id: str, timeout: float) -> Instance:
        """`Provider.wait_until_running`, read from the shared list."""
        return poll_until_running(self.provider, instance_id, timeout, self.read)
