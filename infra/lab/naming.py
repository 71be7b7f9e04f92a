"""Which lab a process works on: one setting, `GPUJOB_LAB_NAME`, names all of it.

A machine can hold several labs side by side (two test runs, a test run and a demo). A
lab's bridge (`NAME0`), host-name prefix (`NAME-`), folder, session lock and subnet all
follow from its name, so each lab finds, and removes, only what is its own. The default
name, `gjlab`, gives the layout the lab always had: gjlab0, 10.77.0.0/24, gjlab-,
/tmp/gpujob-lab, /tmp/gpujob-lab.lock.

Labs take /24s of 10.77.0.0/16 (`LAB_RANGE`, which infra/install-deps.sh makes the machine's
dockerd trust as an insecure registry range): the default lab 10.77.0.0/24; any other lab
the first /24 that no address or route of the machine overlaps, chosen when its bridge is
made (under a machine-wide lock, so two labs coming up at once never pick the same one)
and recorded in its folder, so every later process of that lab reads the same subnet.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import ipaddress
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

DEFAULT = "gjlab"
VARIABLE = "GPUJOB_LAB_NAME"
LAB_RANGE = ipaddress.ip_network("10.77.0.0/16")
DEFAULT_SUBNET = ipaddress.ip_network("10.77.0.0/24")
PREFIX_LEN = 24
_NAME = re.compile(r"[a-z][a-z0-9]{0,11}")  # the bridge, NAME0, must fit 15 bytes
ALLOCATION_LOCK = Path("/tmp/gpujob-lab-subnets.lock")
IMAGE_BUILD_LOCK = Path("/tmp/gpujob-lab-images.lock")
SHARED_DIR = Path("/var/tmp/gpujob-lab-shared")
"""What every lab of the machine shares, as they all share the machine's dockerd and its
images: the registry's storage (content-addressed, so a lab pushing an image another lab
pushed uploads nothing: lab-cpu's first push took 29 s here, the same push to a second lab's
registry 0.03 s) and the image store (image_store.py). `down` keeps it, as it keeps the
machine's images; removing it costs the next lab one push and one pull of each image."""
_image_build_guard = threading.RLock()
_image_builds = 0


RESERVED = frozenset({"docker", "virbr", "lxcbr", "lxdbr", "podman", "cni", "br"})
"""Names whose bridge (NAME0) is the machine's own (docker0 is dockerd's default network):
a lab of that name would take it over, and its `down` would delete it."""


def check(name: str) -> str:
    """`name` if it can name a lab; a one-line error saying what a name may be otherwise."""
    if name in RESERVED:
        from infra.lab.state import LabError

        raise LabError(f"lab name {name!r}: its bridge {name}0 is the machine's own",
                       "pick another name, e.g. `gpujob lab up --name demo2`")  # fmt: skip
    if not _NAME.fullmatch(name):
        from infra.lab.state import LabError

        raise LabError(
            f"lab name {name!r} ({VARIABLE} or --name): a lab name is 1 to 12 lowercase "
            "letters and digits, starting with a letter",
            "e.g. `gpujob lab up --name demo2`",
        )
    return name


def name() -> str:
    return check(os.environ.get(VARIABLE) or DEFAULT)


def is_default() -> bool:
    return name() == DEFAULT


def bridge() -> str:
    return f"{name()}0"


def host_prefix() -> str:
    """Every host's namespace carries it, so `down` finds a lab's strays by name (and only
    its own: a name has no `-`, so no lab's prefix starts another's)."""
    return f"{name()}-"


def lab_dir() -> Path:
    """The lab's own folder; `GPUJOB_LAB_DIR` overrides (tests and demos keep labs apart)."""
    default = "/tmp/gpujob-lab" if is_default() else f"/tmp/gpujob-lab-{name()}"
    path = Path(os.environ.get("GPUJOB_LAB_DIR", default))
    path.mkdir(parents=True, exist_ok=True)
    return path


def shared_dir() -> Path:
    SHARED_DIR.mkdir(parents=True, exist_ok=True)
    return SHARED_DIR


def session_lock() -> Path:
    """The file a test session (or a benchmark) holds while it uses this lab."""
    return Path("/tmp/gpujob-lab.lock" if is_default() else f"/tmp/gpujob-lab-{name()}.lock")


def subnet() -> ipaddress.IPv4Network | None:
    """The lab's /24: the default's, or the one recorded when its bridge was made (None
    before that: the lab was never up)."""
    if is_default():
        return DEFAULT_SUBNET
    try:
        return ipaddress.IPv4Network((lab_dir() / "subnet").read_text().strip())
    except (OSError, ValueError):
        return None


def bridge_address() -> str:
    """The bridge's address (.1 of the subnet): where hosts reach the registry, S3, fakes."""
    net = subnet()
    if net is None:
        from infra.lab.state import LabError

        raise LabError(f"lab {name()} has no subnet yet: it was never up",
                       f"start it with `gpujob lab up --name {name()}`")  # fmt: skip
    return str(net.network_address + 1)


def loopback_host() -> str:
    """A loopback address of the lab's own (127.B.C.1 for 10.B.C.0/24): its registry forward
    listens there on the registry's port, as Docker trusts 127.0.0.0/8 by default."""
    _, b, c, _ = bridge_address().split(".")
    return f"127.{b}.{c}.1"


@contextlib.contextmanager
def allocation_lock() -> Iterator[None]:
    """Held while a lab picks its subnet and makes its bridge: machine-wide."""
    with ALLOCATION_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


@contextlib.contextmanager
def image_build_lock() -> Iterator[None]:
    """Held while a lab builds one of its images in the machine's dockerd: the tags there
    are shared by every lab, so a second lab waits and finds the image built rather than
    building it again beside the first (two debootstraps on two cores). Re-entrant within a
    process (the job image's build builds the base image first)."""
    global _image_builds
    with _image_build_guard:
        if _image_builds:
            _image_builds += 1
            try:
                yield
            finally:
                _image_builds -= 1
            return
        with IMAGE_BUILD_LOCK.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            _image_builds = 1
            try:
                yield
            finally:
                _image_builds = 0


def claim_subnet(used: list[ipaddress.IPv4Network]) -> ipaddress.IPv4Network:
    """The lab's subnet for a bridge about to be made (hold `allocation_lock`): the default
    one, else the recorded one while nothing else on the machine overlaps it, else the first
    free /24 of LAB_RANGE from a start that depends on the name (so labs seldom meet)."""
    if is_default():
        return DEFAULT_SUBNET
    recorded = subnet()
    if recorded is not None and not _overlaps(recorded, used):
        return recorded
    pool = [net for net in LAB_RANGE.subnets(new_prefix=PREFIX_LEN)][1:-1]
    start = int(hashlib.sha1(name().encode()).hexdigest(), 16) % len(pool)
    for net in pool[start:] + pool[:start]:
        if not _overlaps(net, used):
            record = lab_dir() / "subnet"
            tmp = record.with_suffix(".tmp")
            tmp.write_text(f"{net}\n")
            tmp.replace(record)
            return net
    from infra.lab.state import LabError

    raise LabError(f"lab: every /24 of {LAB_RANGE} is in use on this machine",
                   "take a lab down: `gpujob lab down --name NAME`")  # fmt: skip


def _overlaps(net: ipaddress.IPv4Network, used: list[ipaddress.IPv4Network]) -> bool:
    return any(net.overlaps(other) for other in used)
