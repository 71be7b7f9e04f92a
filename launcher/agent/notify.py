"""Webhook notifications of a job's end: one JSON POST per event, posted by the agent of node
0 on the job's host (so they come while the submitting machine sleeps; a local job's agent
is a process of this machine), and by the recovery controller for `recovered`. Standard
library only; shipped beside the agent when the job has `notify:`.

The body has `text` (Slack's incoming webhooks) and `content` (Discord's), both the same
message: the job, the event, its reason, its cost so far and its log's last lines. A URL is
a secret: it comes on the start's stdin (or, under SLURM, in a 0600 file the agent deletes
once read) and is never written to a log, a status or an error message: a failure names the
variable it came from. Retried with backoff in a thread of its own, after the job's end is
recorded: a webhook that does not answer never holds up the job or its status.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

EVENTS = ("succeeded", "failed", "timed_out", "cancelled", "recovered")
"""What a `notify:` entry may name under `on:`: the agent's end states (`timed out` as
`timed_out`) and the recovery controller's restart."""
TRIES = 5
FIRST_DELAY_S = 1.0
TIMEOUT_S = 10.0
WAIT_S = 60.0
"""How long the supervisor waits for its posts before it exits (they run in a thread)."""
LINES = 10
LIMIT = 1900
"""Discord refuses a `content` over 2000 characters."""


@dataclass(frozen=True)
class Hook:
    """One webhook: the variable its URL came from (what logs name) and its events."""

    env: str
    on: tuple[str, ...]
    url: str


def hooks_of(entries: list[dict[str, Any]], urls: dict[str, str]) -> list[Hook]:
    """job.json's `notify.hooks` (names and events) joined with their URLs (from stdin)."""
    return [Hook(e["env"], tuple(e.get("on", EVENTS)), urls[e["env"]]) for e in entries
            if urls.get(e["env"])]  # fmt: skip


def event_of(state: str) -> str:
    return state.replace(" ", "_")


def message(job_id: str, event: str, reason: str | None, cost: str | None,
            lines: list[str]) -> dict[str, str]:  # fmt: skip
    """Slack reads `text`, Discord `content`; both get the same words."""
    parts = [f"gpujob: job {job_id} {event.replace('_', ' ')}"]
    parts += [f"reason: {reason}"] * bool(reason) + [f"cost so far: {cost}"] * bool(cost)
    if lines:
        parts.append("last lines:\n```\n" + "\n".join(lines)[-LIMIT // 2 :] + "\n```")
    text = "\n".join(parts)[:LIMIT]
    return {"text": text, "content": text, "job_id": job_id, "event": event}


def post(
    url: str, body: dict[str, str], tries: int = TRIES, delay_s: float = FIRST_DELAY_S
) -> str | None:
    """POST `body` as JSON, retried with doubling delays; None once delivered, else why
    (never the URL: it is a secret). A 4xx other than 429 is not tried again."""
    import urllib.error  # here, not above: `submit` imports EVENTS from this module, and
    import urllib.request  # urllib.request brings http.client and ssl (issue 32)

    data = json.dumps(body).encode()
    why = "not tried"
    for attempt in range(1, tries + 1):
        request = urllib.request.Request(url, data=data, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "gpujob-agent"})  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
                reply.read()
                return None
        except urllib.error.HTTPError as err:
            why = f"HTTP {err.code}"
            if 400 <= err.code < 500 and err.code != 429:
                return f"{why} (not tried again)"
        except urllib.error.URLError as err:
            why = str(err.reason)
        except (OSError, ValueError) as err:  # ValueError's text may quote the URL
            why = type(err).__name__
        if attempt < tries:
            time.sleep(delay_s * 2 ** (attempt - 1))
    return f"{why} after {tries} tries"


def send(hooks: list[Hook], event: str, body: dict[str, str],
         say: Callable[[str], None]) -> threading.Thread | None:  # fmt: skip
    """Post to every hook that asked for `event`, each in a thread of its own (one whose
    endpoint never answers does not hold up the others), under one thread that waits for
    them all; None when none asked."""
    wanted = [hook for hook in hooks if event in hook.on]
    if not wanted:
        return None

    def one(hook: Hook) -> None:
        why = post(hook.url, body)
        said = f"not delivered: {why}" if why else "delivered"
        say(f"notify: {event} to the webhook in ${hook.env} {said}")

    def run() -> None:
        posts = [threading.Thread(target=one, args=(hook,), daemon=True) for hook in wanted]
        for thread in posts:
            thread.start()
        for thread in posts:
            thread.join()

    thread = threading.Thread(target=run, name="gpujob-notify", daemon=True)
    thread.start()
    return thread


def tail_lines(path: Path, count: int = LINES) -> list[str]:
    """The log's last non-blank lines, agent lines left out (they are gpujob's own)."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 8192))
            text = log.read().decode(errors="replace")
    except OSError:
        return []
    lines = [ln.rstrip("\r").rsplit("\r", 1)[-1][-300:] for ln in text.splitlines()]
    return [ln for ln in lines if ln.strip() and not ln.startswith("[gpujob-agent]")][-count:]


def cost_so_far(price_per_hour: float | None, started: float | None, ended: float | None) -> str:
    hours = max(0.0, (ended or time.time()) - (started or time.time())) / 3600
    if price_per_hour is None:
        return f"{hours:.2f} h (no price recorded for this host)"
    if not price_per_hour:
        return f"$0.00 ({hours:.2f} h on a machine with no rent)"
    return f"${price_per_hour * hours:.2f} ({hours:.2f} h at ${price_per_hour:g}/h)"


def notify_end(node_dir: Path, config: dict[str, Any], urls: dict[str, str] | None,
               status: dict[str, Any], say: Callable[[str], None]) -> None:  # fmt: skip
    """The node's end posted to the hooks that asked for it (node 0 only: its job.json alone
    has `notify`); waits up to WAIT_S for the posts, the job's end already recorded."""
    care = config.get("notify")
    if not care:
        return
    event = event_of(str(status.get("state")))
    lines = tail_lines(node_dir / config.get("log", "job.log"))
    cost = cost_so_far(care.get("price_per_hour"), status.get("started_at"), status.get("ended_at"))
    code = status.get("exit_code")
    reason = status.get("reason") or (f"exit code {code}" if code else None)
    body = message(str(config.get("job_id")), event, reason, cost, lines)
    thread = send(hooks_of(care.get("hooks", []), urls or {}), event, body, say)
    if thread is not None:
        thread.join(WAIT_S)
