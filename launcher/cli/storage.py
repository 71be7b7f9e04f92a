"""`gpujob storage check|tree` and `gpujob sync-ckpt`: parse, call one function, print.

Only click at import time (the CLI's start-up rule); boto3 and pydantic load inside commands.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from launcher.storage.remotes import RemotePath


@click.group()
def storage() -> None:
    """S3 remotes from the user config (gpujob/config.yaml) or a job spec's `storage:`."""


def _path(text: str, spec: str | None) -> RemotePath:
    from launcher.storage.remotes import all_remotes, parse_remote_path

    spec_remotes = {}
    if spec:
        from launcher.spec.load import load_job_spec

        spec_remotes = load_job_spec(spec).spec.storage
    return parse_remote_path(
        text if ":" in text else f"{text}:", all_remotes(spec_remotes), "REMOTE"
    )


@storage.command("check")
@click.argument("remote", metavar="REMOTE[:prefix]")
@click.option("--spec", type=click.Path(dir_okay=False), help="Also a job spec's remotes.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def storage_check(remote: str, spec: str | None, as_json: bool) -> None:
    """List the bucket, write and delete a probe object; with a prefix, it must hold objects."""
    from dataclasses import asdict

    from launcher.storage.rclone_config import ca_bundle
    from launcher.storage.s3 import check

    path = _path(remote, spec)
    report = check(path, require_prefix=bool(path.key_prefix))
    bundle = ca_bundle(path.remote)
    if bundle:
        report.notes.append(
            f"rclone gets {bundle} as RCLONE_CA_CERT; AWS_CA_BUNDLE is unset "
            "for it (rclone 1.60 fails every S3 call while it is set)"
        )
    if as_json:
        import json

        click.echo(json.dumps(asdict(report), indent=2))
        return
    where = f"{report.bucket}/{report.prefix}".rstrip("/")
    click.echo(
        f"{report.remote}: {where} ok ({report.objects_under_prefix} object(s) under the "
        f"prefix; {report.probe})"
    )
    for note in report.notes:
        click.echo(f"  note: {note}")


@storage.command("tree")
@click.argument("remote", metavar="REMOTE[:prefix]")
@click.option("--depth", default=3, show_default=True, type=click.IntRange(min=1))
@click.option("--spec", type=click.Path(dir_okay=False), help="Also a job spec's remotes.")
def storage_tree(remote: str, depth: int, spec: str | None) -> None:
    """Folders under the prefix to DEPTH, sizes, and which checkpoints are complete."""
    from launcher.storage.s3 import tree

    for line in tree(_path(remote, spec), depth):
        click.echo(line)


@storage.command("rclone-config")
@click.argument("remote", metavar="REMOTE")
@click.option("--write", "out", type=click.Path(dir_okay=False), help="Write rclone.conf here.")
@click.option("--dry-run", is_flag=True, help="Show what --write would write; write nothing.")
@click.option("--spec", type=click.Path(dir_okay=False), help="Also a job spec's remotes.")
def storage_rclone_config(remote: str, out: str | None, dry_run: bool, spec: str | None) -> None:
    """The remote as rclone sees it: env var names by default (values of keys as ***), or an
    rclone.conf of mode 0600 with --write (values rclone would alter are refused)."""
    from pathlib import Path

    from launcher.storage import rclone_config
    from launcher.storage.remotes import credentials

    path = _path(remote, spec)
    creds = credentials(path.remote)
    secret = set(creds.values())
    if out is None:
        for key, value in rclone_config.env_vars(path.remote, creds).items():
            click.echo(f"{key}={'***' if value in secret else value}")
        return
    text = rclone_config.conf_text(path.remote, creds)
    if dry_run:
        for line in text.splitlines():
            key, _, value = line.partition(" = ")
            click.echo(f"{key} = ***" if value in secret else line)
        click.echo(f"# would write {out} (mode 0600)", err=True)
        return
    rclone_config.write_conf(Path(out), text)
    click.echo(f"wrote {out} (mode 0600); use it with: rclone --config {out} ...", err=True)


@click.command("sync-ckpt")
@click.argument("job", required=False)
@click.option(
    "--to", "to", metavar="REMOTE:prefix", help="Push there (default: the job's sync_to)."
)
@click.option("--from", "source", metavar="REMOTE:prefix", help="Pull from there.")
@click.option("--dest", type=click.Path(file_okay=False), help="With --from: the folder to fill.")
@click.option("--latest", is_flag=True, help="Only the newest complete checkpoint.")
@click.option("--step", type=click.IntRange(min=0), help="Only the checkpoint of this step.")
@click.option(
    "--on", metavar="HOST", help="With --from: pull onto this SSH host (--dest is there)."
)
@click.option(
    "--dry-run",
    is_flag=True,
    help="Print what would run where the checkpoints are, and its rclone commands; change nothing.",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable result.")
def sync_ckpt(**kwargs: object) -> None:
    """Push a job's complete checkpoints to S3, or pull them; verified (sizes and MD5s)."""
    from launcher.commands.sync_ckpt import sync_ckpt as run_sync
    from launcher.errors import UsageError
    from launcher.storage.sync import SyncRequest

    if kwargs["latest"] and kwargs["step"] is not None:
        raise UsageError("give --latest or --step N, not both")
    if kwargs["on"] and not kwargs["source"]:
        raise UsageError("--on HOST goes with --from (a push runs on the job's own host)")
    sys.exit(run_sync(SyncRequest(**kwargs)))  # type: ignore[arg-type]
