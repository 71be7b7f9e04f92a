"""Where a job's nodes run, carried out: this machine, the `--on` hosts, or hosts `--up`
just rented. Each remote host is contacted once (one SSH connection, kept for the whole
command) for its facts (`launcher.remote.facts`); the decisions over them are pure
(`launcher.plan.placement`). A dry run contacts nothing and says what it assumed.
"""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from typing import Any

from launcher.errors import UsageError
from launcher.plan.model import HOME_SHOWN, UNKNOWN_HOME, HostFacts, NodeLayout
from launcher.plan.placement import RuntimeChoice, image_reference, target_for
from launcher.remote.facts import host_facts
from launcher.remote.fanout import per_host


@dataclass
class Placement:
    target: NodeLayout
    connections: dict[str, Any]
    records: list[str]
    note: str | None = None
    facts: dict[str, HostFacts] = field(default_factory=dict)


class EarlyContact:
    """The `--on` hosts contacted (SSH handshake, then their facts), all at once, on a
    thread while this one loads the spec: both are mostly waiting, on the network and on the
    host's shell, a fifth of a second or more each. What the thread met (an unknown host, a
    refused key) is raised when the placement asks, after the spec's own errors."""

    def __init__(self, names: list[str]) -> None:
        self.contacted: dict[str, tuple[Any, HostFacts]] = {}
        self.opened: list[Any] = []  # closed by close() unless taken
        self.error: BaseException | None = None
        self.closed = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._contact, args=(names,), daemon=True)
        self.thread.start()

    def _contact(self, names: list[str]) -> None:
        from launcher.remote import hosts as ssh_hosts

        def contact(name: str) -> None:
            entry = ssh_hosts.resolve_host(name)
            conn = ssh_hosts.connect(entry)
            with self.lock:
                if self.closed:
                    conn.close()
                    return
                self.opened.append(conn)
            facts = host_facts(conn)
            with self.lock:
                if self.closed:  # close() came while the facts were read
                    conn.close()
                    return
                self.contacted[entry.name] = (conn, facts)

        try:  # every host at once: 16 hosts in the time of the slowest
            unique = list(dict.fromkeys(names))
            per_host(unique, str, contact)
        except BaseException as err:  # raised in the caller's thread by take()
            self.error = err

    def take(self, name: str) -> tuple[Any, HostFacts] | None:
        """The host's connection (now the caller's to close) and facts, if contacted."""
        self.thread.join()
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        contacted = self.contacted.pop(name, None)
        if contacted is not None:
            self.opened.remove(contacted[0])
        return contacted

    def close(self) -> None:
        """Close what nobody took (the spec failed to load, or the hosts were not needed),
        without waiting for a host that is slow to answer: the thread closes what it opens
        from now on."""
        with self.lock:
            self.closed = True
            for conn in self.opened:
                conn.close()
            self.opened.clear()


def resolved_address(address: str) -> str:
    """An IP for a name (an ~/.ssh/config alias is resolved by the caller first)."""
    try:
        return str(socket.getaddrinfo(address, None, type=socket.SOCK_STREAM)[0][4][0])
    except socket.gaierror as err:
        raise UsageError(f"cannot resolve host {address}: {err.strerror}") from None


def remote_placement(
    spec: Any,
    image: Any,
    entries: list[Any],
    *,
    runtime: RuntimeChoice,
    dry_run: bool,
    provider: str = "ssh",
    early: EarlyContact | None = None,
    pulled: bool = False,
) -> Placement:
    """Nodes on SSH hosts (`entries`, one per node, node 0 first); `early` may hold some
    already contacted. `pulled`: the hosts will have the job's image before the plan runs
    (a rented host's bootstrap pulls it), so a dry run plans no pull, as the run will not."""
    from launcher.remote import hosts as ssh_hosts

    ref = image_reference(spec.image, image)
    names = list(dict.fromkeys(e.name for e in entries))
    by_name = {e.name: e for e in entries}
    if dry_run:
        images = frozenset({ref} if pulled and ref else ())
        facts = {n: HostFacts(UNKNOWN_HOME, "python3", "?", runtime != "bare", 0, images=images)
                 for n in names}  # fmt: skip
        addresses = [e.peer or e.address for e in entries]
        target = target_for(spec, image, entries, facts, addresses, ref, runtime, provider)
        note = (
            "dry run: no host was contacted; assumed: no GPUs"
            + (", Docker present, RLIMIT_MEMLOCK raisable" if target.runtime == "docker" else "")
            + (" and the image pulled when the host is made ready" if target.image_present else "")
            + f"; {HOME_SHOWN} is the login's home folder there"
        )
        return Placement(target, {}, [], note)
    conns: dict[str, Any] = {}
    try:
        facts = {}
        for name in names:
            contacted = early.take(name) if early is not None else None
            if contacted is not None:
                conns[name], facts[name] = contacted
                continue
            conns[name] = ssh_hosts.connect(by_name[name])
            facts[name] = host_facts(conns[name])
        addresses = [
            e.peer or resolved_address(conns[e.name].endpoint.address) for e in entries
        ]  # a peer address (an overlay's) is where nodes meet
        target = target_for(spec, image, entries, facts, addresses, ref, runtime, provider)
    except BaseException:
        for conn in conns.values():
            conn.close()
        raise
    return Placement(target, conns, [e.to_record() for e in entries], facts=facts)
