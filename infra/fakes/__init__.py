"""HTTP fakes of the Lambda Cloud v1 and Vast.ai v0 APIs, serving real lab hosts.

In a test: `serve_lambda(backend)` / `serve_vast(backend)` start one on a thread and return
a `RunningFake` (its `url`, and `control` for faults and knobs). For the lab and demos:
`start_fakes(lab_dir)` starts both as daemons backed by lab hosts; `stop_fakes` ends them.
Keys the fakes accept are in `infra.fakes.keys`. Standard library only at import time.
"""

from __future__ import annotations

from infra.fakes.backend import HostBackend
from infra.fakes.control import FakeControl, RunningFake, serve_in_thread
from infra.fakes.keys import LAMBDA_API_KEY, VAST_API_KEY

__all__ = [
    "LAMBDA_API_KEY", "VAST_API_KEY", "FakeControl", "HostBackend", "RunningFake",
    "serve_lambda", "serve_vast",
]  # fmt: skip


def serve_lambda(backend: HostBackend | None = None, port: int = 0) -> RunningFake:
    """The Lambda fake on a thread; its `url` ends in `/api/v1`. Null backend by default."""
    from infra.fakes.lambda_api import LambdaApi
    from infra.fakes.null_backend import NullBackend

    return serve_in_thread(LambdaApi(backend or NullBackend()), "/api/v1", port)


def serve_vast(backend: HostBackend | None = None, port: int = 0) -> RunningFake:
    """The Vast fake on a thread; its `url` ends in `/api/v0` (the v1 list is at the same
    host, `/api/v1/instances/`). Null backend by default."""
    from infra.fakes.null_backend import NullBackend
    from infra.fakes.vast_api import VastApi

    return serve_in_thread(VastApi(backend or NullBackend()), "/api/v0", port)
