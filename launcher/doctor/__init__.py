"""`gpujob doctor HOST`: the staged check the seeds did by hand, as one command.

The probe (`probe.py`, standard library until a stage needs torch) is copied to the host and
run with the Python that runs the jobs there (`--python`); it prints one JSON verdict per
stage, which this module shows as a table or passes on with `--json`. `HOST` is `local`
for this machine, or any host `gpujob ssh` reaches.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from launcher.errors import ExitCode, GpujobError

PROBE = Path(__file__).with_name("probe.py")


@dataclass(frozen=True)
class Verdict:
    stage: str
    verdict: str
    value: float | None
    unit: str
    detail: str


def parse_verdicts(text: str) -> list[Verdict]:
    """The probe's JSON lines; anything else it printed (a library's warning) is skipped."""
    found = []
    for line in text.splitlines():
        if not line.startswith("{"):
            continue
        try:
            raw = json.loads(line)
            found.append(Verdict(raw["stage"], raw["verdict"], raw.get("value"),
                                 raw.get("unit", ""), raw.get("detail", "")))  # fmt: skip
        except (ValueError, KeyError, TypeError):
            continue
    return found


THIS_MACHINE = "local"
"""`gpujob doctor local`: the probe runs here, with this Python."""


def _probe_on(host: str, python: str | None) -> tuple[Any, list[str]]:
    """A connection to the host and the command that runs the probe there."""
    if host == THIS_MACHINE:
        from launcher.remote.local import LocalConnection

        return LocalConnection(), [python or sys.executable, str(PROBE)]
    from launcher.remote.hosts import connect, resolve_host

    conn = connect(resolve_host(host))
    home = conn.run(["sh", "-c", 'echo "$HOME"']).stdout.strip() or "/tmp"
    remote = f"{home}/.gpujob/bin/doctor_probe.py"
    conn.put(remote, PROBE.read_bytes(), 0o755)
    return conn, [python or "python3", remote]


def run_doctor(host: str, python: str | None, as_json: bool) -> int:
    """The probe's stage lines (`doctor [2/7] torch: import and CUDA`) reach stderr as each
    stage starts, on a terminal and in a pipe alike; the verdicts come as one table."""
    from launcher.doctor.probe import STAGES

    conn, argv = _probe_on(host, python)
    try:
        result = conn.run(argv, stream=True)
        verdicts = parse_verdicts(result.stdout)
        if not verdicts:
            raise GpujobError(
                f"doctor: the probe did not run on {host} (exit {result.exit_code}): "
                f"{result.stderr.strip()[-300:] or 'its own words are above'}",
                "check that the host's python3 works, or name one with --python",
            )
        print(f"doctor [{STAGES}/{STAGES}] S3 remotes of config.yaml, from {host}",
              file=sys.stderr, flush=True)  # fmt: skip
        verdicts += s3_verdicts(conn, for_hosts=host != THIS_MACHINE)
    finally:
        conn.close()
    if as_json:
        print(json.dumps([v.__dict__ for v in verdicts], indent=2))
    else:
        show_table(host, verdicts)
    return ExitCode.FAILURE if any(v.verdict == "fail" for v in verdicts) else ExitCode.OK


def s3_verdicts(conn: Any, *, for_hosts: bool) -> list[Verdict]:
    """Each remote of the user's config.yaml, from the host: list the bucket, write and
    delete a probe object with the host's rclone (where checkpoints will be pushed from)."""
    import time

    from launcher.storage import on_host, rclone_config
    from launcher.storage.remotes import credentials, user_remotes

    try:
        remotes = user_remotes()
    except GpujobError as error:
        return [Verdict("s3", "fail", None, "", error.one_line())]
    if not remotes:
        return [Verdict("s3", "not run", None, "", "no storage remotes in config.yaml")]
    found = []
    for name, remote in sorted(remotes.items()):
        try:
            env = rclone_config.env_vars(remote, credentials(remote), for_hosts=for_hosts)
        except GpujobError as error:
            found.append(Verdict(f"s3 {name}", "fail", None, "", error.one_line()))
            continue
        bucket = rclone_config.rclone_path(remote, "")
        start = time.perf_counter()
        failed = on_host.probe(conn, env, bucket, rclone_config.rclone_path(remote, ""))
        took = round(time.perf_counter() - start, 2)
        detail = f"bucket {remote.model.bucket}: " + (failed or "listed, probe written and deleted")
        found.append(Verdict(f"s3 {name}", "fail" if failed else "ok", took, "s", detail))
    return found


def show_table(host: str, verdicts: list[Verdict]) -> None:
    from rich.console import Console
    from rich.table import Table

    colours = {"ok": "green", "warn": "yellow", "fail": "red", "not run": "dim"}
    table = Table(title=f"gpujob doctor {host}")
    for column in ("stage", "verdict", "value", "detail"):
        table.add_column(column, justify="right" if column == "value" else "left")
    for v in verdicts:
        value = "" if v.value is None else f"{v.value:g} {v.unit}".strip()
        table.add_row(v.stage, f"[{colours.get(v.verdict, 'white')}]{v.verdict}[/]", value,
                      v.detail)  # fmt: skip
    console = Console(file=sys.stdout, width=120)
    console.print(table)
    counts = {k: sum(v.verdict == k for v in verdicts) for k in colours}
    console.print(", ".join(f"{n} {k}" for k, n in counts.items() if n))
