"""`gpujob init` and `gpujob completion`: getting started from an installed gpujob. Only click
is imported at start-up."""

from __future__ import annotations

from pathlib import Path

import click

SHELLS = ("bash", "zsh", "fish")


@click.command()
@click.argument("example", required=False)
@click.option("--dir", "into", type=click.Path(file_okay=False, path_type=Path), default=".",
              show_default=True, help="Write the example here.")  # fmt: skip
def init(example: str | None, into: Path) -> None:
    """Write the example job EXAMPLE (a spec and its workdir) into the current folder; without
    EXAMPLE, list them. Never overwrites a file.

    \b
    gpujob init quickstart && gpujob submit quickstart.yaml
    """
    from launcher.examples import list_examples, write_example

    if example is None:
        shown = list_examples()
        width = max(len(ex.name) for ex in shown)
        for ex in shown:
            click.echo(f"{ex.name.ljust(width)}  {ex.summary}")
        click.echo("\nwrite one here: gpujob init NAME")
        return
    written = write_example(example, into)
    for path in written:
        click.echo(f"wrote {path}")
    click.echo(f"next: gpujob submit {written[0]} --dry-run   (then without --dry-run to run it)")


@click.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completion(shell: str) -> None:
    """Print the completion script for SHELL (click's own), to load from your shell's rc file.

    \b
    bash: eval "$(gpujob completion bash)"   in ~/.bashrc
    zsh:  eval "$(gpujob completion zsh)"    in ~/.zshrc
    fish: gpujob completion fish > ~/.config/fish/completions/gpujob.fish
    """
    from click.shell_completion import get_completion_class

    from launcher.cli.app import cli

    cls = get_completion_class(shell)
    assert cls is not None  # every name in SHELLS is one of click's
    click.echo(cls(cli, {}, "gpujob", "_GPUJOB_COMPLETE").source())
