"""Which candidate `submit --up` rents when the spec gives several (`resources.candidates`:
SkyPilot's any_of, ordered, a list or set of accelerators) and `--up` names no GPU.

Every candidate is quoted by every cloud that may serve it (Lambda and Vast, or the one
`--provider` names): the price of its cheapest offer, or why there is none. `pick` is pure:
`cheapest` takes the cheapest quote of any candidate, `in_order` the first candidate with a
quote (at its cheapest cloud). The choice becomes an ordinary `--up GPU --provider CLOUD`
request, so the spec loads with that candidate taken (spec/sky_resources.py), the dry run
and the recovery controller see one GPU, and a restart rents the same GPU again.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from launcher.errors import GpujobError, UsageError
from launcher.say import say
from launcher.spec.candidates import Candidate, Candidates
from launcher.targets.base import LaunchRequest

FROM_SPEC = "spec"
"""`--up` given alone (cli/jobs.py's flag value): the spec's GPU, chosen here."""
ANY_CLOUD = "any"
"""The provider when `--up` is alone and `--provider` is not given: every cloud quotes."""


@dataclass(frozen=True)
class Quote:
    """One cloud's answer for one candidate: its cheapest offer's $/hour, or why none."""

    cloud: str
    price: float | None = None
    why: str = ""

    def said(self) -> str:
        if self.price is not None:
            return f"{self.cloud} ${self.price:.2f}/h"
        return f"{self.cloud}: {self.why}" if self.cloud else self.why


@dataclass(frozen=True)
class Choice:
    label: str
    cloud: str
    price: float
    line: str


def pick(what: str, candidates: Candidates, quotes: list[list[Quote]]) -> Choice:
    """The candidate to rent and the line that says why; none servable is one error line
    naming each candidate's reasons. `what` starts the line (`task.yaml:3: candidates ...`)."""
    labels = candidates.labels
    every = "; ".join(f"{label}: {', '.join(q.said() for q in qs)}"
                      for label, qs in zip(labels, quotes, strict=True))  # fmt: skip
    priced = [(n, q) for n, qs in enumerate(quotes) for q in qs if q.price is not None]
    if not priced:
        raise GpujobError(f"{what}: no candidate can be rented ({every}); nothing was rented",
                          "raise --max-price or resources.max_hourly_cost, set the missing "
                          "API key, or add a candidate a cloud sells")  # fmt: skip
    if candidates.choose == "cheapest":
        n, quote = min(priced, key=lambda item: (item[1].price, item[0]))
        why = "the cheapest offer of the candidates"
    else:
        n = priced[0][0]
        quote = min((q for m, q in priced if m == n), key=lambda q: q.price or 0.0)
        why = "the first candidate in order that a cloud offers"
    assert quote.price is not None
    line = (f"{what}: renting {labels[n]} on {quote.cloud} at ${quote.price:.2f}/h per host, "
            f"{why} ({every})")  # fmt: skip
    return Choice(labels[n], quote.cloud, quote.price, line)


def quotes_for(
    candidate: Candidate, clouds: tuple[str, ...], max_price: float | None, disk: int
) -> list[Quote]:
    """Each cloud's cheapest offer for one candidate, asked only where it can be had: a
    GPU the cloud does not sell, interruptible hosts where it has none, or no API key is a
    reason, not a call."""
    from launcher.clouds.base import no_offers, parse_gpu_request
    from launcher.clouds.registry import CLOUDS, get_provider, trait

    if candidate.accelerators is None:
        return [Quote("", why="no GPU: `submit --up` rents GPU hosts")]
    try:
        request = parse_gpu_request(candidate.accelerators, min_disk_gb=disk,
                                    max_price=max_price, spot=candidate.use_spot)  # fmt: skip
    except UsageError as err:
        return [Quote("", why=err.message)]
    quotes = []
    for cloud in clouds:
        variable = CLOUDS[cloud][2]
        if not request.gpu.sold_by(cloud):
            quotes.append(Quote(cloud, why=f"sells no {request.gpu.name}"))
        elif candidate.use_spot and not trait(cloud, "can_spot", False):
            quotes.append(Quote(cloud, why="rents no interruptible hosts (use_spot)"))
        elif not os.environ.get(variable):
            quotes.append(Quote(cloud, why=f"not asked: {variable} is not set"))
        else:
            try:
                offers = get_provider(cloud).offers(request)
            except GpujobError as err:
                quotes.append(Quote(cloud, why=err.message))
                continue
            if offers:
                quotes.append(Quote(cloud, offers[0].price_per_hour))
            else:
                why = no_offers(cloud, request).message.removeprefix(f"{cloud}: ")
                quotes.append(Quote(cloud, why=why))
    return quotes


def rental_of(request: LaunchRequest) -> LaunchRequest:
    """The request as it rents: `--up` alone chosen here (said), any other as given."""
    return choose_rental(request) if request.up == FROM_SPEC else request


def choose_rental(request: LaunchRequest) -> LaunchRequest:
    """`--up` alone: the spec's candidates (or its one GPU) quoted, one chosen and said; the
    request comes back as `--up GPU --provider CLOUD`."""
    from launcher.clouds.registry import CLOUDS
    from launcher.spec.load import load_requested

    loaded = load_requested(vars(replace(request, up=None)))
    resources = loaded.spec.resources
    candidates = resources.candidates
    if candidates is not None:
        labels = ", ".join(candidates.labels)
        what = f"{loaded.where('resources', 'candidates')}: candidates {labels}"
    elif resources.accelerators is not None:
        one = Candidate(accelerators=resources.accelerators, use_spot=resources.use_spot)
        candidates = Candidates(choose="cheapest", of=[one])
        what = f"{loaded.where('resources', 'accelerators')}: resources.accelerators"
    else:
        raise UsageError(f"{loaded.where('resources')}: `--up` alone rents the spec's GPU, "
                         "and the spec names none (resources.accelerators)",
                         "name one: --up GPU, e.g. --up a100")  # fmt: skip
    clouds = tuple(CLOUDS) if request.provider == ANY_CLOUD else (request.provider,)
    max_price = request.max_price if request.max_price is not None else resources.max_hourly_cost
    quotes = [quotes_for(c, clouds, max_price, request.disk) for c in candidates.of]
    choice = pick(what, candidates, quotes)
    say(choice.line)
    return replace(request, up=choice.label, provider=choice.cloud)
