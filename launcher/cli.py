"""The `gpujob` command line. A command that a resident gpujob runs faster (resident.py) is
handed to it when one runs; every other command, and that one when none runs, is parsed and
run here (commands.py).
"""

from __future__ import annotations

import sys

RESIDENT_COMMANDS = ("submit", "logs", "status", "cancel")
"""What the resident gpujob runs; no other command pays for importing resident.py."""


def main(argv: list[str] | None = None) -> None:
    """`argv` given: run in this process (tests, `python -m launcher`); from the console
    script: try the resident process first."""
    if argv is None:
        argv = sys.argv[1:]
        if argv and argv[0] in RESIDENT_COMMANDS:
            from launcher import resident

            code = resident.hand_over(argv)
            if code is not None:
                sys.exit(code)
    from launcher.commands import run

    run(argv)
