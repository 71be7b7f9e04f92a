"""Candidate resources: several GPUs a job can run on (SkyPilot's `resources.any_of`,
`resources.ordered`, a list or set of accelerators), kept in the spec so that planning and
`submit --up` see every one, not only the one taken.

`resources.accelerators` stays the candidate the job is planned for (the first, or the one
`submit --up` chose); `resources.candidates` says what else it could have been and how the
choice is made: `cheapest` (any_of: the cheapest offer across the clouds) or `in_order`
(ordered: the first that can be rented). Which one is taken is targets/cloud/candidates.py's
work: it needs offers, so it is not the spec's.
"""

from __future__ import annotations

import re
from typing import Literal, Protocol, Self, TypeVar

from pydantic import Field

from launcher.spec.limits import StrictModel


class Candidate(StrictModel):
    accelerators: str | None = Field(
        default=None, description="GPU type and count per node, e.g. `L4:1`; none means CPU."
    )
    use_spot: bool = Field(default=False, description="This candidate rents interruptible hosts.")

    @property
    def label(self) -> str:
        return self.accelerators or "(no GPU)"


class Candidates(StrictModel):
    choose: Literal["cheapest", "in_order"] = Field(
        description="`cheapest`: the cheapest offer of any candidate (SkyPilot's any_of); "
        "`in_order`: the first candidate that can be rented (ordered, a list)."
    )
    of: list[Candidate] = Field(min_length=1, description="The candidates, as written.")

    @property
    def labels(self) -> list[str]:
        return [c.label for c in self.of]


def unrented_line(where: str, candidates: Candidates, taken: str | None) -> str:
    """Said when the job runs where nothing is rented (`--on`, this machine, SLURM): no offer
    is compared there, so the candidate planned for is the first (or `--set`'s)."""
    return (
        f"{where}: candidates {', '.join(candidates.labels)}: the job is planned for "
        f"{taken or '(no GPU)'}; nothing is rented here, so no offer is compared "
        "(`submit --up` alone rents the cheapest, or first offered, of them)"
    )


def gpu_key(name: str) -> str:
    """SkyPilot's GPU names compare case-insensitively, `-`, `_` and spaces aside."""
    return re.sub(r"[\s_-]+", "", name.partition(":")[0].lower())


def candidate_of(up: str, labels: list[str]) -> int | None:
    """The candidate `--up GPU` names: the same label first (`a100:8` over `A100:1`), else
    the first of the same GPU; None where no candidate is that GPU."""
    keys = [re.sub(r"\s+", "", label.lower()) for label in labels]
    exact = re.sub(r"\s+", "", up.lower())
    if exact in keys:
        return keys.index(exact)
    return next((n for n, label in enumerate(labels) if gpu_key(label) == gpu_key(up)), None)


class WithCandidates(Protocol):
    accelerators: str | None
    use_spot: bool
    candidates: Candidates | None

    def model_copy(self, *, update: dict[str, object] | None = None) -> Self: ...


R = TypeVar("R", bound=WithCandidates)


def taken(resources: R, up: str | None) -> R:
    """A gpujob spec's `resources` planned for the candidate `--up GPU` names, else for its
    `accelerators`, else for the first candidate (a SkyPilot task's translation does this
    itself, with the entry's other fields)."""
    candidates = resources.candidates
    if candidates is None:
        return resources
    n = candidate_of(up, candidates.labels) if up else None
    if n is None and resources.accelerators is not None:
        return resources
    chosen = candidates.of[n or 0]
    return resources.model_copy(
        update={
            "accelerators": chosen.accelerators,
            "use_spot": chosen.use_spot or resources.use_spot,
        }
    )
