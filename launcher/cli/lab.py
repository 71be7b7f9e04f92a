"""`gpujob lab`: the lab from the repository's `infra/` package (not in the wheel), for
demos and tests. Where it or its extra is missing, one line says what to install."""

from __future__ import annotations

from types import ModuleType

import click

from launcher.errors import UsageError

INSTALL = "install it from a gpujob checkout: pip install -e '.[lab]'"


def _lab() -> ModuleType:
    """`infra.lab`, from the path or from the checkout this launcher runs from (an editable
    install maps only `launcher`, so the console script does not see `infra/` beside it)."""
    import sys
    from pathlib import Path

    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "infra" / "lab").is_dir() and str(checkout) not in sys.path:
        sys.path.append(str(checkout))
    try:
        import infra.lab
    except ModuleNotFoundError as err:
        missing = (err.name or "").split(".")[0]
        if missing == "infra":
            raise UsageError("gpujob lab needs the lab, which lives in gpujob's repository, "
                             "not in the wheel", INSTALL) from None  # fmt: skip
        raise UsageError(f"gpujob lab needs {missing}, which is not installed", INSTALL) from None
    return infra.lab


def _lab_with_servers() -> ModuleType:
    """The lab, once the servers it starts from this venv are there: moto's S3 server fails
    only after its start, in its own log, otherwise."""
    import importlib.util

    lab = _lab()
    for module in ("moto", "flask", "flask_cors"):
        if importlib.util.find_spec(module) is None:
            raise UsageError(f"gpujob lab needs {module} (moto's S3 server), which is not "
                             "installed", INSTALL)  # fmt: skip
    return lab


def _use_name(_: click.Context, __: click.Parameter, value: str | None) -> str | None:
    """`--name N` is `GPUJOB_LAB_NAME=N` for this command (and the daemons it starts)."""
    import os

    if value is not None:
        lab = _lab()
        try:
            lab.naming.check(value)
        except lab.state.LabError as bad:
            raise UsageError(bad.message, bad.hint) from None
        os.environ[lab.naming.VARIABLE] = value
    return value


NAME = click.option(
    "--name", callback=_use_name, expose_value=False, is_eager=True,
    help="Which lab: its bridge, subnet, host names and folder follow from it, so labs of "
         "different names share a machine. Default: $GPUJOB_LAB_NAME, else gjlab.",
)  # fmt: skip


@click.group()
def lab() -> None:
    """A GPU cloud on this machine made of real parts, for demos and tests (needs root)."""


@lab.command("up")
@NAME
@click.option("--hosts", default=2, show_default=True, help="Static SSH hosts to start.")
@click.option(
    "--slurm",
    is_flag=True,
    help="Also a SLURM cluster: controller, two CPU nodes, a login host with sshd.",
)
@click.option("--dry-run", is_flag=True, help="Print what would be started; change nothing.")
def lab_up(hosts: int, slurm: bool, dry_run: bool) -> None:
    """Start the lab: bridge, hosts with sshd, registry, S3, Lambda and Vast API fakes."""
    _lab_with_servers().up(hosts=hosts, slurm_cluster=slurm, dry_run=dry_run,
              report=lambda text: click.echo(f"lab: {text}", err=True))  # fmt: skip
    if not dry_run:
        click.echo('lab is up; point gpujob at it with:  eval "$(gpujob lab env)"', err=True)


@lab.command("down")
@NAME
@click.option("--dry-run", is_flag=True, help="Print what would be removed; change nothing.")
def lab_down(dry_run: bool) -> None:
    """Stop the lab (SLURM cluster included) and remove every namespace, veth, daemon and
    container it made, and nothing of another lab."""
    _lab().down(dry_run=dry_run, report=lambda text: click.echo(f"lab: {text}", err=True))


@lab.command("env")
@NAME
def lab_env() -> None:
    """Print `export` lines that point gpujob at the running lab."""
    import shlex

    for key, value in _lab().env_vars().items():
        click.echo(f"export {key}={shlex.quote(value)}")
