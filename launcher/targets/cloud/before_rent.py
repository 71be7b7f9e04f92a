"""Every check `submit --up` can make on this machine, made before the first cloud call:
nothing is rented for a job that this machine can already tell will not run.

In order: the spec and its plan (built for the hosts to come, as a dry run builds it: batch
sizes, rendezvous, files), the LoRA merge guard, every S3 remote the job uses (listed, and a
probe written and deleted, from here), the image (its registry answers for the name, or its
lock is there and matches its definition), and the disk budget against the disk asked for
(always printed). What only the host can say (its driver against the image's CUDA, whether
the environment builds there) is checked first thing after boot, and a failure there
terminates what was rented (`launcher.commands.submit`). The cost budget (`--max-cost`) needs the
offers' prices: it is checked once they are listed, still before the launch call
(`launcher.targets.cloud.cost`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from launcher.errors import GpujobError, UsageError
from launcher.spec.load import LoadedSpec

GIB = 1 << 30
IMAGE_GUESS = 15 * GIB
"""A CUDA job image as pulled (torch + CUDA libraries), when its size is not known."""
NOT_RENTED = "nothing was rented"


@dataclass(frozen=True)
class Cleared:
    """What the checks found that the rent itself needs: the least disk a host must have."""

    min_disk_gb: int


def check_before_rent(
    loaded: LoadedSpec,
    image: Any,
    image_ref: str | None,
    disk_gb: int,
    rehearse: Callable[[], None],
    report: Callable[[str], None],
) -> Cleared:
    """Refuse (one line, naming what failed and that nothing was rented) or clear the rent.
    `rehearse` builds the plan for placeholder hosts, as `--dry-run` does."""
    from launcher.storage.merge_guard import check_merge
    from launcher.storage.preflight import probe_sync_target

    check_merge(loaded)
    rehearse()
    probe_sync_target(loaded, NOT_RENTED, lambda line: report(f"before renting: {line}"))
    _check_image(loaded, image, image_ref, report)
    return Cleared(min_disk_gb=_check_disk(loaded, image, image_ref, disk_gb, report))


def check_spot(provider: str, spot: bool) -> None:
    """Interruptible hosts only where the cloud rents them (Vast's bids); Lambda has no spot
    product (recovery.md §5.4), so the request is refused rather than met on demand."""
    from launcher.clouds.registry import trait

    if spot and not trait(provider, "can_spot", False):
        raise UsageError(f"--spot (resources.use_spot): {provider} rents no interruptible "
                         "hosts; nothing was rented",
                         "leave it out to rent on demand, or use --provider vast")  # fmt: skip


def _check_image(
    loaded: LoadedSpec, image: Any, image_ref: str | None, report: Callable[[str], None]
) -> None:
    if image_ref is not None:
        check_registry(image_ref, report)
        return
    if image is not None:  # pins the host builds into an environment: the lock must hold
        from launcher.images.commands import current_lock
        from launcher.resources import images_dir_for

        try:
            _, lock = current_lock(image.name, images_dir_for(image.name, loaded.path.parent))
        except UsageError as err:
            raise UsageError(f"{err.message}; {NOT_RENTED}", err.hint) from None
        report(f"before renting: image {image.name}: lock {lock.lock_hash[:12]} matches")


def check_registry(image_ref: str, report: Callable[[str], None]) -> None:
    """The registry answers for the name: a manifest for the tag (a 401 without credentials
    still says the registry is there; the host logs in). A name without a registry host is
    Docker Hub's, which this check does not reach."""
    registry, repository, tag = split_image_ref(image_ref)
    if registry is None:
        report(f"before renting: image {image_ref}: on Docker Hub, not checked from here")
        return
    status, scheme = _manifest_status(registry, repository, tag)
    where = f"{scheme}://{registry}/v2/{repository}/manifests/{tag}"
    if status in (200, 401):
        said = "present" if status == 200 else "registry answers (login needed for the tag)"
        report(f"before renting: image {image_ref}: {said}")
        return
    if status is None:
        raise GpujobError(f"image {image_ref}: registry {registry} does not answer; {NOT_RENTED}",
                          "check the registry address, or push the image there first")  # fmt: skip
    raise UsageError(
        f"image {image_ref}: {where} answered {status}: no such image; {NOT_RENTED}",
        "build and push it first: gpujob image build NAME --push REGISTRY",
    )


def split_image_ref(ref: str) -> tuple[str | None, str, str]:
    """(registry host or None for Docker Hub, repository, tag): Docker's own reading, where
    the first component is a host only if it has a `.` or `:` or is `localhost`."""
    name, _, digest = ref.partition("@")
    first, _, rest = name.partition("/")
    host = first if rest and ("." in first or ":" in first or first == "localhost") else None
    path = rest if host else name
    repo, _, tag = path.rpartition(":") if ":" in path.rsplit("/", 1)[-1] else (path, "", "")
    return host, repo, digest or tag or "latest"


def _manifest_status(registry: str, repository: str, tag: str) -> tuple[int | None, str]:
    import requests

    accept = ", ".join((
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ))  # fmt: skip
    schemes = ["https", "http"] if _private(registry) else ["https"]
    for scheme in schemes:
        url = f"{scheme}://{registry}/v2/{repository}/manifests/{tag}"
        try:
            return requests.head(url, headers={"Accept": accept}, timeout=10).status_code, scheme
        except requests.RequestException:
            continue
    return None, schemes[-1]


def _private(registry: str) -> bool:
    """Plain http is tried only where Docker itself allows an insecure registry by default
    (loopback) or a lab/VPC one is usual (private addresses)."""
    host = registry.rsplit(":", 1)[0] if registry.count(":") == 1 else registry
    if host == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return address.is_private or address.is_loopback


def disk_asked(loaded: LoadedSpec, flag_gb: int) -> tuple[int, str] | None:
    """The one rule for the disk a rented host gets, and where it was asked: `--disk` wins,
    else the spec's `resources.disk_gb` when the spec (or a profile, or a SkyPilot
    `disk_size`) sets it, else None: the disk budget decides, with the cloud's least.
    The field's default (50) is not a request: it would make every Vast host bill 50 GB."""
    if flag_gb:
        return flag_gb, "--disk"
    resources = loaded.spec.resources
    if "disk_gb" in resources.model_fields_set:
        return resources.disk_gb, f"resources.disk_gb, {loaded.where('resources', 'disk_gb')}"
    return None


def _check_disk(
    loaded: LoadedSpec, image: Any, image_ref: str | None, disk_gb: int,
    report: Callable[[str], None],
) -> int:  # fmt: skip
    """The budget (kept checkpoints + the one being written + workdir + image or job
    environment), always printed. `--disk` is the host's disk: a budget over it is refused.
    `resources.disk_gb` is the free disk the job says it needs: the host gets at least that
    and at least the budget (a quickstart's `disk_gb: 1` is no cap on its environment).
    Returns the least disk an offer must have (and what Vast creates)."""
    from launcher.storage.budget import budget_of, check_budget
    from launcher.storage.preflight import ENVIRONMENT_GUESS

    software = IMAGE_GUESS if image_ref is not None else ENVIRONMENT_GUESS if image else 0
    asked = disk_asked(loaded, disk_gb)
    if asked is not None and asked[1] == "--disk":
        budget = check_budget(loaded, disk_gb * GIB, f"the {disk_gb} GB asked (--disk)", software)
        report(f"before renting: {budget.line()}")
        return disk_gb
    budget = budget_of(loaded, software)
    needed_gb = int(-(-budget.needed // GIB))
    if asked is not None and asked[0] > needed_gb:
        needed_gb, why = asked[0], f" ({asked[1]})"
    else:
        why = ""
    report(f"before renting: disk budget {budget.sum()}: offers with less than {needed_gb} GB "
           f"of disk{why} are left out")  # fmt: skip
    return needed_gb
