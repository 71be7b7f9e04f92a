"""`gpujob metrics JOB [--follow] [--json] [--plot FILE]`: the job's own figures (loss first)
and its GPUs' use, as each node's agent recorded them: a line per figure with a terminal
sparkline, the last steps as a table, or the curves drawn with matplotlib (`gpujob[plot]`,
imported only for `--plot`). Read from the hosts, or from S3 once they are gone."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from launcher.errors import GpujobError, UsageError
from launcher.jobs.evals import Evals, read_evals
from launcher.jobs.metrics import NodeMetrics, read_metrics
from launcher.jobs.records import job_or_fail
from launcher.state import figures
from launcher.state.db import StateDB

if TYPE_CHECKING:
    from matplotlib.figure import Figure

BARS = "▁▂▃▄▅▆▇█"
PLOT_KINDS = (".png", ".svg", ".html")
FOLLOW_EVERY_S = 5.0
TABLE_ROWS = 10
EVAL_PANELS = 8
"""Eval figures drawn (the table and --json have them all)."""


def sparkline(values: list[float], width: int = 40) -> str:
    """`values` as at most `width` bars, each the mean of its share of the values (a flat
    series is a row of the lowest bar)."""
    values = [v for v in values if math.isfinite(v)]
    if not values:
        return ""
    if len(values) > width:
        size = len(values) / width
        values = [_mean(values[int(i * size) : max(int((i + 1) * size), int(i * size) + 1)])
                  for i in range(width)]  # fmt: skip
    low, high = min(values), max(values)
    span = high - low
    return "".join(BARS[0 if span == 0 else round((v - low) / span * (len(BARS) - 1))]
                   for v in values)  # fmt: skip


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def number(value: float) -> str:
    """Four significant figures, whole numbers from 1000 up: a loss and a tokens/s both
    read well."""
    return f"{value:.4g}" if abs(value) < 1000 else f"{value:.0f}"


def summary_lines(node: NodeMetrics) -> list[str]:
    """A line per figure: first -> last, min, the sparkline; then the GPUs and memory."""
    lines = []
    names = node.names()
    width = max([len(n) for n in names] + [len("host memory MiB")])
    for name in names:
        _, ys = node.series(name)
        if ys:
            lines.append(f"{name.ljust(width)}  {number(ys[0])} -> {number(ys[-1])}  "
                         f"(min {number(min(ys))})  {sparkline(ys)}")  # fmt: skip
    _, util = node.gpu_util()
    if util:
        lines.append(f"{'GPU util %'.ljust(width)}  mean {_mean(util):.0f}, last {util[-1]:.0f}  "
                     f"{sparkline(util)}")  # fmt: skip
    rss = [s.rss_mib for s in node.system if s.rss_mib is not None]
    if rss:
        lines.append(f"{'host memory MiB'.ljust(width)}  peak {max(rss):.0f}  {sparkline(rss)}")
    return lines


def step_table(node: NodeMetrics, rows: int = TABLE_ROWS) -> str:
    """The last `rows` steps, a column per figure (`-` where a step lacks one)."""
    names = ["step", *node.names()]
    cells = [[_cell(step.get(name)) for name in names] for step in node.steps[-rows:]]
    widths = [max(len(name), *(len(row[i]) for row in cells)) for i, name in enumerate(names)]
    lines = [[name.upper() for name in names], *cells]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True))
                     for line in lines)  # fmt: skip


def _cell(value: float | None) -> str:
    return "-" if value is None else number(value) if isinstance(value, float) else str(value)


def eval_table(evals: Evals) -> str:
    """A row per checkpoint: its step, then each eval figure (`-` where it has none)."""
    names = evals.names()
    cells = [[str(step), *(_cell(figures.get(n)) for n in names)]
             for step, figures in sorted(evals.steps.items())]  # fmt: skip
    header = ["STEP", *(n.upper() for n in names)]
    widths = [max(len(h), *(len(row[i]) for row in cells)) for i, h in enumerate(header)]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths, strict=True))
                     for line in [header, *cells])  # fmt: skip


def show_evals(evals: Evals | None, say: Callable[[str], None]) -> None:
    if evals is None:
        return
    where = "" if evals.source == "host" else f", from {evals.source}"
    say(f"\neval per checkpoint ({len(evals.steps)} checkpoint(s){where}):")
    if evals.steps:
        say(eval_table(evals))
    if evals.notes:
        say(f"note: {evals.notes[0]}" + (f" (and {len(evals.notes) - 1} more)"
                                          if len(evals.notes) > 1 else ""))  # fmt: skip


def show_text(job_id: str, nodes: list[NodeMetrics], say: Callable[[str], None]) -> None:
    for node in nodes:
        where = "" if node.source == "host" else f", from {node.source}"
        say(f"job {job_id} node {node.rank}: {len(node.steps)} step(s) recorded{where}")
        lines = summary_lines(node)
        if not lines:
            say("  nothing recorded yet: write one JSON object per step to $GPUJOB_METRICS, "
                "or give the spec `metrics: {from_log: PATTERN}`")  # fmt: skip
            continue
        say("\n".join(f"  {line}" for line in lines))
        if node.steps:
            say("\n" + step_table(node))


def metrics(reference: str, *, as_json: bool, follow: bool, plot: str | None,
            say: Callable[[str], None]) -> int:  # fmt: skip
    """Show, write or follow a job's metrics; returns the exit code."""
    if plot is not None and Path(plot).suffix.lower() not in PLOT_KINDS:
        raise UsageError(
            f"--plot {plot}: the file's name must end .png, .svg or .html", "e.g. --plot curves.png"
        )
    db = StateDB()
    job = job_or_fail(db, reference)
    nodes = read_metrics(job)
    if job.terminal and nodes and nodes[0].steps and figures.load(job.id) is None:
        keep_figures(job.id, nodes[0])
    evals = read_evals(job)
    if plot is not None:
        say(write_plot(job.id, nodes, Path(plot), evals))
        return 0
    if as_json:
        body = {"job": job.id, "nodes": [n.as_json() for n in nodes],
                "evals": evals.as_json() if evals else None}  # fmt: skip
        say(json.dumps(body, indent=1))
        return 0
    show_text(job.id, nodes, say)
    show_evals(evals, say)
    if follow:
        return _follow(db, job.id, nodes, say)
    return 0


def _follow(db: StateDB, job_id: str, nodes: list[NodeMetrics], say: Callable[[str], None]) -> int:
    """New steps as they are recorded, until the job ends (its state read as `status` does)."""
    from launcher.jobs.state import is_terminal, refresh

    shown = {n.rank: len(n.steps) for n in nodes}
    while True:
        job = db.job(job_id)
        if job is None:
            return 1
        ended = job.terminal or is_terminal(refresh(db, job).state)
        for node in read_metrics(job):
            for step in node.steps[shown.get(node.rank, 0) :]:
                figures = "  ".join(f"{k} {_cell(v)}" for k, v in step.items()
                                    if k not in ("t", "kind"))  # fmt: skip
                say(f"node {node.rank}: {figures}")
            shown[node.rank] = len(node.steps)
        if ended:
            return 0
        time.sleep(FOLLOW_EVERY_S)


def keep_figures(job_id: str, node: NodeMetrics) -> None:
    """An ended job's headline figure, its trend and step, as its agent summarised it, kept
    here for `status` (state/figures.py): for a job whose end was recorded without them."""
    from launcher.agent.metrics import headline, trend

    name = headline(node.steps[-1]) or next(iter(node.names()), None)
    if name is None:
        return
    steps, values = node.series(name)
    figures.save(job_id, {"name": name, "value": values[-1], "step": int(steps[-1]),
                          "trend": trend(values[-20:])})  # fmt: skip


def draw(job_id: str, nodes: list[NodeMetrics], evals: Evals | None = None) -> Figure:
    """One panel per figure (x: step, a line per node), then each eval figure (a point per
    checkpoint, at most EVAL_PANELS), then GPU utilisation over time."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    names = list(dict.fromkeys(n for node in nodes for n in node.names()))
    gpu = any(node.gpu_util()[1] for node in nodes)
    eval_names = evals.names()[:EVAL_PANELS] if evals else []
    panels = len(names) + len(eval_names) + (1 if gpu else 0)
    if panels == 0:
        raise GpujobError(f"job {job_id}: nothing recorded to draw yet",
                          "write one JSON object per step to $GPUJOB_METRICS")  # fmt: skip
    fig = Figure(figsize=(7, 2.4 * panels), layout="constrained")
    axes = fig.subplots(panels, 1, squeeze=False)[:, 0]
    for ax, name in zip(axes, names, strict=False):
        for node in nodes:
            xs, ys = node.series(name)
            if ys:
                ax.plot(xs, ys, label=f"node {node.rank}", linewidth=1.2)
        ax.set_ylabel(name)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    for ax, name in zip(axes[len(names) :], eval_names, strict=False):
        assert evals is not None
        ax.plot(*evals.series(name), marker="o", linestyle=":", linewidth=1)
        ax.set_ylabel(name)
        ax.set_xlabel("checkpoint step")
        ax.grid(alpha=0.3)
    if gpu:
        ax = axes[-1]
        for node in nodes:
            ax.plot(*node.gpu_util(), label=f"node {node.rank}", linewidth=1.2)
        ax.set_ylabel("GPU util %")
        ax.set_xlabel("seconds")
        ax.set_ylim(0, 100)
        ax.grid(alpha=0.3)
    if len(nodes) > 1:
        axes[0].legend()
    fig.suptitle(f"gpujob {job_id}")
    return fig


def write_plot(job_id: str, nodes: list[NodeMetrics], path: Path,
               evals: Evals | None = None) -> str:  # fmt: skip
    """The figure written whole to `path` (.png, .svg, or .html holding the SVG)."""
    import io
    import os
    import tempfile

    try:
        fig = draw(job_id, nodes, evals)
    except ImportError:
        raise GpujobError("--plot needs matplotlib",
                          "pip install 'gpujob[plot]' (or matplotlib)") from None  # fmt: skip
    suffix = path.suffix.lower()
    out = io.BytesIO()
    fig.savefig(out, format="svg" if suffix == ".html" else suffix[1:], dpi=110)
    data = out.getvalue()
    if suffix == ".html":  # the SVG inline, without its XML prologue
        data = (f"<!doctype html><meta charset='utf-8'><title>gpujob {job_id}</title>\n"
                ).encode() + data[data.find(b"<svg") :]  # fmt: skip
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=".plot.")
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)
    points = ", ".join(f"{name} {len(nodes[0].series(name)[1])} point(s)"
                       for name in nodes[0].names()) if nodes else ""  # fmt: skip
    if evals and evals.steps:
        points += ("; " if points else "") + ", ".join(
            f"{name} {len(evals.series(name)[1])} checkpoint(s)"
            for name in evals.names()[:EVAL_PANELS]
        )
    return f"wrote {path}" + (f" (node 0: {points})" if points else "")
