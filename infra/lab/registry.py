"""The lab's image registry: Debian's `docker-registry` (distribution v2) on the bridge, port
5000 (10.77.0.1:5000 for the default lab).

It is plain http. Hosts' dockerds trust it (`--insecure-registry`); the machine's dockerd
trusts it only if it was started that way (infra/install-deps.sh trusts every lab's range,
10.77.0.0/16). Restarting a dockerd the lab did not start is not the lab's call, so a
`socat` forward on a loopback address of the lab's own (127.77.0.1:5000 for the default
lab, see `naming.loopback_host`) is always there too: Docker treats 127.0.0.0/8 registries
as insecure by default, and `push_address()` picks whichever the machine's dockerd will
accept. Both names reach the same storage, so `127.77.0.1:5000/x:t` pushed is
`10.77.0.1:5000/x:t` pulled. Every lab's registry keeps its blobs in one storage folder of the
machine's (`naming.shared_dir()`, kept by `down`), so a lab pushes only what no lab pushed
before: Docker asks the registry for each layer's digest before uploading it, and the
repository names are the same in every lab. (Several registries on one storage is how
distribution scales out; its blobs are content-addressed and written by rename.) What is
pushed also goes into the machine's image store (image_store.py), which hosts booted later
start with instead of pulling.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import urllib.request
from typing import Any

from infra.lab import naming, state

PORT = 5000


def address() -> str:
    """Where hosts (and a dockerd that trusts the lab range) reach the registry."""
    return f"{naming.bridge_address()}:{PORT}"


def loopback() -> str:
    """The lab's loopback forward to the registry, for a dockerd that trusts only 127/8."""
    return f"{naming.loopback_host()}:{PORT}"


CONFIG = """\
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: {address}
"""


def registry_argv() -> list[str]:
    return ["docker-registry", "serve", str(state.lab_dir() / "registry" / "config.yml")]


def forward_argv() -> list[str]:
    return [
        "socat", f"TCP-LISTEN:{PORT},bind={naming.loopback_host()},reuseaddr,fork",
        f"TCP:{address()}",
    ]  # fmt: skip


def start(daemons: dict[str, Any]) -> None:
    """Start the registry and its loopback forward unless running; records go in `daemons`."""
    folder = state.lab_dir() / "registry"
    folder.mkdir(exist_ok=True)
    storage = naming.shared_dir() / "registry"
    storage.mkdir(exist_ok=True)
    (folder / "config.yml").write_text(CONFIG.format(root=storage, address=address()))
    if not state.alive(daemons.get("registry")):
        log = folder / "registry.log"
        daemons["registry"] = state.spawn(registry_argv(), log)
        state.wait_until(
            lambda: answers(address()), "registry", timeout=20, log=log, daemon=daemons["registry"]
        )
    if not state.alive(daemons.get("registry-forward")):
        log = folder / "forward.log"
        daemons["registry-forward"] = state.spawn(forward_argv(), log)
        state.wait_until(
            lambda: answers(loopback()),
            "registry forward",
            timeout=10,
            log=log,
            daemon=daemons["registry-forward"],
        )


def stop(daemons: dict[str, Any]) -> None:
    for key in ("registry-forward", "registry"):
        state.stop(daemons.pop(key, None))


def answers(where: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{where}/v2/", timeout=1) as reply:
            return reply.status == 200
    except OSError:
        return False


def tags(repository: str, where: str | None = None) -> list[str]:
    """Tags of `repository` in the registry (empty when it holds none): proof of a push."""
    url = f"http://{where or address()}/v2/{repository}/tags/list"
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.load(r).get("tags") or []
    except OSError:
        return []


def push_address() -> str:
    """The bridge address if the machine's dockerd trusts the lab subnet, else the loopback
    forward."""
    done = subprocess.run(
        ["docker", "info", "--format", "{{json .RegistryConfig.InsecureRegistryCIDRs}}"],
        capture_output=True, text=True,
    )  # fmt: skip
    cidrs = json.loads(done.stdout or "null") or []
    bridge = ipaddress.ip_address(naming.bridge_address())
    return address() if any(bridge in ipaddress.ip_network(c) for c in cidrs) else loopback()


def push(local_ref: str, repository_tag: str) -> str:
    """Push a local image of the machine's dockerd as `repository:tag`, and put it in the
    image store for hosts booted later; returns the hosts' ref."""
    from infra.lab import image_store

    target = f"{push_address()}/{repository_tag}"
    state.run(["docker", "tag", local_ref, target])
    state.run(["docker", "push", target])
    if not target.startswith(address()):
        state.run(["docker", "rmi", target])  # the tag only; the image stays under local_ref
    ref = f"{address()}/{repository_tag}"
    inspect = ["docker", "image", "inspect", "--format", "{{.Id}}", local_ref]
    image_store.add(ref, state.run(inspect).stdout.strip())
    return ref
