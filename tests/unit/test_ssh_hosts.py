"""SSH hosts without a network: hosts.yaml, `--on`, ~/.ssh/config, and host key pinning."""

from __future__ import annotations

import base64
import os
import stat
import subprocess
from pathlib import Path

import pytest

from launcher.errors import GpujobError, UsageError
from launcher.remote.hostkeys import KnownHosts, fingerprint, host_id
from launcher.remote.hosts import HostEntry, parse_hosts, parse_user_at, resolve_host
from launcher.remote.ssh import resolve_endpoint

GOOD = """\
hosts:
  - {name: gpu1, address: 203.0.113.7, port: 2222, user: ubuntu, key: ~/.ssh/lambda}
  - name: box
    address: box.example
"""


def test_hosts_yaml_entries_by_name() -> None:
    hosts = parse_hosts(GOOD, "hosts.yaml")
    assert hosts["gpu1"] == HostEntry(
        "gpu1", "203.0.113.7", 2222, "ubuntu", key=os.path.expanduser("~/.ssh/lambda")
    )
    assert hosts["box"] == HostEntry("box", "box.example")
    assert HostEntry.from_record(hosts["gpu1"].to_record()) == hosts["gpu1"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("- {name: a}\n", "expected `hosts:`"),
        ("hosts: {a: 1}\n", "expected `hosts:`"),
        ("hosts:\n  - {address: 1.2.3.4}\n", "hosts[0]: `name` is required"),
        ("hosts:\n  - {name: a}\n", "hosts[0]: `address` is required"),
        ("hosts:\n  - {name: a, address: b, prot: 22}\n", "unknown field(s) prot"),
        ("hosts:\n  - {name: a, address: b, port: 70000}\n", "not a port number"),
        ("hosts:\n  - {name: a, address: b, port: '22'}\n", "not a port number"),
        ("hosts:\n  - {name: a, address: b}\n  - {name: a, address: c}\n", "hosts[1]: the name"),
        ("hosts: [\n", "not YAML"),
    ],
)
def test_hosts_yaml_mistakes_are_one_line_usage_errors(text: str, says: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_hosts(text, "/h/hosts.yaml")
    assert says in caught.value.one_line() and "/h/hosts.yaml" in caught.value.one_line()
    assert "\n" not in caught.value.one_line()


@pytest.mark.parametrize(
    ("text", "entry"),
    [
        ("root@10.0.0.5", HostEntry("root@10.0.0.5", "10.0.0.5", None, "root")),
        ("root@10.0.0.5:2222", HostEntry("root@10.0.0.5:2222", "10.0.0.5", 2222, "root")),
        ("gpu.example:22", HostEntry("gpu.example:22", "gpu.example", 22, None)),
        ("ubuntu@[fd00::1]:22", HostEntry("ubuntu@[fd00::1]:22", "fd00::1", 22, "ubuntu")),
        ("a@b@c", None),
        ("has space", None),
    ],
)
def test_on_user_at_address_port(text: str, entry: HostEntry | None) -> None:
    assert parse_user_at(text) == entry


def test_on_prefers_a_hosts_yaml_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(GOOD)
    monkeypatch.setenv("GPUJOB_HOSTS_FILE", str(hosts))
    assert resolve_host("gpu1").port == 2222
    assert resolve_host("me@10.1.2.3").address == "10.1.2.3"
    with pytest.raises(UsageError, match="not a host in"):
        resolve_host("no such host")


def test_ssh_config_fills_in_what_was_not_given(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        "Host gpu\n  HostName 198.51.100.4\n  User ubuntu\n  Port 2200\n"
        "  IdentityFile ~/.ssh/gpu_key\n"
    )
    found = resolve_endpoint("gpu", config_path=config)
    assert (found.address, found.user, found.port) == ("198.51.100.4", "ubuntu", 2200)
    assert found.keys == (os.path.expanduser("~/.ssh/gpu_key"),)
    given = resolve_endpoint("gpu", user="root", port=22, key="/k", config_path=config)
    assert (given.address, given.user, given.port, given.keys) == ("198.51.100.4", "root", 22,
                                                                    ("/k",))  # fmt: skip
    plain = resolve_endpoint("10.9.9.9", config_path=tmp_path / "absent")
    assert (plain.address, plain.port) == ("10.9.9.9", 22) and plain.host_id == "10.9.9.9"


def _key(seed: int) -> str:
    blob = b"\x00\x00\x00\x0bssh-ed25519\x00\x00\x00\x20" + bytes([seed]) * 32
    return base64.b64encode(blob).decode()


def test_first_contact_pins_then_the_same_key_passes(tmp_path: Path) -> None:
    pins = KnownHosts(tmp_path / "state" / "known_hosts")
    assert pins.check(host_id("10.0.0.5", 2222), "ssh-ed25519", _key(1)) is False
    assert pins.check("[10.0.0.5]:2222", "ssh-ed25519", _key(1)) is True
    assert pins.check("10.0.0.5", "ssh-ed25519", _key(2)) is False  # port 22: another host
    assert stat.S_IMODE(pins.path.stat().st_mode) == 0o600
    assert pins.path.read_text().splitlines() == [
        f"[10.0.0.5]:2222 ssh-ed25519 {_key(1)}",
        f"10.0.0.5 ssh-ed25519 {_key(2)}",
    ]


def test_a_changed_key_is_refused_naming_both_fingerprints_and_the_line(tmp_path: Path) -> None:
    pins = KnownHosts(tmp_path / "known_hosts")
    pins.check("a", "ssh-ed25519", _key(7))
    pins.check("10.0.0.5", "ssh-ed25519", _key(1))
    with pytest.raises(GpujobError) as caught:
        pins.check("10.0.0.5", "ssh-ed25519", _key(2))
    text = caught.value.one_line()
    assert fingerprint(_key(1)) in text and fingerprint(_key(2)) in text
    assert f"remove line 2 of {pins.path}" in text and "\n" not in text
    with pytest.raises(GpujobError):
        pins.check("10.0.0.5", "ecdsa-sha2-nistp256", _key(1))
    assert len(pins.path.read_text().splitlines()) == 2


def test_fingerprint_is_what_ssh_keygen_prints(tmp_path: Path) -> None:
    key = tmp_path / "k"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    printed = subprocess.run(["ssh-keygen", "-lf", f"{key}.pub"], capture_output=True, text=True)
    assert printed.stdout.split()[1] == fingerprint(Path(f"{key}.pub").read_text().split()[1])


def test_dry_run_on_a_host_contacts_nothing(gpujob, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text("print('hi')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: t\nimage: host\nworkdir: work\nrun:\n  entrypoint: train.py\n")
    done = gpujob("submit", str(spec), "--on", "root@192.0.2.1:2222", "--dry-run")
    assert done.exit_code == 0, done.stderr
    assert "on ssh (bare runtime)" in done.stdout
    assert "<home>/.gpujob/jobs/" in done.stdout  # the home it could not ask for, unquoted
    assert "'<home>" not in done.stdout and "~" not in done.stdout
