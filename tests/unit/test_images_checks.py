"""The driver check, the lock's own integrity, the wheelhouse's hash check, the catalog
refresh against real (loopback) HTTP, and the CLI's one-line errors with exit codes."""

from __future__ import annotations

import hashlib
import http.server
import json
import shutil
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from imaging import CATALOG, IMAGES

from launcher.errors import UsageError
from launcher.images.driver import check_driver, driver_verdict
from launcher.images.lock import parse_lock
from launcher.images.refresh import refresh
from launcher.images.running import running_lock_hash
from launcher.images.wheelhouse import HashMismatch, fetch
from launcher.images.wheels import WheelRecord

DRIVERS = [
    ("cu130", "535.104.05", False, "580.65.06"),
    ("cu130", "580.65.06", True, None),
    ("cu121", "525.60.13", True, "530.30.02"),
    ("cu121", "470.82.01", False, "525.60.13"),
    ("cu118", "450.80.02", True, "520.61.05"),
    ("cpu", "0", True, None),
]


@pytest.mark.parametrize(("cuda", "driver", "ok", "named"), DRIVERS)
def test_driver_floor_by_cuda_major(cuda: str, driver: str, ok: bool, named: str | None) -> None:
    verdict = driver_verdict(cuda, driver, CATALOG)
    assert verdict.ok is ok
    if named:
        assert named in (verdict.warning or "") or named == verdict.required


def test_cu130_image_on_a_535_host_is_refused_with_both_versions() -> None:
    with pytest.raises(UsageError) as error:
        check_driver("current-cu130", "cu130", "535.104.05", CATALOG)
    line = error.value.one_line()
    assert "needs NVIDIA driver >= 580.65.06" in line and "the host has 535.104.05" in line


def test_cli_check_driver_exits_2_naming_both_versions(gpujob) -> None:
    result = gpujob("image", "check-driver", "current-cu130", "--driver", "550.54.14")
    assert result.exit_code == 2
    assert (
        result.stderr.count("\n") == 1
        and "580.65.06" in result.stderr
        and "550.54.14" in result.stderr
    )


def test_build_refuses_a_lock_with_unknown_hashes(gpujob) -> None:
    result = gpujob("image", "build", "seed-cu121-py310")
    assert result.exit_code == 1
    assert "unknown sha256 (flash_attn-2.5.8+cu122torch2.3cxx11abiFALSE" in result.stderr


def test_build_dry_run_json_is_the_plan(gpujob) -> None:
    result = gpujob("image", "build", "lab-cpu", "--dry-run", "--json", "--push", "127.0.0.1:5000")
    plan = json.loads(result.stdout)
    lock = parse_lock((IMAGES / "lab-cpu.lock").read_text(), "lab-cpu")
    assert result.exit_code == 0
    assert plan["push"] == f"127.0.0.1:5000/gpujob/lab-cpu:{lock.lock_hash[:16]}"
    assert len(plan["wheels"]) == len(lock.packages)


def test_a_hand_edited_lock_is_refused() -> None:
    text = (IMAGES / "lab-cpu.lock").read_text().replace('"3.11"', '"3.12"', 1)
    with pytest.raises(UsageError, match="lock_hash does not match"):
        parse_lock(text, "lab-cpu.lock")


def test_a_wheel_whose_bytes_differ_from_the_lock_stops_before_the_cache(tmp_path: Path) -> None:
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    wheel.write_bytes(b"not the locked bytes")
    good = hashlib.sha256(b"the locked bytes").hexdigest()
    lock = parse_lock((IMAGES / "lab-cpu.lock").read_text(), "lab-cpu")
    entry = WheelRecord("demo", "1.0", wheel.name, wheel.as_uri(), good, "test", ())
    tampered = replace(lock, packages=[entry])
    with pytest.raises(HashMismatch, match="does not match the lock's"):
        fetch(tampered, tmp_path / "cache", print)
    assert not list((tmp_path / "cache").rglob("*.whl"))
    entry = replace(entry, sha256=hashlib.sha256(b"not the locked bytes").hexdigest())
    [cached] = fetch(replace(lock, packages=[entry]), tmp_path / "cache", print)
    assert cached.read_bytes() == wheel.read_bytes()


def test_running_lock_hash_comes_from_the_image_env() -> None:
    assert running_lock_hash({"GPUJOB_IMAGE_LOCK": "ab" * 32}) == "ab" * 32
    assert running_lock_hash({}) is None


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_refresh_catalog_with_no_index_reachable_fails_clearly_and_changes_nothing(
    gpujob,
) -> None:
    before = (IMAGES / "catalog.json").read_bytes()
    root = f"http://127.0.0.1:{closed_port()}/whl"
    result = gpujob("image", "refresh-catalog", "--index", root)
    assert result.exit_code == 1
    assert result.stderr.startswith("gpujob: error: no index reachable: tried ")
    assert "catalog.json is unchanged" in result.stderr and result.stderr.count("\n") == 1
    assert (IMAGES / "catalog.json").read_bytes() == before


@pytest.fixture
def wheel_index(tmp_path: Path) -> Iterator[str]:
    """A PEP 503 index on loopback whose cu130 page lists a torch the catalog lacks."""
    page = tmp_path / "whl" / "cu130" / "torch"
    page.mkdir(parents=True)
    page.joinpath("index.html").write_text(
        '<a href="/whl/cu130/torch-2.16.0%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl'
        '#sha256=00">torch-2.16.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl</a>\n'
    )
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/whl"
    finally:
        server.shutdown()
        server.server_close()


def test_refresh_catalog_merges_what_an_index_publishes(wheel_index: str, tmp_path: Path) -> None:
    catalog = tmp_path / "catalog.json"
    shutil.copy(IMAGES / "catalog.json", catalog)
    changes = refresh([wheel_index], catalog)
    assert "torch 2.16.0: +cu130" in changes and "torch 2.16.0: +cp312" in changes
    row = json.loads(catalog.read_text())["torch"]["2.16.0"]
    assert row["variants"] == ["cu130"] and row["python"] == ["cp312"]


def test_lock_hash_names_the_image_content_not_where_it_was_read() -> None:
    lock = parse_lock((IMAGES / "lab-cpu.lock").read_text(), "lab-cpu")
    moved = [
        replace(p, url="file:///elsewhere/" + p.filename, requires=None) for p in lock.packages
    ]
    assert replace(lock, catalog_sha256="0" * 64, packages=moved).lock_hash == lock.lock_hash
    changed = [replace(lock.packages[0], sha256="f" * 64), *lock.packages[1:]]
    assert replace(lock, packages=changed).lock_hash != lock.lock_hash
