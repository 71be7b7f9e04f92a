"""The lab's image store: what a freshly booted host's dockerd starts with, so that each new
host does not pull and unpack the lab's images again (lab-cpu is 1.5 GB unpacked: its
`docker-untar` was most of a fresh host's first job, and of the lab test suite's time).

The store is a dockerd data root of its own, one per machine for every lab on it
(`naming.shared_dir()/image-store/docker`, kept by `down`), filled by a short-lived dockerd
of its own (root namespace, no containers) that pulls from a lab's registry every image that
lab pushes (`registry.push` calls `add`): an image another lab pulled already costs only its
manifest, as its layers are there. A host with
Docker whose data root is still empty (a fresh host, not a reboot) gets the store's image
metadata (`image/`) and the small files of each layer folder copied; each layer's `diff/`
(its files: 47,000 of lab-cpu's 52,000 entries) is bind-mounted read-only from the store,
inside the host's own mount namespace, where its dockerd runs. bench/lab_image_share.py,
2026-11-26, this 2-core machine with other work on it, lab-cpu onto a fresh host: pull
24.9 s, `docker load` of a `docker save` tarball 28.4 s (the untar is the cost either way),
the store 5.0 s with the host's boot. Hard-linking the layers (`cp -al`, the store's first
form) cost 2 to 3 CPU-seconds per host boot, 0.8 more to remove them with the host, on a
machine where the test suite boots about 190 hosts with Docker per run; eleven bind mounts
cost nothing to make and go with the host's mount namespace.

Each host's dockerd still owns its data root: a layer's files are only ever read through
overlayfs (a container's writes go to its own upper folder), and a host removing an image
has its dockerd unmount what is mounted under the layer's folder before removing it
(moby's `EnsureRemoveAll`), which the read-only bind makes certain: the store's files are
never a host's to change. The binds live only as long as the host's processes, so every boot
of the host makes them again from the list it was seeded with (`store-layers.json` beside the
data root), skipping the layers its dockerd has removed since. The store's lock keeps a host
from reading the store while the store's dockerd writes it.
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

SWITCH = "GPUJOB_LAB_IMAGE_STORE"
"""`0` turns the store off (every host pulls for itself), to compare."""


def enabled() -> bool:
    return os.environ.get(SWITCH, "1") != "0"


def root() -> Path:
    return naming.shared_dir() / "image-store"


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
        _stop_orphan()
        _unmount_data_root()
        (root() / "dockerd.pid").unlink(missing_ok=True)
        shutil.rmtree(root() / "exec", ignore_errors=True)  # a killed dockerd's debris
        # its networks name the last lab's bridge: this lab's is another, and a store holds none
        shutil.rmtree(root() / "docker" / "network", ignore_errors=True)
        daemon = state.spawn(dockerd_argv(), log)
        _write_atomically(root() / "dockerd.json", json.dumps(daemon))
        try:
            from infra.lab.boot import docker_answers

            state.wait_until(lambda: docker_answers(sock), "the image store's dockerd",
                             timeout=60, log=log, daemon=daemon)  # fmt: skip
            state.run(["docker", "-H", f"unix://{sock}", "pull", "-q", ref])
        finally:
            state.stop(daemon, timeout=30)
            (root() / "dockerd.json").unlink(missing_ok=True)
            _unmount_data_root()
        images[ref] = image_id
        _write_atomically(root() / "images.json", json.dumps(images, indent=2, sort_keys=True))


def _stop_orphan() -> None:
    """The store's dockerd of an `add` that was killed (SIGKILL skips its `finally`) still
    runs on the store's data root; a second dockerd there would share it. Under the store's
    exclusive lock no live `add` owns it, so it is stopped by its record (pid, start time)."""
    try:
        orphan = json.loads((root() / "dockerd.json").read_text())
    except (OSError, ValueError):
        return
    state.stop(orphan, timeout=30)
    (root() / "dockerd.json").unlink(missing_ok=True)


def _unmount_data_root() -> None:
    """dockerd binds its data root onto itself (to set its propagation) and undoes it when it
    stops, unless it found the bind there already or was killed: in the machine's own mount
    namespace, where the store's dockerd runs, the bind would outlive every lab (and make the
    folder impossible to remove)."""
    target = str(root() / "docker")
    mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    for _ in range(sum(line.split()[4] == target for line in mounts)):
        state.run(["umount", target], check=False)


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


BIND = """set -e
for folder in "$1" "$2"; do mountpoint -q "$folder" || mount --bind "$folder" "$folder"; done
shift 2
while [ "$#" -gt 0 ]; do mountpoint -q "$2" || mount --bind -o ro "$1" "$2"; shift 2; done
"""
"""Run in the host's mount namespace with the data root, its overlay2/, then (store layer,
host layer) pairs. dockerd makes its folders private by binding each onto itself unless it
is a mount point already, and that plain bind would hide the layers bound inside: so both
are made mount points first. What is mounted already (dockerd restarted, its host's sshd
alive) is left as it is, never stacked."""


def seed(data_root: Path, mount_ns_pid: int) -> bool:
    """Give a fresh host's data root the store's images, and bind their layers' files into
    the mount namespace of `mount_ns_pid` (the host's sshd, whose namespace its dockerd joins)
    at every boot (False: no layers bound: the store is off or empty, or the data root is the
    host's own)."""
    listed = data_root.parent / "store-layers.json"
    seeding = data_root.parent / "store-layers.seeding"
    with locked(exclusive=False):
        if seeding.exists():  # a crash halfway through seeding: start over
            shutil.rmtree(data_root, ignore_errors=True)
            data_root.mkdir()
            listed.unlink(missing_ok=True)
            seeding.unlink()
        if not listed.exists():  # turning the store off keeps seeded hosts' layers bound
            if not enabled() or any(data_root.iterdir()) or not held():
                return False
            seeding.touch()
            layers = _copy_all_but_layer_files(root() / "docker", data_root)
            _write_atomically(listed, json.dumps(layers))
            seeding.unlink()
        pairs = [
            str(where / layer / "diff")
            for layer in json.loads(listed.read_text())
            if (data_root / "overlay2" / layer / "diff").is_dir()  # not removed by the host
            for where in (root() / "docker" / "overlay2", data_root / "overlay2")
        ]
        if pairs:
            folders = [str(data_root), str(data_root / "overlay2")]
            state.run(["nsenter", f"--mount=/proc/{mount_ns_pid}/ns/mnt", "--",
                       "sh", "-c", BIND, "bind", *folders, *pairs])  # fmt: skip
    return bool(pairs)


def _copy_all_but_layer_files(store: Path, data_root: Path) -> list[str]:
    """`image/` whole; `overlay2/` with the short-name links and every layer folder but the
    contents of its `diff/` (a mount point left empty), in one walk. Returns the layers'
    folder names."""
    if (store / "image").is_dir():
        state.run(["cp", "-a", str(store / "image"), str(data_root / "image")])
    top = store / "overlay2"

    def left_out(folder: str, names: list[str]) -> list[str]:
        here = Path(folder)
        if here == top:  # what is not a folder there (xfs quotas' backingFsBlockDev)
            return [name for name in names if not (here / name).is_dir()]
        return names if here.name == "diff" and here.parent.parent == top else []

    shutil.copytree(top, data_root / "overlay2", symlinks=True, ignore=left_out)
    return sorted(
        entry.name
        for entry in (data_root / "overlay2").iterdir()
        if entry.name != "l" and not entry.is_symlink()
    )


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
