"""`gpujob metrics`: click only; the work is in launcher.commands.metrics."""

from __future__ import annotations

import sys

import click


@click.command()
@click.argument("job")
@click.option("--follow", "-f", is_flag=True, help="Print new steps until the job ends.")
@click.option("--json", "as_json", is_flag=True, help="Every record, machine-readable.")
@click.option("--plot", metavar="FILE", help="Draw the curves to FILE (.png, .svg or .html).")
def metrics(job: str, follow: bool, as_json: bool, plot: str | None) -> None:
    """Show a job's own figures (loss first: `$GPUJOB_METRICS` or the spec's
    `metrics.from_log`) and its GPUs' use, as its agents recorded them, with sparklines, and
    the eval figures its `on_checkpoint` hook wrote per checkpoint (`metrics.csv`); from the
    copies in S3 once the host is gone."""
    from launcher.commands.metrics import metrics as show_metrics

    sys.exit(show_metrics(job, as_json=as_json, follow=follow, plot=plot, say=click.echo))
