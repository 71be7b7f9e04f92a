"""gpujob touches only instances it owns: two state dirs (two users of one team account)
against the same fake cloud, the owner id every instance carries, and host-key pins that
belong to an instance rather than to an address (no lab hosts: fakes on a thread)."""

from __future__ import annotations

import base64
import json
import re
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clouds import BannerBackend, BannerServer, calls, lambda_instances, point_at, vast_instances

from infra.fakes import RunningFake, serve_lambda, serve_vast
from launcher.clouds.base import Instance
from launcher.errors import GpujobError
from launcher.remote.hostkeys import KnownHosts, instance_key, pin_name
from launcher.state.hosts import HostRecord

GPU = {"lambda": "a100", "vast": "h100"}  # the Vast fake has two 1x H100 offers
ANAS = {"lambda": 2, "vast": 1}


@pytest.fixture(params=["lambda", "vast"])
def cloud(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
          state_dir: Path) -> Iterator[tuple[str, RunningFake]]:  # fmt: skip
    banner = BannerServer()
    serve = serve_lambda if request.param == "lambda" else serve_vast
    fake = serve(BannerBackend(banner))
    if request.param == "lambda":
        point_at(monkeypatch, tmp_path, lam=fake, banner=banner)
    else:
        point_at(monkeypatch, tmp_path, vast=fake)
    yield request.param, fake
    fake.stop()
    banner.close()


@pytest.fixture
def as_user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[[str], Path]:
    """Become one of two users of the account: a state dir (and so an owner id) of their own,
    and their login name (getpass reads LOGNAME first). Returns the state dir."""

    def become(who: str) -> Path:
        state = tmp_path / ("state" if who == "ana" else f"state-{who}")
        monkeypatch.setenv("GPUJOB_STATE_DIR", str(state))
        monkeypatch.setenv("LOGNAME", who)
        return state

    return become


def live(provider: str, fake: RunningFake) -> dict[str, str]:
    """id -> name of what the cloud still runs (as any client lists it)."""
    if provider == "lambda":
        going = ("terminating", "terminated")
        return {i["id"]: i["name"] for i in lambda_instances(fake) if i["status"] not in going}
    return {str(i["id"]): i["label"] for i in vast_instances(fake)}


def up(gpujob: Callable, provider: str, count: int = 1) -> dict[str, str]:
    """id -> name of the hosts one `up` made."""
    made = gpujob("up", GPU[provider], "--provider", provider, "--count", str(count), "--yes",
                  "--no-bootstrap")  # fmt: skip
    assert made.exit_code == 0, made.stderr
    rows = [line.split("\t") for line in made.stdout.splitlines() if "\t" in line]
    return {row[2]: row[0] for row in rows}


def test_two_owners_on_one_account_touch_only_their_own(
    cloud: tuple[str, RunningFake], gpujob: Callable, as_user: Callable[[str], Path]
) -> None:
    provider, fake = cloud
    ana_state = as_user("ana")
    anas = up(gpujob, provider, count=ANAS[provider])
    bo_state = as_user("bo")
    bos = up(gpujob, provider)
    ana_id, bo_id = ((s / "owner").read_text().strip() for s in (ana_state, bo_state))
    assert ana_id != bo_id and all(n.startswith(f"gpujob-{ana_id[:8]}-") for n in anas.values())
    assert all(n.startswith(f"gpujob-{bo_id[:8]}-") for n in bos.values())

    shown = json.loads(gpujob("status", "--json").stdout)["hosts"]
    assert [h["instance_id"] for h in shown] == list(bos)  # bo's status: bo's host only

    down = gpujob("down", "--all")
    assert down.exit_code == 0, down.stderr
    assert [line.split()[1] for line in down.stdout.splitlines()] == list(bos.values())
    assert live(provider, fake) == anas  # ana's are left running ...
    for inst_id, name in anas.items():  # ... and listed, one line each
        line = f"not ours, left alone: {name} ({provider} {inst_id}, owner {ana_id[:8]}"
        assert down.stderr.count(line) == 1, down.stderr
        if provider == "lambda":  # Lambda's tags carry the whole id and the user's name
            assert f"{line}, user ana)" in down.stderr

    theirs, name = next(iter(anas.items()))
    refused = gpujob("down", theirs)
    assert refused.exit_code == 2
    (said,) = refused.stderr.strip().splitlines()
    assert f"{name} ({provider} {theirs}) is not ours" in said and "--force" in said, said
    assert live(provider, fake) == anas
    forced = gpujob("down", theirs, "--force")
    assert forced.exit_code == 0, forced.stderr
    assert f"terminated {name} ({provider} {theirs})" in forced.stdout
    assert theirs not in live(provider, fake)

    as_user("ana")
    status = gpujob("status", "--json")  # status squares the db with the cloud (issue 25)
    mine = json.loads(status.stdout)["hosts"]
    assert sorted(h["instance_id"] for h in mine) == sorted(set(anas) - {theirs})
    assert f"{name} is gone from the cloud; marked terminated" in status.stderr
    again = gpujob("down", "--all")
    assert again.exit_code == 0, again.stderr
    assert "not ours" not in again.stderr  # bo's are all gone
    assert live(provider, fake) == {}
    assert json.loads(gpujob("status", "--json").stdout)["hosts"] == []


def test_lambda_launch_tags_the_whole_owner_id_and_the_user(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, state_dir: Path, gpujob: Callable
) -> None:
    banner = BannerServer()
    fake = serve_lambda(BannerBackend(banner))
    try:
        point_at(monkeypatch, tmp_path, lam=fake, banner=banner)
        monkeypatch.setenv("LOGNAME", "ana")
        (name,) = up(gpujob, "lambda").values()
        owner = (state_dir / "owner").read_text().strip()
        (launch,) = [c for c in calls(fake, "launch") if c["status"] == 200]
        assert launch["body"]["name"] == name and len(name) <= 64
        assert launch["body"]["tags"] == [{"key": "gpujob-owner", "value": owner},
                                          {"key": "gpujob-user", "value": "ana"}]  # fmt: skip
    finally:
        fake.stop()
        banner.close()


def _inst(name: str, inst_id: str, owner: str | None = None) -> Instance:
    from launcher.clouds.base import owner_in_name

    return Instance("lambda", inst_id, name, "running", "192.0.2.9", 22,
                    owner=owner or owner_in_name(name))  # fmt: skip


def test_reconcile_never_adopts_another_owners_instance(state_dir: Path) -> None:
    """Even a `launching` row of the same name (an old, ownerless name a cut-short `up` of
    ours recorded, which a colleague's instance happens to carry) does not make it ours."""
    from launcher.state.owner import owner
    from launcher.targets.cloud.reconcile import compare

    me = owner()
    other = "0123abcd" if not me.id.startswith("0123abcd") else "fedc4321"
    row = HostRecord("gpujob-a100-cut", "lambda", None, "launching", "a100:1", created_at=0)
    theirs = _inst("gpujob-a100-cut", "i-theirs", owner="f" * 32 if me.id[0] != "f" else "e" * 32)
    named = _inst(f"gpujob-{other}-a100-0a0b0c", "i-named")
    mine = _inst(f"gpujob-{me.short}-a100-0d0e0f", "i-mine")
    old = _inst("gpujob-a100-010203", "i-old")  # from before owners, never recorded
    found = compare([theirs, named, mine, old], [row], set(), now=1.0, owner=me)
    assert found.adopted == [] and found.changes == []
    assert [i.id for i in found.foreign] == ["i-theirs", "i-named", "i-old"]
    assert [i.id for i in found.ours] == ["i-mine"] and found.unknown == [mine]
    ours_before = _inst("gpujob-a100-cut", "i-cut")  # ownerless, and our row names it
    adopted = compare([ours_before], [row], set(), now=1.0, owner=me)
    assert adopted.adopted == [ours_before]
    assert compare([old], [], {"i-old"}, now=1.0, owner=None).ours == [old]  # the db made it


def test_the_owner_id_is_made_once_private_and_agreed_on(state_dir: Path) -> None:
    from launcher.state.owner import owner, read_owner

    assert read_owner() is None and not state_dir.exists()  # reading creates nothing
    made: list[str] = []
    threads = [threading.Thread(target=lambda: made.append(owner().id)) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(made)) == 1 and re.fullmatch(r"[0-9a-f]{32}", made[0])
    path = state_dir / "owner"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in state_dir.iterdir()) == ["owner"]  # no temporary left
    path.write_text("not an id\n")
    with pytest.raises(GpujobError, match="not an owner id"):
        read_owner()


def test_names_carry_the_owner_within_lambdas_limit(state_dir: Path) -> None:
    from launcher.clouds.base import GPUS, instance_name, owner_in_name
    from launcher.state.owner import owner

    for gpu in GPUS:
        name = instance_name(gpu)
        assert len(name) <= 64 and owner_in_name(name) == owner().short
        assert owner_in_name(f"gpujob-{gpu}-0a0b0c") is None  # the names from before owners


def _key(seed: int) -> str:
    blob = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + bytes([seed]) * 32
    return base64.b64encode(blob).decode()


def test_a_rented_hosts_pin_belongs_to_its_instance(tmp_path: Path) -> None:
    pins = KnownHosts(tmp_path / "known_hosts")
    first, second = instance_key("lambda", "aa11"), instance_key("lambda", "bb22")
    assert pins.check(pin_name("10.0.0.5", 22, first), "ssh-ed25519", _key(1)) is False
    assert pins.check("10.0.0.5", "ssh-ed25519", _key(9)) is False  # a static host: per address
    # The address's next instance has another key: a first contact, not a changed key ...
    assert pins.check(pin_name("10.0.0.5", 22, second), "ssh-ed25519", _key(2)) is False
    # ... while a changed key on a live pin is still refused, for instances and addresses.
    with pytest.raises(GpujobError, match="changed"):
        pins.check(pin_name("10.0.0.5", 22, second), "ssh-ed25519", _key(3))
    with pytest.raises(GpujobError, match="changed"):
        pins.check("10.0.0.5", "ssh-ed25519", _key(3))
    pins.check(pin_name("10.0.0.6", 2222, first), "ssh-ed25519", _key(1))  # it moved
    assert pins.forget_instance(first) == 2
    assert pins.path.read_text().splitlines() == [
        f"10.0.0.5 ssh-ed25519 {_key(9)}",
        f"gpujob:lambda:bb22:10.0.0.5:22 ssh-ed25519 {_key(2)}",
    ]
    assert pins.forget_instance(first) == 0


def test_ssh_is_told_the_instances_pin_and_keeps_a_master_per_instance(tmp_path: Path) -> None:
    from launcher.remote.openssh import Client, Endpoint, socket_path

    static = Endpoint("gpu", "10.0.0.5", 22, "root", ())
    rented = Endpoint("gpu", "10.0.0.5", 22, "root", (), instance=instance_key("vast", "77"))
    options = {tuple(o.split("=", 1)) for o in Client(rented, tmp_path, tmp_path).options()}
    assert ("HostKeyAlias", "gpujob:vast:77:10.0.0.5:22") in options
    assert not any("HostKeyAlias" in o for o in Client(static, tmp_path, tmp_path).options())
    state = tmp_path / "s"
    assert socket_path(static, state) != socket_path(rented, state)


def test_down_drops_the_pins_of_what_it_terminates(
    cloud: tuple[str, RunningFake], gpujob: Callable, state_dir: Path
) -> None:
    provider, fake = cloud
    made = up(gpujob, provider, count=2)
    gone, kept = list(made)
    pins = KnownHosts(state_dir / "known_hosts")
    for seed, inst_id in enumerate(made, start=1):
        pins.check(pin_name("127.0.0.1", 22, instance_key(provider, inst_id)), "ssh-ed25519",
                   _key(seed))  # fmt: skip
    pins.check("203.0.113.7", "ssh-ed25519", _key(9))  # a hosts.yaml host
    assert gpujob("down", gone).exit_code == 0
    text = pins.path.read_text()
    assert f":{gone}:" not in text and f":{kept}:" in text and "203.0.113.7 " in text
    # An instance gone behind gpujob's back: reconciling its row drops its pins too.
    from launcher.clouds.registry import get_provider

    get_provider(provider).terminate(kept)
    assert live(provider, fake) == {}
    assert gpujob("down", "--all").exit_code == 0
    assert pins.path.read_text() == f"203.0.113.7 ssh-ed25519 {_key(9)}\n"
