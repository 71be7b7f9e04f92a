"""What stands behind a fake cloud: the machines. The API fakes keep the books (ids, states,
prices, errors); a `HostBackend` makes the hosts those books describe, so that an `active`
Lambda instance or a `running` Vast instance is something a client can really SSH into.

Two implementations: `lab_backend.LabBackend` (real lab hosts and containers, needs root)
and `null_backend.NullBackend` (addresses only, for tests of the API's shape).
"""

from __future__ import annotations

from typing import Protocol


class HostBackend(Protocol):
    """Blocking calls, made from the fake's worker threads, never while a request waits.

    The first four methods are the contract every backend keeps; the rest are the hooks the
    fakes' misbehaviour knobs and the less common API calls (Vast stop/start, attaching a key
    to a running instance, Vast's rewriting of authorized_keys) need.
    """

    def launch_vm(self, instance_id: str, ssh_public_key: str) -> tuple[str, int]:
        """A Lambda VM: a host with Docker, root login with `ssh_public_key`; (ip, ssh_port)."""
        ...

    def launch_container(
        self,
        instance_id: str,
        image: str,
        ssh_public_key: str,
        onstart: str | None,
        env: dict[str, str],
        *,
        machine_id: int = 1,
        args: list[str] | None = None,
        volumes: dict[str, str] | None = None,
    ) -> tuple[str, int]:
        """A Vast instance: a container from `image` on machine `machine_id`, no Docker inside.

        `ssh_public_key` may hold several keys, one per line (all the account's keys).
        With `args` (the `args` runtype) the container runs `onstart` as its entrypoint with
        `args`, and Vast provides no sshd: the port returned is then 0. `volumes`: the
        instance's Vast volumes, name -> mount path, local to the machine (they outlive it).
        """
        ...

    def terminate(self, instance_id: str) -> None:
        """Remove the host or container; a second call, or an unknown id, is not an error."""
        ...

    def reboot(self, instance_id: str) -> None:
        """Power-cycle: processes die, the disk stays, the same address comes back."""
        ...

    def drop_ssh(self, instance_id: str) -> None:
        """Cut every open SSH connection to the instance; sshd keeps accepting new ones."""
        ...

    def set_authorized_keys(self, instance_id: str, keys: list[str], *, replace: bool) -> None:
        """Append `keys` to root's authorized_keys, or replace the file with them."""
        ...

    def stop(self, instance_id: str, grace_s: int = 2) -> None:
        """Vast `state: stopped`: the container stops (SIGTERM, SIGKILL after `grace_s`), its
        disk stays."""
        ...

    def start(self, instance_id: str) -> None:
        """Vast `state: running` after a stop."""
        ...

    def close(self) -> None:
        """Terminate everything this backend still holds (the fake is shutting down)."""
        ...
