"""The HTTP machinery both fakes share: parse, record, route, misbehave, answer.

Each fake is a `FakeApi` (routes plus its own error shapes); `FakeServer` is a stdlib
`ThreadingHTTPServer` bound to loopback that hands every request to it. Paths under
`/_fake/` are the test's control panel: no auth, no faults, never recorded.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from infra.fakes.faults import Fault, FaultBook, Knobs

HTML_PAGE = "<html><head><title>{status}</title></head><body><h1>{status}</h1></body></html>\n"


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    limited_by: str | None = None
    """Which of the API's rate limits refused it (the request log says, for tests)."""

    def json(self) -> Any:
        """The body as JSON; an empty body is `{}` (clients send DELETEs with none)."""
        if not self.body.strip():
            return {}
        return json.loads(self.body)


@dataclass
class Reply:
    status: int
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


def json_reply(status: int, payload: Any, headers: dict[str, str] | None = None) -> Reply:
    body = json.dumps(payload).encode()
    return Reply(status, body, {"Content-Type": "application/json", **(headers or {})})


def text_reply(status: int, text: str, content_type: str = "text/plain") -> Reply:
    return Reply(status, text.encode(), {"Content-Type": f"{content_type}; charset=utf-8"})


class ApiError(Exception):
    """Raised by a handler to answer with an error reply built by the API's own shape."""

    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


Handler = Callable[..., Reply]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    op: str
    handler: Handler


class FakeApi:
    """Base of both fakes. Subclasses add routes and say how their errors look."""

    name = "fake"

    def __init__(self) -> None:
        self.routes: list[Route] = []
        self.faults = FaultBook()
        self.knobs = Knobs()
        self.lock = threading.RLock()
        self.requests: list[dict[str, Any]] = []
        self.clock: Callable[[], float] = time.monotonic

    # --- what subclasses provide -------------------------------------------------------
    def error_reply(self, status: int, code: str | None, message: str | None) -> Reply:
        raise NotImplementedError

    def authenticate(self, request: Request, op: str) -> None:
        """Raise ApiError when the request may not call `op`."""

    def rate_limit(self, request: Request, op: str) -> None:
        """Raise ApiError (429) when the caller is too fast for `op`."""

    def caller(self, request: Request) -> str | None:
        """Whose key the request carries, in words for the request log (never the key)."""
        return None

    def control(self, request: Request, parts: list[str]) -> Reply | None:
        """API-specific `/_fake/...` endpoints; None when `parts` is not one of them."""
        return None

    def close(self) -> None:
        """Terminate every instance (the server is going away)."""

    # --- routing -----------------------------------------------------------------------
    def route(self, method: str, path: str, op: str, handler: Handler) -> None:
        """`path` with `{name}` segments; a trailing slash is optional, as Vast's are."""
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", path.rstrip("/"))
        self.routes.append(Route(method, re.compile(f"^{regex}/?$"), op, handler))

    def _match(self, method: str, path: str) -> tuple[Route, dict[str, str]] | str | None:
        allowed = False
        for route in self.routes:
            found = route.pattern.match(path)
            if found:
                if route.method == method:
                    return route, found.groupdict()
                allowed = True
        return "method" if allowed else None

    def not_found(self, request: Request, why: str) -> Reply:
        return self.error_reply(404 if why == "path" else 405, None, f"no route {request.path}")

    # --- one request -------------------------------------------------------------------
    def dispatch(self, request: Request) -> Reply | None:
        """The reply to send, or None to drop the connection without one."""
        if request.path.startswith("/_fake/"):
            return self._control(request)
        found = self._match(request.method, request.path)
        op = found[0].op if isinstance(found, tuple) else "?"
        entry = {"method": request.method, "path": request.path, "query": request.query,
                 "op": op, "body": _loggable(request), "caller": self.caller(request),
                 "user_agent": request.headers.get("user-agent")}  # fmt: skip
        with self.lock:
            self.requests.append(entry)
            del self.requests[:-10000]
        reply = self._answer(request, found, op)
        entry["status"] = None if reply is None else reply.status
        entry["limited_by"] = request.limited_by
        entry["reply"] = None if reply is None else _reply_json(reply)
        return reply

    def _answer(self, request: Request, found: Any, op: str) -> Reply | None:
        if not isinstance(found, tuple):
            return self.not_found(request, "method" if found else "path")
        route, params = found
        fault = self.faults.take(op, request.method)
        if fault and not fault.handle_first:
            early = self._misbehave(fault)
            if fault.action != "delay":
                return early
        try:
            self.authenticate(request, op)
            self.rate_limit(request, op)
            reply = route.handler(request, **params)
        except ApiError as error:
            reply = error.reply
        except Exception:
            traceback.print_exc(file=sys.stderr)
            reply = self.error_reply(500, None, None)
        if fault and fault.handle_first:
            late = self._misbehave(fault)  # the work is done; the answer is late or lost
            return reply if fault.action == "delay" else late
        return reply

    def _misbehave(self, fault: Fault) -> Reply | None:
        if fault.action == "delay":
            time.sleep(fault.seconds)
            return None
        if fault.action == "drop":
            return None
        if fault.action == "html":
            status = fault.status or 502
            return text_reply(status, HTML_PAGE.format(status=status), "text/html")
        if fault.body is not None:
            status = fault.status or 500
            reply = (text_reply(status, fault.body) if isinstance(fault.body, str)
                     else json_reply(status, fault.body))  # fmt: skip
        else:
            reply = self.error_reply(fault.status or 500, fault.code, fault.message)
        if fault.retry_after is not None:
            reply.headers["Retry-After"] = str(fault.retry_after)
        return reply

    # --- the control panel -------------------------------------------------------------
    def _control(self, request: Request) -> Reply:
        parts = [p for p in request.path.split("/") if p][1:]
        try:
            reply = self._common_control(request, parts) or self.control(request, parts)
        except (ValueError, TypeError, KeyError, json.JSONDecodeError) as bad:
            return json_reply(400, {"error": f"{type(bad).__name__}: {bad}"})
        return reply or json_reply(404, {"error": f"no control endpoint {request.path}"})

    def _common_control(self, request: Request, parts: list[str]) -> Reply | None:
        what = (request.method, *parts)
        if what == ("GET", "health"):
            return json_reply(200, {"ok": True, "api": self.name})
        if what == ("POST", "faults"):
            data = request.json()
            for item in data if isinstance(data, list) else [data]:
                self.faults.add(Fault.from_json(item))
            return json_reply(200, {"pending": self.faults.pending()})
        if what == ("GET", "faults"):
            return json_reply(200, {"pending": self.faults.pending()})
        if what == ("DELETE", "faults"):
            self.faults.clear()
            return json_reply(200, {"pending": []})
        if what == ("GET", "requests"):
            with self.lock:
                return json_reply(200, {"requests": list(self.requests)})
        if what == ("DELETE", "requests"):
            with self.lock:
                self.requests.clear()
            return json_reply(200, {"requests": []})
        if what == ("POST", "knobs"):
            with self.lock:
                self.knobs.update(request.json())
        if what in (("POST", "knobs"), ("GET", "knobs")):
            return json_reply(200, self.knobs.as_json())
        return None


def _reply_json(reply: Reply) -> Any:
    """What the fake answered, as JSON (a test checks it against the cloud's own schema), or
    None for a body that is not JSON (a proxy's HTML page, Vast's plain-text 429)."""
    try:
        return json.loads(reply.body or b"null")
    except ValueError:
        return None


def _loggable(request: Request) -> Any:
    try:
        return request.json()
    except ValueError:
        return request.body.decode(errors="replace")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    wbufsize = -1  # one write per reply: split header/body writes meet delayed ACKs (40 ms)
    server: FakeServer

    def _serve(self) -> None:
        url = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        request = Request(
            method=self.command,
            path=url.path,
            query={k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()},
            headers={k.lower(): v for k, v in self.headers.items()},
            body=self.rfile.read(length) if length else b"",
        )
        reply = self.server.api.dispatch(request)
        if reply is None:
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.send_response(reply.status)
        for key, value in reply.headers.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(reply.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(reply.body)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _serve

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)


class FakeServer(ThreadingHTTPServer):
    """Loopback only: the fakes must never be reachable from outside this machine."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, api: FakeApi, port: int = 0, *, verbose: bool = False) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.api = api
        self.verbose = verbose

    @property
    def port(self) -> int:
        return self.server_address[1]
