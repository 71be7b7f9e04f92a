"""`up --autostop` on this machine's side: what is refused before anything is rented, what
`up` says, each host's watcher setup (the watcher itself runs on the host:
launcher/agent/autostop.py), and the `autostop` column of `gpujob status`.

The refusals come before the first cloud call: a machine you have (`up --host`) has no API
to end it (nor a price: `--max-cost` is refused there too), a host API URL that is not
http(s) would fail every call the host makes, and on Lambda, which has no key scoped to one
instance, the host can end itself only with the user's own key, which goes there only when
`--autostop-key-on-host` says so.

Each host's watcher comes with a hold (bootstrap.autostop): the command removes it when it
hands its hosts over (`release_holds`, one SSH command per host).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from launcher.errors import UsageError

if TYPE_CHECKING:
    from launcher.bootstrap.autostop import AutostopSetup
    from launcher.clouds.base import Instance, Provider
    from launcher.state.hosts import HostsDB
    from launcher.targets.cloud.hosts import UpOptions

KEY_VARIABLE = {"lambda": "LAMBDA_API_KEY"}
HOLD_MARGIN_S = 600.0


def start_bound_s(timeout_s: float) -> float:
    """The longest a rented host bills before its autostop window can start: the wait for
    SSH (`--timeout`), then its hold (`--timeout` + the margin) if gpujob dies before the
    hand-over; the cost budget counts it whole."""
    return 2 * timeout_s + HOLD_MARGIN_S


"""A hold lasts the renting command's --timeout and this: the longest the command may still
need a host after its bootstrap (the other hosts' boot, a job's preparation)."""


def window_seconds(text: str | None) -> float | None:
    """`--autostop 30m` (or `90s`, `2h`, plain seconds) in seconds; a bad one is refused."""
    if text is None:
        return None
    from launcher.spec.limits import parse_duration

    try:
        return parse_duration(text)
    except ValueError as bad:
        raise UsageError(f"--autostop {text}: {bad}", "e.g. --autostop 30m") from None


def check_autostop(options: UpOptions) -> None:
    """Refuse, in one line and before anything is rented, what autostop cannot do."""
    from launcher.clouds.registry import trait

    if options.autostop_s is None:
        if options.autostop_stop or options.autostop_key_on_host:
            flag = "--autostop-stop" if options.autostop_stop else "--autostop-key-on-host"
            raise UsageError(f"{flag} goes with an autostop window",
                             "add `--autostop 30m` to up (resources.autostop for submit --up), "
                             "or leave it out")  # fmt: skip
        return
    if not options.bootstrap:
        raise UsageError("--autostop is installed by the bootstrap; --no-bootstrap skips it",
                         "leave out --no-bootstrap, or --autostop")  # fmt: skip
    if trait(options.provider, "autostop_key", None) == "user" and not options.autostop_key_on_host:
        variable = KEY_VARIABLE.get(options.provider, "API key")
        raise UsageError(
            f"--autostop on {options.provider}: the host can end itself only with your "
            f"{variable}, kept in a 0600 file on it; nothing was rented",
            "add --autostop-key-on-host to allow that, or leave out --autostop and end the "
            "host with `gpujob down`",
        )


def check_host_api(provider: Provider, options: UpOptions) -> None:
    """The API URL the hosts will call to end themselves (GPUJOB_<CLOUD>_HOST_API_URL, else
    the API's own): refused before the first cloud call unless it is http(s), or every
    call from the host would fail and the host would bill for ever."""
    if options.autostop_s is None:
        return
    from launcher.agent.autostop_call import url_problem

    problem = url_problem(provider.autostop_call("", down=True).api_url)
    if problem:
        name = provider.name.upper()
        raise UsageError(
            f"--autostop: the API URL {provider.name} hosts would call to end themselves, "
            f"{problem} (GPUJOB_{name}_HOST_API_URL, else GPUJOB_{name}_API_URL); nothing "
            "was rented",
            f"set GPUJOB_{name}_HOST_API_URL to an http(s) URL the hosts reach, or unset it",
        )


def refuse_on_static_host(options: UpOptions) -> None:
    """`up --host`: the options about renting mean nothing for a machine you have; each is
    refused rather than ignored."""
    if options.autostop_s is not None:
        raise UsageError(
            "--autostop is for hosts gpujob rents: a machine you have (--host) has no cloud "
            "API that could end it",
            "leave out --autostop, or rent one: gpujob up GPU --autostop 30m",
        )
    for flag, given in (("--autostop-stop", options.autostop_stop),
                        ("--autostop-key-on-host", options.autostop_key_on_host),
                        ("--max-cost", options.max_cost is not None)):  # fmt: skip
        if given:
            raise UsageError(f"{flag} is for hosts gpujob rents; --host names a machine you "
                             "have, which nothing rents or ends",
                             f"leave out {flag}: it applies to a host `gpujob up GPU` "
                             "rents")  # fmt: skip


def announce(options: UpOptions, say: Callable[[str], None]) -> None:
    """What `up` (and `submit --up`) says about autostop before it rents: the window and
    the call, and, on Lambda, where the user's key goes and who can read it there."""
    from launcher.clouds.registry import trait
    from launcher.spec.limits import show_duration

    if options.autostop_s is None:
        return
    stops = options.autostop_stop and bool(trait(options.provider, "can_stop", False))
    would = "dry run: would install" if options.dry_run else "the bootstrap installs"
    say(f"autostop: {would} a watcher on each host that "
        f"{'stops' if stops else 'terminates'} it after {show_duration(options.autostop_s)} "
        "with no gpujob job running and no SSH session, from the host itself (also when "
        "this machine is off)")  # fmt: skip
    if options.autostop_stop and not stops:
        say(f"autostop: {options.provider} cannot stop an instance; it is terminated instead")
    if trait(options.provider, "autostop_key", None) == "user":
        say(f"autostop: your {KEY_VARIABLE.get(options.provider, 'API key')} "
            f"{'would be' if options.dry_run else 'is'} written to ~/.gpujob/autostop/api-key "
            "on each host, mode 0600: readable there by the login user and root only, and "
            "never on a command line, in an environment or in a log")  # fmt: skip


def setup_for(provider: Provider, inst: Instance, options: UpOptions) -> AutostopSetup | None:
    """The watcher one host gets, or None without --autostop."""
    if options.autostop_s is None:
        return None
    from launcher.bootstrap.autostop import AutostopSetup

    call = provider.autostop_call(inst.id, down=not options.autostop_stop)
    return AutostopSetup(options.autostop_s, call, hold_s=options.timeout + HOLD_MARGIN_S,
                         held_by=f"gpujob {options.renting}")  # fmt: skip


def release_holds(hosts: list[Instance], say: Callable[[str], None]) -> None:
    """The hand-over: each host's hold removed, one SSH command each, on the connection
    the command already has. A host that cannot be reached keeps its hold until it
    expires, then its window runs: said, and the command goes on."""
    from launcher.bootstrap.autostop import FOLDER, HOLD_FILE
    from launcher.errors import GpujobError
    from launcher.remote.hosts import connect, instance_entry

    for inst in hosts:
        try:
            conn = connect(instance_entry(inst))
            try:
                done = conn.run(["rm", "-f", f"{FOLDER}/{HOLD_FILE}"])  # from the login's home
            finally:
                conn.close()
            said = None if done.ok else (done.stderr.strip() or f"exit {done.exit_code}")
        except (GpujobError, OSError) as err:
            said = err.one_line() if isinstance(err, GpujobError) else str(err)
        if said:
            say(f"autostop: could not release the hold on {inst.name} ({said}); its window "
                "starts when the hold expires")  # fmt: skip


def record(db: HostsDB, provider: Provider, inst: Instance, options: UpOptions) -> None:
    """The host's window and action in the hosts db, once its watcher runs."""
    setup = setup_for(provider, inst, options)
    if setup is not None:
        db.set_autostop(inst.name, setup.idle_s, setup.call.action)


# -- gpujob status ---------------------------------------------------------------------------


def with_autostop(rows: list[dict[str, object]]) -> list[dict[str, object]]:
    """Each host row's `autostop` (`30m idle -> terminate; ...`) and, where the host answers
    cheaply (a master connection to it is up: one channel, no handshake), its deadline read
    from the watcher's state there; otherwise the deadline is said to be unknown. Reading it
    is not activity: the watcher ignores readers of its own folder."""
    for row in rows:
        recorded = row.get("autostop")
        if not isinstance(recorded, dict):
            continue
        state = _host_state(row)
        recorded.update(deadline=state.get("deadline"), idle_since=state.get("idle_since"),
                        busy=state.get("busy"), read=bool(state))  # fmt: skip
        row["autostop_text"] = autostop_text(recorded, state, time.time())
    return rows


def autostop_text(recorded: dict[str, Any], state: dict[str, Any], now: float) -> str:
    """The status column: the window, then what the host said, or that it was not asked."""
    from launcher.spec.limits import show_duration

    head = f"{show_duration(float(recorded['idle_s']))} idle -> {recorded['action']}"
    if not state:
        return f"{head}; idle since unknown (not connected)"
    if state.get("state") in ("ending", "retrying", "ended"):
        return f"{head}; ending now ({state['state']})"
    if state.get("busy"):
        return f"{head}; busy: {state['busy']}"
    deadline = state.get("deadline")
    if deadline is None:
        return f"{head}; idle since unknown"
    left = max(0.0, float(deadline) - float(state.get("checked_at") or now))
    clock = time.strftime("%H:%M:%S", time.localtime(float(deadline)))
    return f"{head}; ends at {clock} (in {show_duration(round(left)) if left else '0s'})"


def _host_state(row: dict[str, Any]) -> dict[str, Any]:
    """The watcher's state over a master connection that is already up, else {}."""
    import json

    from launcher.errors import GpujobError
    from launcher.remote.hosts import connect, rented_host

    entry = rented_host(str(row["name"]))
    if entry is None:
        return {}
    try:
        conn = connect(entry)
        if not conn.client.master_alive():
            return {}
        from launcher.bootstrap.autostop import FOLDER

        done = conn.run(["cat", f"{FOLDER}/state.json"])  # from the login's home
    except (GpujobError, OSError):
        return {}
    try:
        found = json.loads(done.stdout) if done.ok else {}
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}
