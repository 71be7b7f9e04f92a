"""Make a host ready for jobs: run the steps in order, report each, stop at the first failure.

Used by `gpujob up` after a host answers SSH, and on its own by `gpujob up --host` for a
machine the user already has. The steps live in `steps.py`; this module only runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from launcher.bootstrap.steps import STEPS, Findings, HostProfile, StepResult
from launcher.errors import GpujobError
from launcher.remote.base import Connection

__all__ = ["BootstrapError", "Bootstrapped", "HostProfile", "bootstrap", "format_result"]


class BootstrapError(GpujobError):
    """A step failed; the message names the host and step, the hint says what to do."""


@dataclass(frozen=True)
class Bootstrapped:
    host: str
    results: list[StepResult]
    found: Findings

    @property
    def changed(self) -> bool:
        return any(r.status == "fixed" for r in self.results)

    def summary(self) -> str:
        fixed = [r.step for r in self.results if r.status == "fixed"]
        if not fixed:
            return f"{self.host}: ready; nothing changed"
        return f"{self.host}: ready; fixed {', '.join(fixed)}"


def format_result(host: str, result: StepResult) -> str:
    return f"{host}: {result.status:<7} {result.step:<7} {result.detail}"


def bootstrap(
    conn: Connection,
    host: str,
    profile: HostProfile,
    report: Callable[[str], None] = lambda _: None,
) -> Bootstrapped:
    """Every step or the first failure, as BootstrapError with the step's own words."""
    found = Findings()
    results: list[StepResult] = []
    from launcher.progress import waiting

    for step in STEPS:
        with waiting(f"{host}: {step.__name__}"):  # a pull or a copy may take minutes
            result = step(conn, profile, found)
        results.append(result)
        report(format_result(host, result))
        if result.status == "failed":
            raise BootstrapError(f"{host}: {result.step}: {result.detail}", result.hint)
    return Bootstrapped(host, results, found)
