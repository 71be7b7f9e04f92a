"""Static SSH hosts: machines you already have, named in hosts.yaml or given as user@addr[:port].

hosts.yaml (`~/.config/gpujob/hosts.yaml`, or `$GPUJOB_HOSTS_FILE`):

    hosts:
      - {name: gpu1, address: 203.0.113.7, port: 22, user: ubuntu, key: ~/.ssh/lambda}

A job record keeps the host as a JSON string (`HostEntry.to_record`), so `logs`, `status`
and `cancel` reach the same machine later without the hosts file.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import KW_ONLY, asdict, dataclass, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from launcher.errors import UsageError
from launcher.paths import hosts_file, known_hosts_file

if TYPE_CHECKING:
    from launcher.clouds.base import Instance

PROVIDER = "ssh"
USER_AT = re.compile(r"^(?:(?P<user>[^@\s:]+)@)?(?P<address>[^@\s:\[\]]+|\[[0-9a-fA-F:]+\])"
                     r"(?::(?P<port>\d{1,5}))?$")  # fmt: skip
FIELDS = ("name", "address", "port", "user", "key")
READ_ELSEWHERE = ("slurm",)
"""hosts.yaml entry types another part reads (a cluster's login host: targets/slurm)."""


@dataclass(frozen=True)
class HostEntry:
    name: str
    address: str
    port: int | None = None
    user: str | None = None
    _: KW_ONLY
    key: str | None = None
    instance: str | None = None
    """A rented host's `<provider>:<id>` (its key is pinned for the instance); never set
    from hosts.yaml: a host you have is pinned per address."""
    peer: str | None = None
    """Where the job's other nodes reach this one (NCCL, c10d), when not at `address`: a
    rented host's overlay address (Vast multi-node)."""

    def to_record(self) -> str:
        return json.dumps({k: v for k, v in asdict(self).items() if v is not None})

    @classmethod
    def from_record(cls, text: str) -> HostEntry:
        return cls(**json.loads(text))


def parse_hosts(text: str, where: str) -> dict[str, HostEntry]:
    """hosts.yaml's entries by name; every mistake is a one-line UsageError naming the entry."""
    import yaml

    try:
        data = yaml.safe_load(text) or {}
    except yaml.YAMLError as err:
        raise UsageError(f"{where}: not YAML: {err}".splitlines()[0]) from None
    entries = data.get("hosts") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise UsageError(f"{where}: expected `hosts:` with a list of hosts", _HOSTS_HINT)
    hosts: dict[str, HostEntry] = {}
    for index, raw in enumerate(entries):
        at = f"{where}: hosts[{index}]"
        if not isinstance(raw, dict):
            raise UsageError(f"{at}: expected a mapping", _HOSTS_HINT)
        if raw.get("type") in READ_ELSEWHERE:
            continue
        entry = host_entry(raw, at)
        if entry.name in hosts:
            raise UsageError(f"{at}: the name {entry.name!r} is used twice")
        hosts[entry.name] = entry
    return hosts


_HOSTS_HINT = "entries are {name, address, port, user, key}; only name and address are required"


def host_entry(
    raw: dict[str, Any], at: str, fields: tuple[str, ...] = FIELDS, hint: str = _HOSTS_HINT
) -> HostEntry:
    """One entry's checks (also a SLURM login's, targets/slurm/cluster.py): known fields, name and
    address, the port's type and range, the user's type."""
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise UsageError(f"{at}: unknown field(s) {', '.join(unknown)}", hint)
    for field in ("name", "address"):
        if not isinstance(raw.get(field), str) or not raw[field].strip():
            raise UsageError(f"{at}: `{field}` is required (a string)", hint)
    port = raw.get("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int)
                             or not 0 < port < 65536):  # fmt: skip
        raise UsageError(f"{at}: port: {port!r} is not a port number (1-65535)")
    user = raw.get("user")
    if user is not None and (not isinstance(user, str) or not user.strip()):
        raise UsageError(f"{at}: user: {user!r} is not a user name (a string)")
    key = raw.get("key")
    return HostEntry(name=raw["name"], address=raw["address"], port=port, user=user,
                     key=os.path.expanduser(str(key)) if key else None)  # fmt: skip


def parse_user_at(text: str) -> HostEntry | None:
    """`user@addr[:port]`, `addr:port` or `addr`; None when it is not of that shape."""
    match = USER_AT.match(text)
    if match is None:
        return None
    port = int(match["port"]) if match["port"] else None
    if port is not None and not 0 < port < 65536:
        raise UsageError(f"--on {text}: {port} is not a port number (1-65535)")
    return HostEntry(name=text, address=match["address"].strip("[]"), port=port,
                     user=match["user"])  # fmt: skip


def rented_host(reference: str) -> HostEntry | None:
    """A host `gpujob up` rented and that is running, by name, short name or instance id;
    it is logged in to with the key `up` registered."""
    from launcher.remote.hostkeys import instance_key
    from launcher.remote.keys import user_key
    from launcher.state.readonly import HostsView

    record = HostsView().host(reference)  # a lookup: a dry run that names a host writes nothing
    if record is None or record.status != "running" or not record.ip:
        return None
    rented = instance_key(record.provider, record.instance_id) if record.instance_id else None
    return HostEntry(name=record.name, address=record.ip, port=record.ssh_port,
                     user=record.ssh_user, key=str(user_key()), instance=rented)  # fmt: skip


def instance_entry(inst: Instance) -> HostEntry:
    """A running instance `up` just rented, logged in to with the key it registered."""
    from launcher.remote.hostkeys import instance_key
    from launcher.remote.keys import user_key

    return HostEntry(name=inst.name, address=str(inst.ip), port=inst.ssh_port,
                     user=inst.ssh_user, key=str(user_key()),
                     instance=instance_key(inst.provider, inst.id),
                     peer=inst.peer_ip)  # fmt: skip


@functools.lru_cache(maxsize=4)
def _parsed_hosts(text: str, where: str) -> Mapping[str, HostEntry]:
    """hosts.yaml parsed once per text: a job of 16 nodes resolves 16 names from it."""
    return MappingProxyType(parse_hosts(text, where))


def resolve_host(on: str) -> HostEntry:
    """A hosts.yaml name first, then a host `gpujob up` rented; else `user@addr[:port]`
    (addr may be a ~/.ssh/config alias)."""
    path = hosts_file()
    if path.is_file():
        hosts = _parsed_hosts(path.read_text(), str(path))
        if on in hosts:
            return hosts[on]
    if "@" not in on and ":" not in on:
        rented = rented_host(on)
        if rented is not None:
            return rented
    entry = parse_user_at(on)
    if entry is None:
        raise UsageError(
            f"--on {on}: not a host in {path} nor of the form user@address[:port]",
            f"add it to {path} or give user@address",
        )
    return entry


def connect(entry: HostEntry) -> Any:
    """An SSHConnection (not opened yet: it opens on first use)."""
    from launcher.remote.ssh import SSHConnection, resolve_endpoint

    endpoint = resolve_endpoint(entry.address, user=entry.user, port=entry.port, key=entry.key)
    if entry.instance:
        endpoint = replace(endpoint, instance=entry.instance)
    return SSHConnection(entry.name, endpoint, known_hosts_file())
