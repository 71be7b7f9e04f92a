"""The lab's image store (infra/lab/image_store.py): a host booted after an image was pushed
starts with it, no pull, and again after a reboot; hosts share the image's layer files (a
read-only bind of the store's, in the host's mount namespace) and nothing else: what a
container of one host writes, or one host removing the image, leaves the others'."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from labtools import REPO, base_image_ref, docker

pytestmark = pytest.mark.lab


def layer_files(data_root: Path) -> dict[str, int]:
    """Every regular file under the layers of a dockerd's data root, by path, to its inode."""
    found = {}
    for folder, _, files in os.walk(data_root / "overlay2"):
        for name in files:
            path = Path(folder) / name
            if path.is_file() and not path.is_symlink():
                found[str(path.relative_to(data_root))] = path.stat().st_ino
    return found


def seen_by(host_name: str) -> Path:
    """The machine's / as the host's processes see it (its mount namespace, where its dockerd
    runs and the store's layers are bound)."""
    from infra.lab import state

    return Path(f"/proc/{state.read_state()['hosts'][host_name]['sshd']['pid']}/root")


def test_a_fresh_host_starts_with_the_lab_image_and_keeps_its_writes_to_itself(lab) -> None:
    import infra.lab
    from infra.lab import boot, image_store

    ref = base_image_ref()  # pushed by `lab up`, so in the store
    assert ref in image_store.held()
    hosts = [infra.lab.create_host(name, docker=True) for name in ("isa", "isb")]
    try:
        for host in hosts:  # there at boot: nothing was pulled
            assert docker(host, "image", "inspect", ref).returncode == 0
        store = layer_files(image_store.root() / "docker")
        data_root = boot.host_dir(hosts[0].name) / "docker"
        first = layer_files(Path(f"{seen_by(hosts[0].name)}{data_root}"))
        shared = set(store.items()) & set(first.items())
        assert len(shared) > 1000, "the host's layers are not the store's files"  # a copy
        outside = set(store.items()) & set(layer_files(data_root).items())
        assert not outside, "the store's files are bound only in the host's namespace"
        a_file = Path(f"{seen_by(hosts[0].name)}{data_root}") / next(iter(shared))[0]
        with pytest.raises(OSError) as refused:  # nothing of a host's can change them
            a_file.open("a").close()
        assert refused.value.errno == errno.EROFS

        write = "echo changed > /etc/debian_version; cat /etc/debian_version"
        done = docker(hosts[0], "run", "--rm", "--network", "none", ref, "sh", "-c", write)
        assert (done.returncode, done.stdout) == (0, "changed\n"), done.stderr
        for host in hosts:  # a new container of either host sees the image's file, unchanged
            done = docker(host, "run", "--rm", "--network", "none", ref,
                          "cat", "/etc/debian_version")  # fmt: skip
            assert done.returncode == 0 and done.stdout.startswith("12."), done.stdout

        assert docker(hosts[0], "rmi", ref).returncode == 0
        assert docker(hosts[1], "image", "inspect", ref).returncode == 0
        assert layer_files(image_store.root() / "docker") == store
        done = docker(hosts[1], "run", "--rm", "--network", "none", ref, "true")
        assert done.returncode == 0, done.stderr

        for host in hosts:  # a power cut: the binds go with the host's processes, and come back
            infra.lab.kill_host_processes(host.name)
            infra.lab.create_host(host.name, docker=True)
        assert docker(hosts[0], "image", "inspect", ref).returncode != 0  # removed stays removed
        done = docker(hosts[1], "run", "--rm", "--network", "none", ref, "cat", "/etc/os-release")
        assert done.returncode == 0 and "bookworm" in done.stdout, done.stderr
        assert layer_files(image_store.root() / "docker") == store
    finally:
        for host in hosts:
            infra.lab.destroy_host(host.name)


def test_the_stores_dockerd_leaves_the_machines_docker0_alone(lab) -> None:
    """The store's dockerd lives in the machine's own network namespace: a dockerd started
    there with `--bridge=none` deletes `docker0`, and every `docker build` with a RUN step on
    the machine then fails ("could not find bridge docker0"). Pulling an image into the store
    (its dockerd started and stopped) keeps the bridge."""
    import json
    import subprocess

    from infra.lab import image_store

    def docker0() -> bool:
        return subprocess.run(["ip", "link", "show", "docker0"], capture_output=True,
                              check=False).returncode == 0  # fmt: skip

    if not docker0():
        pytest.fail("the machine's dockerd has no docker0 before the test")
    ref = base_image_ref()
    with image_store.locked(exclusive=True):  # the store is every lab's on this machine
        held = image_store.held()
        held.pop(ref, None)  # forget it: the next add starts the store's dockerd, pulls again
        (image_store.root() / "images.json").write_text(json.dumps(held))
    image_store.add(ref, "refilled-by-the-test")
    assert ref in image_store.held()
    assert docker0(), "the store's dockerd deleted the machine's docker0"


def test_the_dockerd_of_a_killed_add_is_stopped_by_the_next_add(lab) -> None:
    """An `add` killed while its dockerd pulls leaves that dockerd running on the store (it is
    a daemon of its own session); the next `add` stops it before starting its own, so two
    dockerds never share the store's data root, and no bind of that data root is left in
    the machine's mount namespace."""
    import json
    import signal
    import subprocess
    import sys
    import time

    from infra.lab import image_store, state

    ref = base_image_ref()
    with image_store.locked(exclusive=True):
        held = image_store.held()
        held.pop(ref, None)
        (image_store.root() / "images.json").write_text(json.dumps(held))
    code = f"from infra.lab import image_store; image_store.add({ref!r}, 'killed')"
    adding = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
    record = image_store.root() / "dockerd.json"
    deadline = time.monotonic() + 60
    while not record.exists() and adding.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert record.exists(), "the add never started its dockerd"
    orphan = json.loads(record.read_text())
    adding.send_signal(signal.SIGKILL)
    adding.wait()
    assert state.alive(orphan), "the killed add's dockerd should outlive it"

    image_store.add(ref, "after-the-kill")
    assert not state.alive(orphan)
    assert not record.exists()
    assert image_store.held()[ref] == "after-the-kill"
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    assert str(image_store.root() / "docker") not in mounts, "the store's dockerd left its bind"


def test_a_host_killed_while_it_was_seeded_boots_with_the_images_whole(lab) -> None:
    """A crash between the first copy and the list of bound layers leaves a data root half
    made (here: no list, one layer's files gone); the next boot makes it again."""
    import infra.lab
    from infra.lab import boot

    ref = base_image_ref()
    host = infra.lab.create_host("isk", docker=True)
    try:
        infra.lab.kill_host_processes(host.name)
        folder = boot.host_dir(host.name)
        (folder / "store-layers.json").unlink()
        (folder / "store-layers.seeding").touch()
        next((folder / "docker" / "overlay2").glob("*/link")).unlink()
        infra.lab.create_host(host.name, docker=True)
        assert not (folder / "store-layers.seeding").exists()
        done = docker(host, "run", "--rm", "--network", "none", ref, "cat", "/etc/os-release")
        assert done.returncode == 0 and "bookworm" in done.stdout, done.stderr
    finally:
        infra.lab.destroy_host(host.name)
