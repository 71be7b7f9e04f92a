"""`python -m infra.fakes serve lambda|vast --info FILE`: one fake as a daemon (what
`start_fakes` runs). SIGTERM stops serving and terminates every instance it made."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from infra.fakes.daemon import start_time
from infra.fakes.server import FakeApi, FakeServer


def _api(kind: str, backend_name: str, records: Path) -> FakeApi:
    if backend_name == "null":
        from infra.fakes.null_backend import NullBackend

        backend = NullBackend()
    else:
        from infra.fakes.lab_backend import LabBackend

        backend = LabBackend(records)  # type: ignore[assignment]
    if kind == "lambda":
        from infra.fakes.lambda_api import LambdaApi

        return LambdaApi(backend)
    from infra.fakes.vast_api import VastApi

    return VastApi(backend)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m infra.fakes")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("api", choices=["lambda", "vast"])
    parser.add_argument("--info", type=Path, required=True, help="JSON written once serving")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--backend", choices=["lab", "null"], default="lab")
    parser.add_argument("--records", type=Path, help="the lab backend's record file")
    args = parser.parse_args(argv)
    records = args.records or args.info.with_name(f"backend-{args.api}.json")
    api = _api(args.api, args.backend, records)
    api.knobs.rate_limits = os.environ.get("GPUJOB_FAKES_RATE_LIMITS") == "1"
    server = FakeServer(api, args.port, verbose=True)

    def stop(signum: int, frame: FrameType | None) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    info = {"pid": os.getpid(), "start": start_time(os.getpid()), "port": server.port,
            "api": args.api}  # fmt: skip
    tmp = args.info.with_suffix(".tmp")
    tmp.write_text(json.dumps(info))
    tmp.replace(args.info)
    print(f"{args.api} fake serving on 127.0.0.1:{server.port}", file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        api.close()
        print(f"{args.api} fake stopped; its instances are terminated", file=sys.stderr)


if __name__ == "__main__":
    main()
