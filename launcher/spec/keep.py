"""`keep_on_failure:` in a job spec, and `submit --keep-on-failure 30m`: how long a failed
job's rented hosts stay up for a look before they end themselves (SkyPilot's users have
asked for it since 2022, skypilot-org/skypilot#1163).

The window is a bound, never an open end: the host's autostop watcher ends it at the
window's close even with an SSH session open (targets/cloud/keep.py arms it). Here only the
duration as the user writes it, in the forms `max_duration` and `--autostop` take.
"""

from __future__ import annotations

from launcher.errors import UsageError
from launcher.spec.limits import Seconds, parse_duration

MAX_KEEP_S = 7 * 86400.0
"""A week: past that a window is a typo (`30d` for `30m`) more often than a wish."""

KEEP_FIELD_HELP = (
    "When the job fails, its rented hosts stay up this long (`30m`, `2h`) for a look, then "
    "end themselves (`submit --up`; `gpujob ssh JOB`, `gpujob down JOB`)."
)

KeepWindow = Seconds
"""The spec's type: a duration, held as seconds."""


def window_seconds(text: str | None) -> float | None:
    """`--keep-on-failure 30m` in seconds; a bad one is refused in one line."""
    if text is None:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as bad:
        raise UsageError(f"--keep-on-failure {text}: {bad}",
                         "e.g. --keep-on-failure 30m, or 2h") from None  # fmt: skip
    if seconds > MAX_KEEP_S:
        raise UsageError(f"--keep-on-failure {text}: longer than a week",
                         "a window is hours at most: e.g. --keep-on-failure 2h")  # fmt: skip
    return seconds


def keep_window(flag: str | None, spec_value: float | None) -> float | None:
    """The window in force: the flag's over the spec's; None keeps nothing."""
    given = window_seconds(flag)
    return given if given is not None else spec_value
