"""The provider fakes as lab hosts reach them: a `socat` forward on the bridge per fake.

The fakes listen on this machine's loopback only; a host's loopback is its own. A host that
calls the cloud API itself (autostop ends its own instance) reaches the fake at
http://BRIDGE:PORT (10.77.0.1 for the default lab), forwarded to 127.0.0.1:PORT, as s3.py
does for moto. `gpujob lab up`
starts one per fake (recorded with the lab's daemons, so `lab down` stops them); a test with
its own in-process fakes takes `forwarded(url)` for the time it runs.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

from infra.lab import naming, state

HOST_VARIABLES = {"GPUJOB_LAMBDA_API_URL": "GPUJOB_LAMBDA_HOST_API_URL",
                  "GPUJOB_VAST_API_URL": "GPUJOB_VAST_HOST_API_URL"}  # fmt: skip
"""Each fake's URL variable, and the variable naming the URL a host reaches it at."""


def forward_argv(port: int | str) -> list[str]:
    return [
        "socat", f"TCP-LISTEN:{port},bind={naming.bridge_address()},reuseaddr,fork",
        f"TCP:127.0.0.1:{port}",
    ]  # fmt: skip


def host_url(url: str) -> str:
    """`http://127.0.0.1:P/api/v1` as a host reaches it: `http://10.77.0.1:P/api/v1`."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{naming.bridge_address()}:{parts.port}"))


def start(url: str, name: str) -> dict:
    """A forward for the fake at `url` (its record, for `state.stop`), once it accepts."""
    port = urlsplit(url).port
    log = state.lab_dir() / "fakes" / f"{name}.log"
    rec = state.spawn(forward_argv(port), log)
    state.wait_until(lambda: _accepts(port), f"forward of {url} on the bridge", timeout=10,
                     log=log, daemon=rec)  # fmt: skip
    return rec


def start_all(daemons: dict, urls: dict[str, str]) -> dict[str, str]:
    """A forward per fake URL in `urls` unless one runs; the host URL variables."""
    found = {}
    for variable, host_variable in HOST_VARIABLES.items():
        if variable not in urls:
            continue
        name = f"forward-{variable.split('_')[1].lower()}"
        if not state.alive(daemons.get(name)):
            daemons[name] = start(urls[variable], name)
        found[host_variable] = host_url(urls[variable])
    return found


def stop_all(daemons: dict) -> None:
    for name in [n for n in daemons if n.startswith("forward-")]:
        state.stop(daemons.pop(name))


@contextlib.contextmanager
def forwarded(url: str) -> Iterator[str]:
    """The fake at `url` reachable from the lab hosts while the block runs: its host URL."""
    rec = start(url, f"forward-{urlsplit(url).port}")
    try:
        yield host_url(url)
    finally:
        state.stop(rec)


def _accepts(port: int | None) -> bool:
    try:
        with socket.create_connection((naming.bridge_address(), int(port or 0)), timeout=1):
            return True
    except OSError:
        return False
