"""Where a job's nodes run: this machine, the `--on` hosts, or hosts `--up` just rented.

Each remote host is contacted once (one SSH connection, kept for the whole command) for the
facts a plan needs and cannot guess: $HOME, its python3, whether Docker answers, how many
GPUs it has, and the IP address its name resolves to (node 0's rendezvous endpoint must be
an address every node can reach). A dry run contacts nothing and says what it assumed.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

from launcher.errors import GpujobError, UsageError
from launcher.plan.model import Target

RuntimeChoice = Literal["auto", "docker", "bare"]

# The image's own environment when the host is itself a container (a Vast instance is one),
# which an SSH login does not inherit: the first python3 that has torch, on PID 1's PATH (the
# image's ENV; unreadable when PID 1 is sshd, which rewrites it for its title) or in the
# usual image locations.
FACTS_SCRIPT = r"""
HAS_TORCH='import importlib.util, sys; sys.exit(importlib.util.find_spec("torch") is None)'
echo "home=$HOME"
if [ -f /.dockerenv ]; then
  image_path=$({ tr '\0' '\n' </proc/1/environ; } 2>/dev/null | sed -n 's/^PATH=//p')
  for dir in $(echo "$image_path" | tr ':' ' ') /opt/conda/bin /opt/venv/bin /usr/local/bin; do
    if [ -x "$dir/python3" ] && "$dir/python3" -c "$HAS_TORCH" 2>/dev/null; then
      PATH="$dir:$PATH"
      break
    fi
  done
fi
images=$(mktemp 2>/dev/null) || images=/dev/null  # no list then: the pull check stays
if command -v docker >/dev/null 2>&1; then
  docker image ls --format '{{.Repository}}:{{.Tag}}' >"$images" 2>/dev/null &
fi
py=$(command -v python3 || true)
echo "python=$py"
if [ -n "$py" ]; then
  echo "version=$("$py" -c 'import sys; print(*sys.version_info[:2], sep=".")')"
fi
if wait $! 2>/dev/null && command -v docker >/dev/null 2>&1; then
  echo docker=1
  sed 's/^/image=/' "$images"
else
  echo docker=0
fi
[ "$images" = /dev/null ] || rm -f "$images"
echo "gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
echo "memlock=$(ulimit -Hl)"
at="$HOME/.gpujob/jobs"
while [ ! -e "$at" ]; do at=$(dirname "$at"); done
echo "free_at=$at"
echo "free_kib=$(df -Pk "$at" 2>/dev/null | awk 'NR == 2 {print $4}')"
"""


@dataclass(frozen=True)
class HostFacts:
    home: str
    python: str
    version: str
    docker: bool
    gpus: int
    memlock_unlimited: bool = True
    free_bytes: int | None = None
    """Free space where the job folders go (the nearest folder of ~/.gpujob/jobs there is)."""
    free_at: str = ""
    images: frozenset[str] = frozenset()
    """The images Docker has there (`REPOSITORY:TAG`): a job's that is among them is not
    looked for again before its start."""


@dataclass
class Placement:
    target: Target
    connections: dict[str, Any]
    records: list[str]
    note: str | None = None
    facts: dict[str, HostFacts] = field(default_factory=dict)


class EarlyContact:
    """The `--on` hosts contacted (SSH handshake, then their facts) on a thread while this
    one loads the spec: both are mostly waiting, on the network and on the host's shell, a
    fifth of a second or more each. What the thread met (an unknown host, a refused key) is
    raised when the placement asks, after the spec's own errors."""

    def __init__(self, names: list[str]) -> None:
        self.contacted: dict[str, tuple[Any, HostFacts]] = {}
        self.opened: list[Any] = []  # closed by close() unless taken
        self.error: BaseException | None = None
        self.closed = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._contact, args=(names,), daemon=True)
        self.thread.start()

    def _contact(self, names: list[str]) -> None:
        from launcher.providers import ssh as ssh_hosts

        try:
            for name in dict.fromkeys(names):
                entry = ssh_hosts.resolve_host(name)
                conn = ssh_hosts.connect(entry)
                with self.lock:
                    if self.closed:
                        return
                    self.opened.append(conn)
                facts = host_facts(conn)
                with self.lock:
                    if self.closed:  # close() came while the facts were read
                        conn.close()
                        return
                    self.contacted[entry.name] = (conn, facts)
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


def host_facts(conn: Any) -> HostFacts:
    result = conn.run(["sh", "-c", FACTS_SCRIPT])
    lines = [line.split("=", 1) for line in result.stdout.splitlines() if "=" in line]
    facts = dict(lines)
    if not result.ok or not facts.get("python") or not facts.get("version"):
        raise GpujobError(
            f"{conn.host}: cannot read the host's facts (exit {result.exit_code}): "
            f"{result.stderr.strip()[-200:]}",
            "the host needs python3 on its PATH (the agent runs with it)",
        )
    gpus, free = facts.get("gpus", "0").strip(), facts.get("free_kib", "").strip()
    return HostFacts(
        home=facts["home"],
        python=facts["python"],
        version=facts["version"],
        docker=facts.get("docker") == "1",
        gpus=int(gpus) if gpus.isdigit() else 0,
        memlock_unlimited=facts.get("memlock", "unlimited").strip() == "unlimited",
        free_bytes=int(free) * 1024 if free.isdigit() else None,
        free_at=facts.get("free_at", "").strip(),
        images=frozenset(value for key, value in lines if key == "image"),
    )


def resolved_address(address: str) -> str:
    """An IP for a name (an ~/.ssh/config alias is resolved by the caller first)."""
    try:
        return socket.getaddrinfo(address, None, type=socket.SOCK_STREAM)[0][4][0]
    except socket.gaierror as err:
        raise UsageError(f"cannot resolve host {address}: {err.strerror}") from None


def image_reference(spec_image: str, definition: Any) -> str | None:
    """A full image name as it is; an image definition under `$GPUJOB_REGISTRY` as
    `REGISTRY/REPO:NAME` (REPO: `$GPUJOB_IMAGE_REPO`, default `gpujob/job`), where
    `gpujob image build` pushes it; None when neither applies (`host`, no registry)."""
    if definition is None:
        return None if spec_image == "host" else spec_image
    registry = os.environ.get("GPUJOB_REGISTRY")
    if not registry:
        return None
    repo = os.environ.get("GPUJOB_IMAGE_REPO", "gpujob/job")
    return f"{registry}/{repo}:{definition.name}"


def node_hosts(on: list[str], nodes: int) -> list[str]:
    """One host for every node, or one per node in order: `--on a,b` with `nodes: 2`."""
    if len(on) == 1:
        return on * nodes
    if len(on) != nodes:
        raise UsageError(
            f"--on names {len(on)} hosts but the job has nodes: {nodes}",
            "name one host (all nodes on it) or one host per node, node 0 first",
        )
    return on


def split_on(values: tuple[str, ...] | list[str]) -> list[str]:
    return [name for value in values for name in value.split(",") if name]


def remote_placement(
    spec: Any,
    image: Any,
    entries: list[Any],
    *,
    runtime: RuntimeChoice,
    dry_run: bool,
    provider: str = "ssh",
    early: EarlyContact | None = None,
) -> Placement:
    """Nodes on SSH hosts (`entries`, one per node, node 0 first); `early` may hold some
    already contacted."""
    from launcher.providers import ssh as ssh_hosts

    ref = image_reference(spec.image, image)
    names = list(dict.fromkeys(e.name for e in entries))
    by_name = {e.name: e for e in entries}
    if dry_run:
        facts = {n: HostFacts("~", "python3", "?", runtime != "bare", 0) for n in names}
        addresses = [e.address for e in entries]
        target = _target(spec, image, entries, facts, addresses, ref, runtime, provider)
        note = "dry run: no host was contacted; assumed: no GPUs" + (
            ", Docker present" if target.runtime == "docker" else ""
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
        addresses = [resolved_address(conns[e.name].endpoint.address) for e in entries]
        target = _target(spec, image, entries, facts, addresses, ref, runtime, provider)
    except BaseException:
        for conn in conns.values():
            conn.close()
        raise
    return Placement(target, conns, [e.to_record() for e in entries], facts=facts)


def _target(
    spec: Any,
    image: Any,
    entries: list[Any],
    facts: dict[str, HostFacts],
    addresses: list[str],
    ref: str | None,
    runtime: RuntimeChoice,
    provider: str,
) -> Target:
    head = facts[entries[0].name]
    use_docker = runtime == "docker" or (
        runtime == "auto" and ref is not None and all(f.docker for f in facts.values())
    )
    if use_docker:
        if ref is None:
            raise UsageError(
                "--runtime docker needs an image: give `image:` a full image name, "
                "or set GPUJOB_REGISTRY for an image definition"
            )
        lacking = [name for name, f in facts.items() if not f.docker]
        if lacking:
            raise UsageError(f"--runtime docker: no Docker answers on {', '.join(lacking)}")
    else:
        for name, f in facts.items():
            if image is not None and f.version != "?" and image.python != f.version:
                raise UsageError(
                    f"image {image.name} is for Python {image.python} but {name} runs {f.version}",
                    "use `--set image=host` to run with the host's own Python environment",
                )
    homes = {f.home for f in facts.values()}
    if len(homes) > 1:
        raise UsageError(
            f"the hosts' home folders differ ({', '.join(sorted(homes))})",
            "use the same login user on every host of a multi-node job",
        )
    python = "python3" if use_docker or image is not None else head.python
    return Target(
        provider=provider,
        runtime="docker" if use_docker else "bare",
        hosts=tuple(e.name for e in entries),
        addresses=tuple(addresses),
        job_root=f"{head.home}/.gpujob/jobs",
        python=python,
        agent_python="python3",
        env_root=f"{head.home}/.cache/gpujob/envs",
        gpus_per_node=spec.resources.gpus_per_node,
        image_ref=ref if use_docker else None,
        image_present=use_docker and all(ref in f.images for f in facts.values()),
        host_gpus=min(f.gpus for f in facts.values()),
        raise_memlock=all(f.memlock_unlimited for f in facts.values()),
    )
