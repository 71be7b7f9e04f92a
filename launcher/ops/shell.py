"""`gpujob ssh HOST [-- CMD]`: a command through the same SSHConnection jobs use, or a login.

A login hands over to the `ssh` client itself (a terminal is its job, not ours), with the
same options as every command: gpujob's pins, strict checking, the host's master connection.
"""

from __future__ import annotations

import os
import sys


def ssh_command(on: str, command: list[str]) -> int:
    from launcher.providers import ssh as ssh_hosts

    entry = ssh_hosts.resolve_host(on)
    conn = ssh_hosts.connect(entry)
    try:
        if command:
            result = conn.run(command, stream=True)
            sys.stdout.write(result.stdout)
            sys.stdout.flush()
            return result.exit_code
        conn.connect()
    finally:
        conn.close()
    argv = [*conn.client.options(), "--", conn.endpoint.address]
    os.execv(argv[0], argv)  # a login on the host's master connection, checked as every command
    return 0
