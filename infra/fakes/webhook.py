"""A webhook endpoint (Slack's or Discord's, as gpujob's `notify:` posts to them) that keeps
every JSON POST it receives: `Webhook(address)` serves on a thread, `url` has a secret-like
token in its path (tests check it never reaches a log), `events()` lists (job, event)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOKEN = "T0-secret-hook-9c1e"


class Webhook:
    def __init__(self, address: str = "127.0.0.1") -> None:
        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append({"path": self.path, "type": self.headers["Content-Type"],
                                 "body": json.loads(body)})  # fmt: skip
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_: object) -> None:
                pass

        self.server = ThreadingHTTPServer((address, 0), Handler)
        self.url = f"http://{address}:{self.server.server_port}/services/{TOKEN}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def events(self) -> list[tuple[str, str]]:
        return [(r["body"]["job_id"], r["body"]["event"]) for r in self.received]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
