"""Offers as `up` shows them: the table, and how an interruptible rental reads in a line."""

from __future__ import annotations

import sys

from launcher.clouds.base import Offer


def offers_table(offers: list[Offer], shown: int = 10, on_stderr: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{len(offers)} offer(s), cheapest first")
    bids = any(o.bid is not None for o in offers)  # interruptible: the bid each would get
    for column in ("provider", "type", "GPUs", "region", "$/hour", "disk GB"):
        table.add_column(column)
    if bids:
        table.add_column("bid $/h")
    for o in offers[:shown]:
        row = [o.provider, o.instance_type, f"{o.gpu_count}x {o.gpu_name}", o.region,
               f"{o.price_per_hour:.2f}", f"{o.disk_gb:.0f}"]  # fmt: skip
        if bids:
            row.append(f"{o.bid or 0:.3f}")
        table.add_row(*row)
    Console(file=sys.stderr if on_stderr else sys.stdout, width=110).print(table)


def bid_words(offer: Offer) -> str:
    """How an interruptible rental reads in a line: its bid, and that it can be taken back."""
    if offer.bid is None:
        return ""
    return f" (interruptible: bid ${offer.bid:.3f}/h; outbid, the host is stopped)"
