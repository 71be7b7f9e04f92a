"""`gpujob ssh HOST [-- CMD]`: a command through the same SSHConnection jobs use, or a login.

A login hands over to the real `ssh` client (a terminal is its job, not ours) with gpujob's
pinned known_hosts and strict checking, after one SSHConnection has pinned or checked the key.
"""

from __future__ import annotations

import os
import shutil
import sys

from launcher.errors import GpujobError


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
    client = shutil.which("ssh")
    if client is None:
        raise GpujobError("no `ssh` client on PATH for a login", "give a command after `--`")
    endpoint = conn.endpoint
    argv = [client, "-p", str(endpoint.port), "-o", "StrictHostKeyChecking=yes",
            "-o", f"UserKnownHostsFile={ssh_hosts.known_hosts_file()}"]  # fmt: skip
    for key in endpoint.keys:
        if os.path.isfile(key):
            argv += ["-i", key]
    os.execv(client, [*argv, f"{endpoint.user}@{endpoint.address}"])
    return 0
