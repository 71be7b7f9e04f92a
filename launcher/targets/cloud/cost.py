"""The cost budget: what a rental may cost at most, checked before the launch call, and what
rented hosts have cost against the budget they were rented under (`gpujob status`).

A rental's bound is its price over the longest it can bill: its start (the wait for its
hosts, `--timeout`, and the hold until the command hands them over), the job's
`max_duration`, and the autostop window (how long an idle host waits
before it ends itself, from the host). Autostop is what ends hosts that outlive the command,
so a budget without it is refused rather than guessed at. The budget is
`--max-cost DOLLARS`, else `budget: {max_cost: DOLLARS}` in the user config.

The arithmetic (`clear_cost`, `budget_warnings`) is pure; only `budget_for` reads a file.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from launcher.errors import UsageError
from launcher.paths import config_file

CONFIG_EXAMPLE = "budget: {max_cost: 50}"


@dataclass(frozen=True)
class Budget:
    """The most a rental may cost, in dollars, and where the user said so."""

    max_cost: float
    source: str
    """`--max-cost`, or `budget.max_cost (FILE:LINE)`."""
    raise_it: str
    """How to raise it: `raise --max-cost`, or `raise budget.max_cost in FILE`."""


@dataclass(frozen=True)
class Bound:
    """The longest a rental can run, as the parts that add up to it (`max_duration`,
    `autostop`), in seconds."""

    parts: tuple[tuple[str, float], ...]

    @property
    def seconds(self) -> float:
        return sum(seconds for _, seconds in self.parts)

    def text(self) -> str:
        """`8.5h (max_duration 8h + autostop 30m)`; one part names only itself."""
        from launcher.spec.limits import show_duration

        hours = f"{round(self.seconds / 3600, 2):g}h"
        if len(self.parts) == 1:
            return f"{hours} ({self.parts[0][0]})"
        said = " + ".join(f"{name} {show_duration(seconds)}" for name, seconds in self.parts)
        return f"{hours} ({said})"


@dataclass(frozen=True)
class CostCleared:
    """A rent the budget allows: the line to print (None when there is nothing to say), the
    highest $/hour a host may then cost (so a launch that falls back to a dearer offer stays
    within the budget) and each host's share of the budget, recorded for `status`."""

    line: str | None
    max_price: float | None = None
    share: float | None = None


def rental_bound(
    start_s: float | None,
    max_duration_s: float | None,
    autostop_s: float | None,
    keep_s: float | None = None,
) -> Bound | None:
    """The longest a rental can bill: its start (the wait for the hosts, after which the
    command ends them, and, should gpujob die before it hands them over, the hold that keeps
    autostop off until then: targets.cloud.autostop.start_bound_s), the job's `max_duration`,
    then the autostop window, which alone ends hosts that outlive the command, or a longer
    `--keep-on-failure` window (a failed job's hosts stay that long); None without autostop."""
    if not autostop_s:
        return None
    tail = (
        ("keep_on_failure", keep_s) if keep_s and keep_s > autostop_s else ("autostop", autostop_s)
    )
    parts = [(name, float(seconds)) for name, seconds in
             (("start", start_s), ("max_duration", max_duration_s), tail)
             if seconds]  # fmt: skip
    return Bound(tuple(parts))


def dollars(amount: float) -> str:
    """`$1.29`, or `$1.2501` for a price under the cent (Vast's are): the arithmetic shown
    must add up."""
    cents = round(amount, 2)
    return f"${amount:.2f}" if abs(amount - cents) < 1e-9 else f"${amount:.4f}"


def cost_text(hosts: int, price_per_hour: float, bound: Bound) -> tuple[float, str]:
    """The bound cost in whole cents and its arithmetic: `2 x $1.29/h x 8h (max_duration) =
    $20.64`."""
    exact = hosts * price_per_hour * bound.seconds / 3600
    total = math.floor(exact * 100 + 0.5 + 1e-9) / 100  # to the cent, half up
    return total, f"{hosts} x {dollars(price_per_hour)}/h x {bound.text()} = ${total:.2f}"


def require_bound(budget: Budget | None, bound: Bound | None) -> None:
    """Before any cloud call: with a budget, something must end the hosts once this command
    is done with them. `max_duration` ends a job, never its hosts: autostop does."""
    if budget is not None and bound is None:
        raise UsageError(
            f"{budget.source} ${budget.max_cost:.2f}: nothing ends the hosts once the command "
            "is done with them, so their cost has no bound",
            "set --autostop (or resources.autostop in the spec); max_duration ends the job, "
            "not its hosts",
        )


def clear_cost(
    budget: Budget | None, hosts: int, price_per_hour: float, bound: Bound | None
) -> CostCleared:
    """Refuse (exit 2, one line with the arithmetic) a rental whose bound cost passes the
    budget; else say what it costs at most."""
    require_bound(budget, bound)
    if bound is None:
        return CostCleared(None)
    total, said = cost_text(hosts, price_per_hour, bound)
    if budget is None:
        return CostCleared(f"cost: at most {said}")
    if total > budget.max_cost:
        raise UsageError(
            f"{budget.source} ${budget.max_cost:.2f}: {said}",
            f"lower the time limit or the autostop window, or {budget.raise_it}",
        )
    share = budget.max_cost / hosts
    return CostCleared(
        f"cost: at most {said}, within {budget.source} ${budget.max_cost:.2f}",
        # never below the offer just cleared: the sum is rounded to the cent, the cap is not
        max_price=max(share * 3600 / bound.seconds, price_per_hour),
        share=share,
    )


def budget_warnings(hosts: list[dict[str, object]]) -> list[str]:
    """`status`: one line per host whose cost so far passed its share of the budget it was
    rented under (`host_rows` says `over_budget`)."""
    return [
        f"warning: {host['name']} has cost ${host['cost_so_far']:.2f} so far, past the "
        f"${host['max_cost']:.2f} budget it was rented under; `gpujob down {host['name']}` "
        "stops the billing"
        for host in hosts
        if host.get("over_budget")
    ]


def budget_for(max_cost: float | None) -> Budget | None:
    """`--max-cost` when given, else the user config's `budget.max_cost`, else none."""
    if max_cost is not None:
        if not math.isfinite(max_cost) or max_cost <= 0:
            raise UsageError(f"--max-cost {max_cost:g}: give dollars above zero, e.g. 50")
        return Budget(max_cost, "--max-cost", "raise --max-cost")
    return config_budget()


def config_budget() -> Budget | None:
    """`budget: {max_cost: DOLLARS}` in the user config; a bad value is one line naming the
    file and its line."""
    path = config_file()
    if not path.is_file():
        return None
    import yaml

    text = path.read_text()
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: YAML syntax error: {err}".split("\n")[0]) from None
    if not isinstance(data, dict) or data.get("budget") is None:
        return None
    from launcher.spec.yaml_lines import record_lines

    lines: dict[tuple[str | int, ...], int] = {}
    record_lines(node, (), lines)
    body = data["budget"]
    where = f"{path}:{lines.get(('budget',), 1)}"
    if not isinstance(body, dict) or set(body) != {"max_cost"}:
        extra = sorted(set(body) - {"max_cost"}) if isinstance(body, dict) else []
        said = f"unknown key `{extra[0]}`" if extra else "expected a mapping with `max_cost`"
        raise UsageError(f"{where}: budget: {said}", f"e.g. {CONFIG_EXAMPLE}")
    value = body["max_cost"]
    where = f"{path}:{lines.get(('budget', 'max_cost'), 1)}"
    amount = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if amount is None or not math.isfinite(amount) or amount <= 0:
        raise UsageError(
            f"{where}: budget.max_cost: `{value}` is not an amount of dollars above zero",
            f"e.g. {CONFIG_EXAMPLE}",
        )
    return Budget(float(amount), f"budget.max_cost ({where})", f"raise budget.max_cost in {path}")
