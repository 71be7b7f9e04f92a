"""The lab's image store: what a freshly booted host's dockerd starts with, so that each new
host does not pull and unpack the lab's images again (lab-cpu is 1.5 GB unpacked: its
`docker-untar` was most of a fresh host's first job, and of the lab test suite's time).

The store is a dockerd data root of the lab's own (`LAB/image-store/docker`), filled by a
short-lived dockerd of its own (root namespace, no bridge, no containers) that pulls from
the lab registry every image the lab pushes (`registry.push` calls `add`). A host with
Docker whose data root is still empty (a fresh host, not a reboot) gets a copy of it before
its dockerd starts: the metadata (`image/`) copied, the layers (`overlay2/`) hard-linked
(`cp -al`). bench/lab_image_share.py, 2026-11-26, this 2-core machine with other work on it,
lab-cpu onto a fresh host: pull 24.9 s, `docker load` of a `docker save` tarball 28.4 s
(the untar is the cost either way), the store 5.0 s with the host's boot. Each host's dockerd
still owns its data root, and none is shared: a layer's files are only ever read through
overlayfs (a container's writes go to its own upper folder by copy-up; a host removing an
image unlinks its own names), so hard links to them are as good as copies. The store's lock
keeps a host from copying the store while its dockerd writes it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from infra.lab import naming, state

SEEDED = ("image", "overlay2")
"""What a host's data root takes from the store: image metadata, and the layers."""
SWITCH = "GPUJOB_LAB_IMAGE_STORE"
"""`0` turns the store off (every host pulls for itself), to compare."""


def enabled() -> bool:
    return os.environ.get(SWITCH, "1") != "0"


def root() -> Path:
    return state.lab_dir() / "image-store"


@contextlib.contextmanager
def locked(exclusive: bool) -> Iterator[None]:
    root().mkdir(parents=True, exist_ok=True)
    with open(root() / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        yield


def held() -> dict[str, str]:
    """The store's images: hosts' ref -> image id."""
    try:
        return json.loads((root() / "images.json").read_text())
    except (OSError, ValueError):
        return {}


def add(ref: str, image_id: str) -> None:
    """Pull `ref` (the hosts' ref of an image just pushed, `image_id` its id) into the store,
    unless the store holds that image under that ref already."""
    if not enabled():
        return
    with locked(exclusive=True):
        images = held()
        if images.get(ref) == image_id:
            return
        sock = root() / "docker.sock"
        log = root() / "dockerd.log"
        (root() / "docker").mkdir(exist_ok=True)
        (root() / "dockerd.pid").unlink(missing_ok=True)
        shutil.rmtree(root() / "exec", ignore_errors=True)  # a killed dockerd's debris
        daemon = state.spawn(dockerd_argv(), log)
        try:
            from infra.lab.boot import docker_answers

            state.wait_until(lambda: docker_answers(sock), "the image store's dockerd",
                             timeout=60, log=log, daemon=daemon)  # fmt: skip
            state.run(["docker", "-H", f"unix://{sock}", "pull", "-q", ref])
        finally:
            state.stop(daemon, timeout=30)
        images[ref] = image_id
        tmp = root() / "images.json.tmp"
        tmp.write_text(json.dumps(images, indent=2, sort_keys=True))
        tmp.replace(root() / "images.json")


def dockerd_argv() -> list[str]:
    """The store's dockerd runs in the machine's own network namespace (it pulls from the
    lab's registry over the bridge), so it is given the lab's bridge as its default network:
    a dockerd started with `--bridge=none` deletes the namespace's `docker0`, and in the
    machine's namespace that is the machine's dockerd's (every `docker build` with a RUN
    step then failed: "could not find bridge docker0")."""
    folder = root()
    return [
        "dockerd", "--data-root", str(folder / "docker"), "--exec-root", str(folder / "exec"),
        "--pidfile", str(folder / "dockerd.pid"), "-H", f"unix://{folder / 'docker.sock'}",
        "--bridge", naming.bridge(), "--iptables=false", "--ip-forward=false", "--ip-masq=false",
        "--insecure-registry", f"{naming.bridge_address()}:5000",
    ]  # fmt: skip


def seed(data_root: Path) -> bool:
    """Fill a fresh host's empty data root from the store (False: nothing to copy, or the
    data root is a booted host's already)."""
    if not enabled() or any(data_root.iterdir()) or not held():
        return False
    with locked(exclusive=False):
        for part in SEEDED:
            source = root() / "docker" / part
            if source.is_dir():
                flags = "-al" if part == "overlay2" else "-a"
                state.run(["cp", flags, str(source), str(data_root / part)])
    return True
