"""The job's webhooks (`notify:` in the spec and in the user config), with their URLs read
from the submitting user's environment: what node 0's agent posts the job's end to
(agent/notify.py), and what the recovery controller tells of a restart.

A URL is a secret: it is checked here (set, http or https) and never shown; a refusal names
the variable and where it was asked for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from launcher.errors import UsageError
from launcher.say import say

if TYPE_CHECKING:
    from launcher.agent.notify import Hook
    from launcher.spec.load import LoadedSpec
    from launcher.spec.notify import NotifySpec

CONFIG_EXAMPLE = "notify: [{webhook_env: SLACK_URL, on: [failed, succeeded]}]"


def notify_hooks(loaded: LoadedSpec) -> tuple[Hook, ...]:
    """The spec's entries, then the user config's; one hook per variable, its events merged."""
    from launcher.spec.env_flags import flag_environ

    asked = [(entry, loaded.where("notify", index)) for index, entry in
             enumerate(loaded.spec.notify)] + config_notify()  # fmt: skip
    environ = flag_environ()
    events: dict[str, set[str]] = {}
    urls: dict[str, str] = {}
    for entry, where in asked:
        name = entry.webhook_env
        url = environ.get(name, "")
        if not url:
            raise UsageError(
                f"{where}: notify: {name} is not set in your environment",
                f"export {name}=https://... (the webhook's URL) before submitting; its value is "
                "never written to the spec, a command line or a log",
            )
        if not url.startswith(("https://", "http://")):
            raise UsageError(f"{where}: notify: ${name} is not an http(s) URL (its value "
                             "is not shown: a secret)", f"export {name}=https://...")  # fmt: skip
        urls[name] = url
        events.setdefault(name, set()).update(entry.on)
    if not urls:
        return ()  # a job without webhooks: no import of the agent's poster (urllib, ssl)
    from launcher.agent.notify import EVENTS, Hook

    return tuple(Hook(name, tuple(e for e in EVENTS if e in events[name]), urls[name])
                 for name in urls)  # fmt: skip


def config_notify() -> list[tuple[NotifySpec, str]]:
    """`notify:` in the user config, each entry with its FILE:LINE; a bad one is one line
    naming them."""
    from launcher.paths import config_file

    path = config_file()
    if not path.is_file():
        return []
    import yaml
    from pydantic import ValidationError

    from launcher.spec.notify import NotifySpec
    from launcher.spec.yaml_lines import record_lines

    text = path.read_text()
    try:
        node, data = yaml.compose(text, Loader=yaml.SafeLoader), yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise UsageError(f"{path}: YAML syntax error: {err}".split("\n")[0]) from None
    if not isinstance(data, dict) or data.get("notify") is None:
        return []
    lines: dict[tuple[str | int, ...], int] = {}
    record_lines(node, (), lines)
    body: Any = data["notify"]
    if not isinstance(body, list):
        where = f"{path}:{lines.get(('notify',), 1)}"
        raise UsageError(f"{where}: notify: expected a list of webhooks", f"e.g. {CONFIG_EXAMPLE}")
    found = []
    for index, item in enumerate(body):
        where = f"{path}:{lines.get(('notify', index), 1)}"
        try:
            found.append((NotifySpec.model_validate(item), where))
        except ValidationError as err:
            first = err.errors()[0]
            line = lines.get(("notify", index, *first["loc"][:1]))
            where = f"{path}:{line}" if line else where
            field = ".".join(str(p) for p in ("notify", index, *first["loc"]))
            message = first["msg"].removeprefix("Value error, ")
            raise UsageError(f"{where}: {field}: {message}", f"e.g. {CONFIG_EXAMPLE}") from None
    return found


def tell(hooks: tuple[Hook, ...], job_id: str, event: str, reason: str, cost: str | None) -> None:
    """From this machine (the recovery controller's `recovered`): posted and waited for,
    retried as the agent's are; the outcome is one line of the caller's log."""
    from launcher.agent.notify import message, send

    thread = send(list(hooks), event, message(job_id, event, reason, cost, []), say)
    if thread is not None:
        thread.join()
