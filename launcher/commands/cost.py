"""`gpujob cost [--since 7d] [--json]`: what jobs and rented hosts cost, from the prices and
times the state db recorded (state/costs.py), rented-but-idle time shown apart."""

from __future__ import annotations

import time

from launcher.errors import UsageError
from launcher.state.costs import Costs, recorded_costs

Row = dict[str, str | float | None]


def cost(since: str | None) -> Costs:
    """Every job and rented host up in the window (`7d`, `12h`; None: all recorded)."""
    return recorded_costs(None if since is None else time.time() - _duration(since))


def _duration(text: str) -> float:
    from launcher.spec.limits import parse_duration

    try:
        return parse_duration(text)
    except ValueError as err:
        raise UsageError(f"--since {text}: {err}", "e.g. --since 7d or --since 12h") from None


def _money(amount: float | None) -> str | None:
    return None if amount is None else f"${amount:.2f}"


def table_rows(found: Costs) -> tuple[list[Row], list[Row]]:
    """The jobs' rows and the hosts' rows as the table shows them (money to the cent)."""
    jobs: list[Row] = [
        {"job": j.id, "state": j.state, "hosts": ", ".join(j.hosts),
         "hours": f"{j.hours:.2f}", "cost": _money(j.cost)}
        for j in found.jobs
    ]  # fmt: skip
    hosts: list[Row] = [
        {"host": h.name, "gpu": h.gpu, "$/hour": h.price_per_hour, "up h": f"{h.up_h:.2f}",
         "busy h": f"{h.busy_h:.2f}", "idle h": f"{h.idle_h:.2f}", "cost": _money(h.cost),
         "idle cost": _money(h.idle_cost), "live": "yes" if h.live else "no"}
        for h in found.hosts
    ]  # fmt: skip
    return jobs, hosts


def total_line(found: Costs, since: str | None) -> str:
    window = f"in the last {since}" if since else "of everything recorded"
    return (f"total {window}: ${found.total:.2f} for rented hosts, of which ${found.idle:.2f} "
            "idle (up with no job running)")  # fmt: skip
