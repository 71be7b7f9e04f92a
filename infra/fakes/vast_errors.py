"""How the Vast fake says no: `{"success": false, "error", "msg"}` (reference §6), the three
429 bodies (plain text, `{"detail"}`, JSON error) and never a `Retry-After`, and non-JSON
bodies for 5xx as a proxy or a crashing server sends them.
"""

from __future__ import annotations

from typing import Any

from infra.fakes.server import ApiError, Reply, json_reply, text_reply

DEFAULT_CODE = {400: "invalid_args", 401: "auth_error", 403: "not_authorized", 404: "not_found",
                410: "no_such_ask", 429: "text"}  # fmt: skip
DEFAULT_MSG = {"auth_error": "Invalid user key", "not_authorized": "Not authorized.",
               "not_found": "Not found."}  # fmt: skip
RATE_VARIANTS = ("text", "detail", "rate_limit_exceeded")


def error_reply(status: int, code: str | None = None, message: str | None = None,
                **extra: Any) -> Reply:  # fmt: skip
    code = code or DEFAULT_CODE.get(status)
    if status == 429:
        return rate_limited(code or "text", message)
    if code is None:  # 5xx without a code: what a proxy or a crashed worker sends
        if status == 500:
            return text_reply(500, "Internal Server Error")
        return text_reply(status, f"<html><body><h1>{status}</h1></body></html>", "text/html")
    msg = message or DEFAULT_MSG.get(code, code)
    return json_reply(status, {"success": False, "error": code, "msg": msg, **extra})


def fail(status: int, code: str | None = None, message: str | None = None,
         **extra: Any) -> ApiError:  # fmt: skip
    return ApiError(error_reply(status, code, message, **extra))


def rate_limited(variant: str, message: str | None = None, threshold: float = 2.0) -> Reply:
    """`variant`: "text" (plain text), "detail" ({"detail": ...}) or "rate_limit_exceeded"."""
    if variant == "detail":
        text = message or f"API requests too frequent endpoint threshold={threshold}"
        return json_reply(429, {"detail": text})
    if variant == "rate_limit_exceeded":
        text = message or f"API requests too frequent endpoint threshold={threshold}"
        return json_reply(429, {"success": False, "error": "rate_limit_exceeded", "msg": text})
    return text_reply(429, message or f"API requests too frequent: endpoint threshold={threshold}")
