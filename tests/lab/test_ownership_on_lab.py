"""A rented host's key is pinned for its instance, not its address: after `gpujob down`, the
Lambda fake gives the same address to a new lab host with a new host key (as clouds reuse
addresses), and both `up --no-bootstrap` (then `gpujob ssh`) and `up` with its bootstrap
connect to it and pin the new key, where pins per address refused it as a changed key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import test_up_hosts as up_hosts

pytestmark = pytest.mark.lab
# The fixtures of the `up` tests: both fakes over a LabBackend, and a user's environment.
backend, clouds, env, gpujob = up_hosts.backend, up_hosts.clouds, up_hosts.env, up_hosts.gpujob


def up(env: dict[str, str], *flags: str) -> tuple[str, str, str]:
    """(name, instance id, address) of one Lambda host rented with `flags`."""
    made = gpujob(env, "up", "a100", "--yes", "--allow-cpu", "--timeout", "300", *flags)
    assert made.returncode == 0, made.stderr
    name, cloud, inst_id, login, _ = made.stdout.splitlines()[-1].split("\t")
    assert cloud == "lambda"
    return name, inst_id, login.split("@")[1].rsplit(":", 1)[0]


def pins(env: dict[str, str]) -> dict[str, str]:
    """gpujob's pins: name -> key."""
    path = Path(env["GPUJOB_STATE_DIR"], "known_hosts")
    lines = path.read_text().splitlines() if path.exists() else []
    return {line.split()[0]: line.split()[2] for line in lines if line.strip()}


def host_key(backend: Any, inst_id: str) -> str:
    """The key the lab host behind an instance really has."""
    from infra.lab import boot

    host = backend.records[inst_id]["host"]
    return (boot.host_dir(host) / "ssh_host_ed25519_key.pub").read_text().split()[1]


def reaches(env: dict[str, str], name: str) -> None:
    said = gpujob(env, "ssh", name, "--", "echo reached")
    assert said.returncode == 0, said.stderr
    assert said.stdout == "reached\n"


def test_a_reused_address_after_down_is_pinned_anew_with_and_without_bootstrap(
    env: dict[str, str], backend: Any
) -> None:
    first, first_id, address = up(env, "--no-bootstrap")
    reaches(env, first)
    first_key = host_key(backend, first_id)  # the lab host goes with the instance
    assert pins(env) == {f"gpujob:lambda:{first_id}:{address}:22": first_key}
    gone = gpujob(env, "down", first)
    assert gone.returncode == 0, gone.stderr
    assert pins(env) == {}  # down took the pins of what it terminated

    # The address's next machine: another instance, another key; no bootstrap, so the
    # first contact is `gpujob ssh`'s.
    second, second_id, again = up(env, "--no-bootstrap")
    second_key = host_key(backend, second_id)
    assert again == address and second_key != first_key
    reaches(env, second)
    assert pins(env) == {f"gpujob:lambda:{second_id}:{address}:22": second_key}
    assert gpujob(env, "down", second).returncode == 0

    # And once more, bootstrapped: `up` itself makes the first contact.
    third, third_id, once_more = up(env)
    assert once_more == address and host_key(backend, third_id) not in (first_key, second_key)
    assert pins(env) == {f"gpujob:lambda:{third_id}:{address}:22": host_key(backend, third_id)}
    reaches(env, third)
    down = gpujob(env, "down", "--all")
    assert down.returncode == 0, down.stderr
    assert f"terminated {third}" in down.stdout and pins(env) == {}
