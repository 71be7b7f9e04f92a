"""A lab's bridge, subnet, host names and folder come from its name (infra/lab/naming.py), so
labs of different names share a machine; the default name keeps the layout it always had."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from infra.lab import naming
from infra.lab.state import LabError


@pytest.fixture
def lab_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    def use(name: str | None) -> Path:
        if name is None:
            monkeypatch.delenv(naming.VARIABLE, raising=False)
        else:
            monkeypatch.setenv(naming.VARIABLE, name)
        monkeypatch.setenv("GPUJOB_LAB_DIR", str(tmp_path / "lab"))
        return tmp_path / "lab"

    return use


def test_the_default_lab_keeps_todays_names(lab_named) -> None:
    lab_named(None)
    assert (naming.name(), naming.bridge(), naming.host_prefix()) == ("gjlab", "gjlab0", "gjlab-")
    assert str(naming.subnet()) == "10.77.0.0/24"
    assert naming.bridge_address() == "10.77.0.1"
    assert naming.session_lock() == Path("/tmp/gpujob-lab.lock")


def test_a_named_lab_has_its_own_bridge_prefix_lock_and_folder(
    lab_named, monkeypatch: pytest.MonkeyPatch
) -> None:
    lab_named("demo2")
    assert (naming.bridge(), naming.host_prefix()) == ("demo20", "demo2-")
    assert naming.session_lock() == Path("/tmp/gpujob-lab-demo2.lock")
    monkeypatch.delenv("GPUJOB_LAB_DIR")
    assert naming.lab_dir() == Path("/tmp/gpujob-lab-demo2")
    naming.lab_dir().rmdir()


def test_a_named_lab_has_no_subnet_until_its_bridge_claims_one(lab_named) -> None:
    folder = lab_named("demo2")
    assert naming.subnet() is None
    with pytest.raises(LabError, match="lab demo2 has no subnet yet: it was never up") as why:
        naming.bridge_address()
    assert why.value.hint == "start it with `gpujob lab up --name demo2`"
    net = naming.claim_subnet([])
    assert net.subnet_of(naming.LAB_RANGE) and net != naming.DEFAULT_SUBNET
    assert naming.subnet() == net
    assert (folder / "subnet").read_text() == f"{net}\n"
    assert naming.loopback_host() == f"127.77.{net.network_address.packed[2]}.1"


def test_the_subnet_claimed_overlaps_no_address_or_route_of_the_machine(lab_named) -> None:
    lab_named("demo2")
    first = naming.claim_subnet([])
    (naming.lab_dir() / "subnet").unlink()
    used = [first, ipaddress.IPv4Network("10.77.0.0/24"), ipaddress.IPv4Network("10.77.128.0/17")]
    second = naming.claim_subnet(used)
    assert not any(second.overlaps(net) for net in used)
    assert naming.claim_subnet(used) == second  # recorded: the same on the next up


def test_the_whole_range_taken_says_so(lab_named) -> None:
    lab_named("demo2")
    with pytest.raises(LabError, match=r"every /24 of 10\.77\.0\.0/16 is in use"):
        naming.claim_subnet([naming.LAB_RANGE])


@pytest.mark.parametrize("bad", ["Demo", "two-labs", "1lab", "a" * 13, "lab.x"])
def test_a_bad_lab_name_is_one_line_saying_what_a_name_may_be(lab_named, gpujob, bad) -> None:
    lab_named(None)
    result = gpujob("lab", "up", "--name", bad, "--dry-run")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert f"lab name {bad!r}" in result.stderr
    assert "1 to 12 lowercase letters and digits" in result.stderr


def test_lab_up_dry_run_of_a_named_lab_names_its_own_parts(lab_named, gpujob) -> None:
    lab_named(None)
    result = gpujob("lab", "up", "--name", "demo2", "--dry-run")
    assert result.exit_code == 0, result.stderr
    assert "would: bridge demo20 (a /24 of 10.77.0.0/16)" in result.stderr
    assert "ip netns add demo2-h1" in result.stderr
    assert "gjlab" not in result.stderr


def test_a_name_whose_bridge_is_the_machines_own_is_refused(lab_named, gpujob) -> None:
    """`--name docker` would make docker0 the lab's bridge, and `lab down` would delete it."""
    lab_named(None)
    result = gpujob("lab", "down", "--name", "docker", "--dry-run")
    assert result.exit_code == 2, result.stderr
    assert "docker0 is the machine's own" in result.stderr
