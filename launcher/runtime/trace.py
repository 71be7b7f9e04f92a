"""The steps a submit carried out, written as it sends each one, for the test that holds the
dry run to its word: with `GPUJOB_TRACE_STEPS=FILE`, every step the executor sends to a host
is appended to FILE as one JSON line, `{"host", "node", "step"}`, the step as the dry run's
JSON shows it (plan/show.py's `as_json`: argv as lists of words, secrets' values `***`).
A test then compares the two objects: what `--dry-run --json` printed and what ran. The
hosts of a job of several are worked at once (remote/fanout.py): each host's steps come in
order, those of different hosts may interleave.

Off (no variable) it costs one environment lookup per step.
"""

from __future__ import annotations

import json
import os

TRACE_ENV = "GPUJOB_TRACE_STEPS"


def traced(host: str, node: int | None, step: object) -> None:
    """Note that `step` (a Plan step, or a check's RunCommand) goes to `host` now."""
    path = os.environ.get(TRACE_ENV)
    if not path:
        return
    from launcher.plan.show import as_json

    line = json.dumps({"host": host, "node": node, "step": as_json(step)}, sort_keys=True)
    with open(path, "a", encoding="utf-8") as trace:  # one write per line: appends stay whole
        trace.write(line + "\n")
