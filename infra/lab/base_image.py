"""The lab's base image, `gpujob-lab/base:bookworm`, made from debootstrap (no hub is reachable).

Built once per machine and cached by tag in the machine's dockerd (about a minute the first
time); then pushed to the lab registry, which the hosts pull from. Debian 12's python3 is
3.11, like the CPU torch wheel the job image installs.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from infra.lab import naming, registry, state

TAG = "gpujob-lab/base:bookworm"
PACKAGES = [
    "python3", "python3-venv", "python3-pip", "openssh-server", "procps", "iproute2",
    "util-linux", "rsync", "ca-certificates",
]  # fmt: skip
LABEL = "gpujob.lab=base"


def exists(tag: str = TAG) -> bool:
    done = subprocess.run(["docker", "image", "inspect", tag], capture_output=True)
    return done.returncode == 0


def debootstrap_argv(root: Path) -> list[str]:
    return [
        "debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}",
        "bookworm", str(root),
    ]  # fmt: skip


def build(report: Callable[[str], None] = print) -> None:
    """debootstrap into a scratch folder, then `tar | docker import`; skipped if the tag exists
    (looked at again under the machine's image lock: another lab may be building it)."""
    if exists():
        report(f"base image {TAG} is cached")
        return
    with naming.image_build_lock():
        if exists():
            report(f"base image {TAG} is cached (built by another lab meanwhile)")
            return
        _build(report)


def _build(report: Callable[[str], None]) -> None:
    scratch = Path(tempfile.mkdtemp(prefix="gjlab-rootfs-", dir="/var/tmp"))
    root = scratch / "root"
    try:
        report(f"building {TAG}: debootstrap bookworm (about a minute) ...")
        state.run(debootstrap_argv(root))
        report(f"building {TAG}: docker import ...")
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        done = subprocess.run(
            ["docker", "import", "--change", f"LABEL {LABEL}", "--change", "ENV LANG=C.UTF-8",
             "-", TAG],
            stdin=tar.stdout, capture_output=True, text=True,
        )  # fmt: skip
        assert tar.stdout is not None
        tar.stdout.close()
        if tar.wait() != 0 or done.returncode != 0:
            raise state.LabError(f"lab: importing {TAG} failed: {done.stderr.strip()}")
    finally:
        _unmount_under(scratch)  # a failed debootstrap can leave /proc, /sys mounted in it
        shutil.rmtree(scratch, ignore_errors=True)
    report(f"built {TAG}")


def publish(report: Callable[[str], None] = print) -> str:
    """Push the base image to the lab registry (layers it holds are skipped: about a second)."""
    report(f"pushing {TAG} to the lab registry ...")
    return registry.push(TAG, TAG)


def _unmount_under(folder: Path) -> None:
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    inside = [m for m in mounts if Path(m).is_relative_to(folder)]
    for mount in sorted(inside, key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], capture_output=True)
