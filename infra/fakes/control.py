"""Driving a fake from a test: `FakeControl` (the `/_fake/...` endpoints over HTTP, so it
works the same for an in-process server and for the lab's daemons) and `serve_in_thread`.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from infra.fakes.server import FakeApi, FakeServer


class FakeControl:
    """The control panel of one fake at `root` (e.g. `http://127.0.0.1:PORT`)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.root}/_fake/{path.lstrip('/')}", data=data, method=method,
            headers={"Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                return json.loads(reply.read() or b"null")
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"{method} /_fake/{path}: {error.code} {error.read()!r}") from None

    def health(self) -> dict[str, Any]:
        return self.call("GET", "health")

    def fault(self, action: str = "error", **fields: Any) -> None:
        """Queue one fault; see `faults.Fault` for the fields (op, status, code, count, ...)."""
        self.call("POST", "faults", {"action": action, **fields})

    def clear_faults(self) -> None:
        self.call("DELETE", "faults")

    def knobs(self, **values: Any) -> dict[str, Any]:
        """Set knobs (boot_seconds, boot_reads, boot_forever, rate_limits, ...); return all."""
        return self.call("POST", "knobs", values)

    def requests(self) -> list[dict[str, Any]]:
        """Every API request so far: method, path, query, op, body, status."""
        return self.call("GET", "requests")["requests"]

    def capacity(self, instance_types: list[str] | None = None, regions: list[str] | None = None,
                 count: int = 0, race: bool = False) -> list[dict[str, Any]]:  # fmt: skip
        """Lambda only: units left per (type, region); `race` lists them but refuses launch."""
        body = {"instance_types": instance_types, "regions": regions, "count": count,
                "race": race}  # fmt: skip
        return self.call("POST", "capacity", body)["capacity"]

    def instance(self, instance_id: str | int, **changes: Any) -> dict[str, Any]:
        """Inject a state: Lambda `status`/`stuck`/`omit_private_ip`; Vast `actual_status`,
        `status_msg`, `stuck`, `spot_interrupted`."""
        return self.call("POST", f"instances/{instance_id}", changes)

    def reboot(self, instance_id: str | int) -> None:
        """The host (Lambda) or container (Vast) crashes and comes back."""
        self.call("POST", f"instances/{instance_id}/reboot")

    def drop_ssh(self, instance_id: str | int) -> None:
        self.call("POST", f"instances/{instance_id}/drop-ssh")

    def rewrite_keys(self, instance_id: str | int) -> None:
        """Vast only: authorized_keys is rewritten from the registered keys (§7.6)."""
        self.call("POST", f"instances/{instance_id}/rewrite-keys")

    def reset(self) -> None:
        self.call("POST", "reset")


@dataclass
class RunningFake:
    """A fake serving on a thread of this process. `url` is the API base a client takes."""

    url: str
    root: str
    api: FakeApi
    server: FakeServer
    control: FakeControl
    thread: threading.Thread

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.api.close()


def serve_in_thread(api: FakeApi, base_path: str, port: int = 0) -> RunningFake:
    server = FakeServer(api, port)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              name=f"fake-{api.name}", daemon=True)  # fmt: skip
    thread.start()
    root = f"http://127.0.0.1:{server.port}"
    return RunningFake(f"{root}{base_path}", root, api, server, FakeControl(root), thread)
