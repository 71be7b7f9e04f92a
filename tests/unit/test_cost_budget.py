"""The cost budget: the arithmetic, `up` and `submit --up` refusing a rental whose price
over its bound passes the budget (with nothing launched: the fakes' request logs say so),
the budget from the user config, the dry run's cost line, and `status` warning about a host
whose cost so far passed the budget it was rented under."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clouds import BannerBackend, BannerServer, calls, lambda_instances, point_at

from infra.fakes import RunningFake, serve_lambda
from infra.fakes.null_backend import NullBackend
from launcher.errors import UsageError
from launcher.targets.cloud.cost import Budget, clear_cost, rental_bound

FLAG = Budget(10.0, "--max-cost", "raise --max-cost")
A100 = 1.29  # the Lambda fake's 1x A100, $/hour


BOOT = 3000.0  # the start at `--timeout`'s default: 20 min of boot + 30 min of hold


@pytest.mark.parametrize(("budget", "hosts", "price", "duration", "autostop", "said"), [
    (FLAG, 2, 1.29, 8 * 3600, 1800,
     "--max-cost $10.00: 2 x $1.29/h x 9.33h (start 50m + max_duration 8h + autostop 30m) = "
     "$24.08. lower the time limit or the autostop window, or raise --max-cost"),
    (FLAG, 1, 2.0, None, 6 * 3600,
     "--max-cost $10.00: 1 x $2.00/h x 6.83h (start 50m + autostop 6h) = $13.67"),
    (FLAG, 1, 1.2501, None, 8 * 3600, "1 x $1.2501/h x 8.83h (start 50m + autostop 8h) = $11.04"),
    (FLAG, 3, 1.0, 3600, None, "--max-cost $10.00: nothing ends the hosts once the command"),
], ids=["two-hosts", "autostop-only", "sub-cent-price", "max-duration-is-no-bound"])  # fmt: skip
def test_a_rental_over_its_budget_is_refused_with_the_arithmetic(
    budget: Budget, hosts: int, price: float, duration: float | None, autostop: float | None,
    said: str,
) -> None:  # fmt: skip
    with pytest.raises(UsageError) as refused:
        clear_cost(budget, hosts, price, rental_bound(BOOT, duration, autostop))
    assert said in refused.value.one_line()


@pytest.mark.parametrize(("budget", "hosts", "autostop", "line", "max_price"), [
    (FLAG, 1, 3600,
     "cost: at most 1 x $1.29/h x 1.83h (start 50m + autostop 1h) = $2.37, within --max-cost "
     "$10.00", 10 / (11 / 6)),
    (FLAG, 2, 3600, "= $4.73, within --max-cost $10.00", 5 / (11 / 6)),
    (None, 2, 3600, "cost: at most 2 x $1.29/h x 1.83h (start 50m + autostop 1h) = $4.73", None),
    (None, 2, None, None, None),
], ids=["within", "two-hosts-within", "no-budget", "nothing-to-say"])  # fmt: skip
def test_a_rental_within_its_budget_says_what_it_costs_at_most(
    budget: Budget | None, hosts: int, autostop: float | None, line: str | None,
    max_price: float | None,
) -> None:  # fmt: skip
    cleared = clear_cost(budget, hosts, A100, rental_bound(BOOT, None, autostop))
    if line is None:
        assert cleared.line is None
    else:
        assert cleared.line is not None and line in cleared.line
    # the highest $/hour a fallback offer may cost and still keep the budget
    assert cleared.max_price == (pytest.approx(max_price) if max_price else None)


def test_the_price_cap_never_excludes_the_offer_just_cleared() -> None:
    """3 x $0.52/h x 1.5h = $2.34 exactly: the budget allows it, and the cap a launch gets
    must still admit $0.52 (the exact share, 0.5199999..., would not)."""
    bound = rental_bound(None, None, 1.5 * 3600)
    cleared = clear_cost(Budget(2.34, "--max-cost", "raise --max-cost"), 3, 0.52, bound)
    assert cleared.max_price is not None and cleared.max_price >= 0.52


@pytest.fixture
def lam(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, state_dir: Path) -> Iterator[RunningFake]:
    fake = serve_lambda(NullBackend())
    point_at(monkeypatch, tmp_path, lam=fake)
    monkeypatch.setenv("GPUJOB_CONFIG_DIR", str(tmp_path / "config"))
    yield fake
    fake.stop()


def job(tmp_path: Path, extra: str = "") -> Path:
    (tmp_path / "work").mkdir(exist_ok=True)
    (tmp_path / "work" / "train.py").write_text("print('hi')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\nimage: host\nworkdir: work\nrun: {entrypoint: train.py}\n" + extra)
    return spec


def nothing_launched(fake: RunningFake) -> None:
    assert calls(fake, "launch") == []
    assert lambda_instances(fake) == []


def test_submit_up_over_the_budget_is_refused_before_the_launch(
    lam: RunningFake, gpujob: Callable, tmp_path: Path
) -> None:
    spec = job(tmp_path, "nodes: 2\nmax_duration: 8h\nresources: {autostop: {idle_minutes: 30}}\n")
    done = gpujob("submit", str(spec), "--up", "a100", "--allow-cpu", "--max-cost", "10",
                  "--autostop-key-on-host")  # fmt: skip
    assert done.exit_code == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last == ("gpujob: error: --max-cost $10.00: 2 x $1.29/h x 9.33h (start 50m + "
                    "max_duration 8h + autostop 30m) = $24.08. lower the time limit or the "
                    "autostop window, or raise --max-cost")  # fmt: skip
    nothing_launched(lam)


def test_a_budget_with_nothing_that_ends_the_rental_is_refused_before_any_cloud_call(
    lam: RunningFake, gpujob: Callable, tmp_path: Path
) -> None:
    for argv in (["up", "a100", "--yes", "--max-cost", "50"],
                 ["submit", str(job(tmp_path)), "--up", "a100", "--max-cost", "50"]):  # fmt: skip
        done = gpujob(*argv)
        assert done.exit_code == 2, done.stderr
        assert "--max-cost $50.00: nothing ends the hosts once the command" in done.stderr
        assert "set --autostop" in done.stderr and "max_duration ends the job" in done.stderr
    assert lam.control.requests() == []  # not even the offers were asked for


def test_the_budget_comes_from_the_user_config(
    lam: RunningFake, gpujob: Callable, tmp_path: Path
) -> None:
    config = tmp_path / "config" / "config.yaml"
    config.parent.mkdir()
    config.write_text("remotes: {}\nbudget:\n  max_cost: 5\n")
    spec = job(tmp_path, "max_duration: 8h\nresources: {autostop: {idle_minutes: 30}}\n")
    done = gpujob("submit", str(spec), "--up", "a100", "--allow-cpu", "--autostop-key-on-host")
    assert done.exit_code == 2, done.stderr
    said = (f"budget.max_cost ({config}:3) $5.00: 1 x $1.29/h x 9.33h (start 50m + max_duration "
            f"8h + autostop 30m) = $12.04. lower the time limit or the autostop window, or "
            f"raise budget.max_cost in {config}")  # fmt: skip
    assert said in done.stderr
    nothing_launched(lam)
    # --max-cost wins over the config: the dry run shows the cost line and launches nothing
    dry = gpujob("submit", str(spec), "--up", "a100", "--max-cost", "20", "--dry-run",
                 "--autostop-key-on-host")  # fmt: skip
    assert dry.exit_code == 0, dry.stderr
    assert ("cost: at most 1 x $1.29/h x 9.33h (start 50m + max_duration 8h + autostop 30m) = "
            "$12.04, within --max-cost $20.00") in dry.stderr  # fmt: skip
    nothing_launched(lam)


@pytest.mark.parametrize(("text", "line", "said"), [
    ("budget:\n  max_cost: lots\n", 2, "budget.max_cost: `lots` is not an amount of dollars"),
    ("budget:\n  max_cost: -3\n", 2, "budget.max_cost: `-3` is not an amount of dollars"),
    ("remotes: {}\nbudget: {max_cost: 5, currency: EUR}\n", 2, "budget: unknown key `currency`"),
    ("budget: 50\n", 1, "budget: expected a mapping with `max_cost`"),
], ids=["text", "negative", "unknown-key", "not-a-mapping"])  # fmt: skip
def test_a_bad_budget_in_the_config_is_one_line_naming_its_file_and_line(
    lam: RunningFake, gpujob: Callable, tmp_path: Path, text: str, line: int, said: str
) -> None:
    config = tmp_path / "config" / "config.yaml"
    config.parent.mkdir()
    config.write_text(text)
    done = gpujob("up", "a100", "--yes")
    assert done.exit_code == 2, done.stderr
    assert done.stderr.startswith(f"gpujob: error: {config}:{line}: {said}"), done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert lam.control.requests() == []


def test_max_cost_without_up_is_a_usage_error(gpujob: Callable, tmp_path: Path) -> None:
    done = gpujob("submit", str(job(tmp_path)), "--max-cost", "5", "--dry-run")
    assert done.exit_code == 2
    assert "--max-cost goes with --up" in done.stderr


@pytest.fixture
def banner_lambda(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, state_dir: Path
) -> Iterator[RunningFake]:
    banner = BannerServer()
    fake = serve_lambda(BannerBackend(banner))
    point_at(monkeypatch, tmp_path, lam=fake, banner=banner)
    monkeypatch.setenv("GPUJOB_CONFIG_DIR", str(tmp_path / "config"))
    yield fake
    fake.stop()
    banner.close()


def test_status_warns_about_a_host_past_the_budget_it_was_rented_under(
    banner_lambda: RunningFake, gpujob: Callable, state_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    from launcher.commands.up import up
    from launcher.state.hosts import HostsDB
    from launcher.targets.cloud.hosts import UpOptions

    assert up(UpOptions(gpu="a100", count=2, yes=True, bootstrap=False)) == 0
    capsys.readouterr()
    db = HostsDB()  # as `up --max-cost 10 --autostop ...` records each host's share
    for host in db.hosts():
        db.set_budget(host.name, 5.0)
    first = gpujob("status", "--json")
    hosts = json.loads(first.stdout)["hosts"]
    assert [(h["max_cost"], h["over_budget"]) for h in hosts] == [(5.0, False)] * 2
    assert "warning" not in first.stderr

    old = hosts[0]["name"]  # launched 5 hours ago: $6.45 so far, past its $5.00 share
    with sqlite3.connect(state_dir / "state.db") as db:
        db.execute("UPDATE hosts SET created_at = ? WHERE name = ?", (time.time() - 5 * 3600, old))
    later = gpujob("status", "--json")
    rows = {h["name"]: h for h in json.loads(later.stdout)["hosts"]}
    assert (rows[old]["cost_so_far"], rows[old]["over_budget"]) == (6.45, True)
    assert later.stderr == (f"gpujob: warning: {old} has cost $6.45 so far, past the $5.00 "
                            f"budget it was rented under; `gpujob down {old}` stops the "
                            "billing\n")  # fmt: skip
    table = gpujob("status")
    assert f"warning: {old} has cost $6.45 so far" in table.stderr
