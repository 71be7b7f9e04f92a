"""The `gpujob` command line: click only, one module per command group, and the one place
where a user's mistake becomes one line and an exit code (2 usage, 1 failure).

Commands parse their options, call one function in `launcher.commands` (or a package below it)
and print. Nothing below `cli` imports it. Heavy libraries (pydantic, paramiko, boto3,
docker, jinja2, rich) are imported inside the command that needs them, so `gpujob --help`
answers in a few times a bare `python -c pass`.
"""

from __future__ import annotations

import sys

from launcher.errors import ExitCode, GpujobError


def main(argv: list[str] | None = None) -> None:
    """Run one command line (without the program name) and exit with its code."""
    import click

    from launcher.cli.app import cli

    args = sys.argv[1:] if argv is None else argv
    debug = "--debug" in args
    try:
        cli.main(args=args, prog_name="gpujob", standalone_mode=False)
    except click.exceptions.Exit as done:
        sys.exit(done.exit_code)
    except click.ClickException as err:  # one line too: the message and where help is
        ctx = getattr(err, "ctx", None)
        where = f"; see `{ctx.command_path} --help`" if ctx is not None else ""
        click.echo(f"gpujob: error: {err.format_message().rstrip('.')}{where}", err=True)
        sys.exit(ExitCode.USAGE)
    except click.exceptions.Abort:
        click.echo("gpujob: aborted", err=True)
        sys.exit(ExitCode.INTERRUPTED)
    except GpujobError as err:
        if debug:
            raise
        for line in err.lines():
            click.echo(f"gpujob: error: {line}", err=True)
        sys.exit(err.exit_code)
    except OSError as err:
        fault = _state_fault(err)
        if fault is None or debug:
            raise
        click.echo(f"gpujob: error: {fault.one_line()}", err=True)
        sys.exit(fault.exit_code)
    except KeyboardInterrupt as stop:  # 128 + the signal's number (SIGTERM: 143)
        click.echo("gpujob: interrupted", err=True)
        sys.exit(128 + getattr(stop, "signum", ExitCode.INTERRUPTED - 128))


def _state_fault(err: OSError) -> GpujobError | None:
    """An OS error on a path under the state dir (a job's folder, a lock, the owner id),
    wherever it was raised: one line naming the path and what to do, as the db's own are."""
    from pathlib import Path

    from launcher.paths import state_dir
    from launcher.state.faults import os_fault

    if not err.filename:
        return None
    path, state = Path(err.filename).absolute(), state_dir().absolute()
    if path != state and state not in path.parents:
        return None
    return os_fault(err, path)
