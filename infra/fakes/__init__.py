"""HTTP fakes of the Lambda Cloud v1 and Vast.ai v0 APIs, serving real lab hosts.

In a test: `serve_lambda(backend)` / `serve_vast(backend)` start one on a thread and return
a `RunningFake` (its `url`, and `control` for faults and knobs). For the lab and demos:
`start_fakes(lab_dir)` starts both as daemons backed by lab hosts; `stop_fakes` ends them.
Keys the fakes accept are in `infra.fakes.keys`. Standard library only at import time.
"""

from __future__ import annotations

from pathlib import Path

from infra.fakes import daemon
from infra.fakes.backend import HostBackend
from infra.fakes.control import FakeControl, RunningFake, serve_in_thread
from infra.fakes.keys import LAMBDA_API_KEY, VAST_API_KEY

__all__ = [
    "LAMBDA_API_KEY", "VAST_API_KEY", "FakeControl", "HostBackend", "RunningFake",
    "serve_lambda", "serve_vast", "start_fakes", "stop_fakes",
]  # fmt: skip

# (api, base path, variable naming its URL)
APIS = (("lambda", "/api/v1", "GPUJOB_LAMBDA_API_URL"), ("vast", "/api/v0", "GPUJOB_VAST_API_URL"))


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


def start_fakes(lab_dir: Path) -> dict[str, str]:
    """Both fakes as daemons on loopback, backed by lab hosts; a second call reuses running
    ones. Returns the variables a client needs: both API URLs and both keys."""
    folder = lab_dir / "fakes"
    folder.mkdir(parents=True, exist_ok=True)
    found: dict[str, str] = {}
    for api, base, variable in APIS:
        info = daemon.read_info(folder / f"{api}.json")
        if not daemon.alive(info):
            info = daemon.spawn(api, folder / f"{api}.json", lab_dir)
        assert info is not None
        found[variable] = f"http://127.0.0.1:{info['port']}{base}"
    found["LAMBDA_API_KEY"] = LAMBDA_API_KEY
    found["VAST_API_KEY"] = VAST_API_KEY
    return found


def stop_fakes(lab_dir: Path) -> None:
    """Stop both daemons by recorded pid; they terminate their instances on the way out, and
    whatever a killed one left behind is removed from its backend's records here."""
    folder = lab_dir / "fakes"
    for api, _, _ in APIS:
        daemon.stop(daemon.read_info(folder / f"{api}.json"))
        (folder / f"{api}.json").unlink(missing_ok=True)
        records = folder / f"backend-{api}.json"
        if records.exists():
            from infra.fakes.lab_backend import LabBackend

            LabBackend(records).close()
