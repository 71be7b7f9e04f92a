"""The call a host makes to end itself, and the read-back that confirms it, for the autostop
watcher (autostop.py, shipped beside it). Standard library only.

The key is read at the moment of the call from its 0600 file: Lambda's is the user's key,
which `up --autostop-key-on-host` put there; Vast's is the instance's own
`CONTAINER_API_KEY`, which gpujob's onstart copies there (providers/vast.py), or else PID 1's
environment, where Vast puts it. It goes into the Authorization header and nowhere else.

What the cloud answers to the call does not end the watch: a 404 may be a proxy's missing
route, and a 2xx a call the cloud took and then dropped. The instance is read back, and only
the cloud reporting it terminating, terminated or gone (stopped, for a stop) ends it.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

CALL_TIMEOUT_S = 30.0
VAST_KEY, VAST_ID = "CONTAINER_API_KEY", "CONTAINER_ID"
LAMBDA_GONE = "global/object-does-not-exist"  # Lambda's 404 for an id it no longer knows
VAST_GONE = "no_such_instance"


class CallFailed(Exception):
    """The cloud did not take the call, or did not say it ended the instance; the message
    is what it answered (never the key)."""


def url_problem(url: object) -> str | None:
    """Why the API URL a host calls cannot work, or None: urllib takes only an absolute
    http(s) URL, and anything else would fail at every call, for ever."""
    parts = urllib.parse.urlsplit(str(url or ""))
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"{url!r} is not an http:// or https:// URL"
    return None


def _environ_file(path: str, name: str) -> str | None:
    """`name` from a NUL- or newline-separated environment file (/proc/1/environ, or
    /etc/environment, where gpujob's Vast onstart copies the container's variables)."""
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return None
    for line in raw.replace(b"\0", b"\n").decode(errors="replace").splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.removeprefix("export ").strip() == name:
            return value.strip().strip("'\"") or None
    return None


def vast_variable(name: str) -> str | None:
    """A variable Vast puts in the container's environment, which an SSH session (and so
    this watcher) does not inherit: ours, PID 1's, or /etc/environment (the instance id;
    the onstart leaves the key out of that world-readable copy)."""
    return (os.environ.get(name) or _environ_file("/proc/1/environ", name)
            or _environ_file("/etc/environment", name))  # fmt: skip


def api_key(config: dict[str, Any]) -> str:
    path = config.get("key_file")
    key = ""
    if path:
        try:
            key = Path(path).read_text().strip()
        except FileNotFoundError:
            if not _calls(config).key_from_instance:
                raise CallFailed(f"cannot read {path}: it is not there") from None
        except OSError as err:
            raise CallFailed(f"cannot read {path}: {err.strerror}") from None
    if not key and _calls(config).key_from_instance:  # onstart has not copied it (yet)
        key = _environ_file("/proc/1/environ", VAST_KEY) or ""
    if not key:
        raise CallFailed(f"no API key ({path or VAST_KEY} is empty or absent"
                         + (f", and the instance has no {VAST_KEY})"
                            if _calls(config).key_from_instance else ")"))  # fmt: skip
    return key


def _instance(config: dict[str, Any]) -> str:
    return str(config.get("instance_id") or vast_variable(VAST_ID) or "")


def request_for(config: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(method, url, body) of the call that ends this instance."""
    url, instance = str(config["api_url"]).rstrip("/"), _instance(config)
    return _calls(config).end(url, instance, config["action"])


def read_url(config: dict[str, Any]) -> str:
    """Where the cloud shows this one instance (Lambda GET /instances/{id}, Vast GET
    /instances/{id}/, which the instance's own key may read)."""
    url, instance = str(config["api_url"]).rstrip("/"), _instance(config)
    return _calls(config).read_url(url, instance)


def _send(method: str, url: str, body: dict[str, Any] | None, key: str) -> tuple[int, str]:
    """One exchange: the status and the text, an error status included. CallFailed when no
    answer came (no route, a timeout, a cut answer) or the URL cannot be sent to at all."""
    try:
        request = urllib.request.Request(
            url, data=None if body is None else json.dumps(body).encode(), method=method,
            headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json",
                     "User-Agent": "gpujob-autostop/1"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=CALL_TIMEOUT_S) as reply:
            return reply.status, reply.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")
    except Exception as error:  # no answer, a cut one, a bad URL: try again later
        raise CallFailed(f"{method} {url}: {type(error).__name__}: {error}") from None


def _json(text: str) -> dict[str, Any]:
    try:
        answer = json.loads(text or "{}")
    except ValueError:
        return {}
    return answer if isinstance(answer, dict) else {}


def call_cloud(config: dict[str, Any]) -> str:
    """Send the call; what the cloud answered when it took it (a 2xx without `success:
    false`). Taken is not yet ended: `read_back` says whether it was."""
    method, url, body = request_for(config)
    status, text = _send(method, url, body, api_key(config))
    if not 200 <= status < 300 or _json(text).get("success") is False:
        raise CallFailed(f"{method} {url} answered {status}: {text[:300]}")
    return f"{method} {url} answered {status}"


def read_back(config: dict[str, Any]) -> tuple[bool, str]:
    """The instance as the cloud shows it now: (ended, in words). Only the cloud's own word
    for the instance counts: Lambda's `object-does-not-exist` or a terminating/terminated
    status; Vast's `{"instances": null}`, `no_such_instance` or a destroyed (for a stop: a
    stopped) instance. Anything else (another 404, a 401) raises CallFailed."""
    url = read_url(config)
    status, text = _send("GET", url, None, api_key(config))
    verdict = _calls(config).ended(status, _json(text), config["action"])
    if verdict is None:
        raise CallFailed(f"GET {url} answered {status}: {text[:300]}")
    return verdict


def dry_call(config: dict[str, Any]) -> str:
    """Before the watch starts: the key is there and the cloud takes it for this instance,
    by a read of the instance (which changes nothing) that shows it not yet ended. A
    watcher that could never end its host is refused there, not started: it would retry
    for ever while the host bills (issue 30: a Vast container without CONTAINER_API_KEY)."""
    url = read_url(config)
    status, text = _send("GET", url, None, api_key(config))
    verdict = _calls(config).ended(status, _json(text), config["action"])
    if verdict is None:
        raise CallFailed(f"GET {url} with its key answered {status}: {text[:300]}")
    if verdict[0]:
        raise CallFailed(f"the cloud shows the instance ended already ({verdict[1]})")
    return f"GET {url} answered {status}: {verdict[1]}"


def _lambda_end(url: str, instance: str, action: str) -> tuple[str, str, dict[str, Any]]:
    return "POST", f"{url}/instance-operations/terminate", {"instance_ids": [instance]}


def _vast_end(url: str, instance: str, action: str) -> tuple[str, str, dict[str, Any]]:
    if action == "stop":
        return "PUT", f"{url}/instances/{instance}/", {"state": "stopped"}
    return "DELETE", f"{url}/instances/{instance}/", {}


def _lambda_ended(status: int, answer: dict[str, Any], action: str) -> tuple[bool, str] | None:
    error = answer.get("error")
    if status == 404 and isinstance(error, dict) and error.get("code") == LAMBDA_GONE:
        return True, "gone (404 object-does-not-exist)"
    found = answer.get("data") if status == 200 else None
    if isinstance(found, dict) and found.get("status"):
        return found["status"] in ("terminating", "terminated"), str(found["status"])
    return None


def _vast_ended(status: int, answer: dict[str, Any], action: str) -> tuple[bool, str] | None:
    if status == 404 and answer.get("error") == VAST_GONE:
        return True, f"gone (404 {VAST_GONE})"
    if status == 200 and "instances" in answer:
        found = answer["instances"]
        if found is None:
            return True, "gone (no such instance)"
        if isinstance(found, dict):
            actual, intended = found.get("actual_status"), found.get("intended_status")
            said = f"actual_status {actual}, intended_status {intended}"
            if actual == "destroyed" or found.get("cur_state") == "unloaded":
                return True, said
            return action == "stop" and "stopped" in (actual, intended), said
    return None


class CloudCalls(NamedTuple):
    """One cloud's calls, as the watcher makes them: the end of the instance, where it is
    read back, the cloud's word that it ended, and whether the instance's own environment
    carries the key (Vast's CONTAINER_API_KEY)."""

    end: Callable[[str, str, str], tuple[str, str, dict[str, Any]]]
    read_url: Callable[[str, str], str]
    ended: Callable[[int, dict[str, Any], str], tuple[bool, str] | None]
    key_from_instance: bool


CLOUD_CALLS = {
    "lambda": CloudCalls(_lambda_end, lambda url, i: f"{url}/instances/{i}", _lambda_ended, False),
    "vast": CloudCalls(_vast_end, lambda url, i: f"{url}/instances/{i}/", _vast_ended, True),
}
"""By the cloud the watcher's config names (`provider`): a new cloud is one entry here."""


def _calls(config: dict[str, Any]) -> CloudCalls:
    try:
        return CLOUD_CALLS[str(config.get("provider"))]
    except KeyError:
        raise CallFailed(f"no calls for cloud {config.get('provider')!r}") from None


def end_instance(config: dict[str, Any]) -> str:
    """The call, then the read-back: what the cloud said once it shows the instance ended.
    CallFailed until it does. The instance is read back after a failed call too: a call
    whose answer was lost, or one sent again while the instance is already terminating
    (Lambda answers that with an error), may have ended it."""
    try:
        said = call_cloud(config)
    except CallFailed as failed:
        said = str(failed)
    try:
        ended, shown = read_back(config)
    except CallFailed as unread:
        raise CallFailed(f"{said}; reading the instance back: {unread}") from None
    if not ended:
        raise CallFailed(f"{said}; the cloud still shows the instance {shown}")
    return f"{said}; the cloud shows the instance {shown}"
