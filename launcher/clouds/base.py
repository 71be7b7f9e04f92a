"""What every cloud provider offers gpujob: offers, launch, describe, wait, terminate, list.

The shape is dstack's `Compute` (STYLE.md): one small interface, one module per cloud. Plain
dataclasses so that `up --dry-run` can print the offers it would take and tests can compare
them. Standard library only: the CLI imports this to parse `GPU[:N]` before any network.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

from launcher.clouds.gpus import GPUS as GPUS  # the catalog, re-exported
from launcher.clouds.gpus import GpuModel as GpuModel
from launcher.clouds.gpus import gpu_model, sold_where
from launcher.errors import GpujobError, UsageError
from launcher.state.owner import TAG as TAG  # the tag and the names it starts, re-exported
from launcher.state.owner import owner
from launcher.state.owner import owner_in_name as owner_in_name

if TYPE_CHECKING:
    from collections.abc import Callable

    from launcher.clouds.fleet import OfferBook
    from launcher.state.hosts import HostsDB


def instance_name(gpu: str) -> str:
    """`gpujob-<owner8>-<gpu>-<hex>`: the tag, this state's owner (made on first use), the
    GPU asked for, and a random part; at most 32 characters (Lambda allows 64)."""
    import secrets

    return f"{TAG}{owner().short}-{gpu}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class GpuRequest:
    """What `gpujob up` asks for; every field is a filter on offers."""

    gpu: GpuModel
    count: int = 1
    min_disk_gb: int = 0
    max_price: float | None = None
    region: str | None = None
    spot: bool = False
    """Interruptible: rented at a bid (Vast), cheaper, and taken back when outbid."""
    cluster: int | None = None
    """One physical cluster's offers only (Vast multi-node: clouds.vast_overlay)."""

    @property
    def label(self) -> str:
        return f"{self.gpu.name}:{self.count}"


def parse_gpu_request(
    text: str,
    *,
    min_disk_gb: int = 0,
    max_price: float | None = None,
    region: str | None = None,
    spot: bool = False,
) -> GpuRequest:
    """`a100`, `h100:8`, `A100-80GB:2`, `RTX4090` (SkyPilot's names, case-insensitive).
    Unknown names list the known ones, so a typo is answered with the fix rather than with
    "no offers"."""
    found = re.fullmatch(r"\s*([A-Za-z0-9][A-Za-z0-9 _-]*?)\s*(?::\s*(\d+))?\s*", text)
    if not found:
        raise UsageError(f"cannot read GPU request {text!r}", "write GPU or GPU:COUNT, e.g. h100:8")
    name, count = found.group(1).lower(), int(found.group(2) or 1)
    gpu = gpu_model(name)
    if gpu is None:
        raise UsageError(f"unknown GPU {name!r}", f"known GPUs: {', '.join(GPUS)}")
    if not 1 <= count <= 16:
        raise UsageError(f"GPU count {count} is out of range", "ask for 1 to 16 GPUs per host")
    if max_price is not None and max_price <= 0:
        raise UsageError("--max-price must be above 0 ($/hour)")
    return GpuRequest(gpu, count, min_disk_gb, max_price, region, spot)


@dataclass(frozen=True)
class Offer:
    """One thing that can be rented now. `raw_id` is what `launch` needs back: Lambda's
    `type@region`, Vast's ask id."""

    provider: str
    instance_type: str
    gpu_name: str
    gpu_count: int
    region: str
    price_per_hour: float
    disk_gb: float
    raw_id: str
    bid: float | None = None
    """An interruptible offer's bid, $/hour (what `launch` offers: Vast's `min_bid`); None
    for on-demand. `price_per_hour` is what the host costs at that bid, disk included."""


@dataclass(frozen=True)
class Instance:
    """A provider's instance as gpujob sees it. `status` is one of STATUSES whatever the
    cloud calls it; `ip`/`ssh_port` are None until the cloud says them."""

    provider: str
    id: str
    name: str
    status: str
    ip: str | None = None
    ssh_port: int | None = None
    ssh_user: str = "root"
    price_per_hour: float | None = None
    created_at: float | None = None
    detail: str = field(default="", compare=False)
    owner: str | None = field(default=None, compare=False)
    """The owner id it carries: a cloud's tag (the whole id), else its name's 8 characters;
    None for an instance from before owners."""
    user: str | None = field(default=None, compare=False)
    """Who launched it, where the cloud's tags say."""
    cloud_status: dict[str, object] = field(default_factory=dict, compare=False)
    """The cloud's own status fields, as it gave them, where `detail` (one word) is not all
    it said (Vast: actual_status, intended_status, cur_state, next_state, status_msg,
    is_bid); empty when the cloud no longer knows the instance. `status` folds them; a loss
    verdict needs them whole (launcher.clouds.loss)."""
    peer_ip: str | None = field(default=None, compare=False)
    """Where the job's other nodes reach it, when not at `ip`: its address on a Vast overlay
    network (clouds.vast_overlay), read on the host."""
    public: dict[int, str] = field(default_factory=dict, compare=False)
    """A port the job serves -> the `address:port` the cloud publishes it on, once running
    (Vast: the instance's `ports` mapping, clouds.vast_ports); empty where nothing is."""


STATUSES = ("booting", "running", "failed", "terminating", "terminated")


@dataclass(frozen=True)
class AutostopCall:
    """The call a host makes to end itself (launcher/agent/autostop.py, on the host): the
    API as the host reaches it, which instance, and whose key."""

    provider: str
    api_url: str
    instance_id: str
    action: str
    """`terminate`, or `stop` where the cloud can stop an instance (Vast)."""
    key: str | None = field(default=None, repr=False)
    """The user's key, for a 0600 file on the host (Lambda has no key scoped to one
    instance); None where the host holds a key for itself (Vast's CONTAINER_API_KEY)."""


def host_api_url(variable: str, url: str) -> str:
    """The API as a host reaches it: the same URL as from here, unless `variable` says
    otherwise (the lab's fakes listen on this machine's loopback, hosts reach them on the
    lab bridge)."""
    return (os.environ.get(variable) or url).rstrip("/")


LossKind = Literal["preempted", "host_lost"]


@dataclass(frozen=True)
class HostLoss:
    """A cloud's word that a rented host is lost (each cloud reads its own states:
    `Provider.loss_verdict`, launcher.clouds.loss)."""

    kind: LossKind
    reason: str
    """One line with the cloud's own words (its status, Vast's status_msg)."""


class ProviderError(GpujobError):
    """The cloud said no, or said something we cannot read; the message is the cloud's own."""


class CapacityError(ProviderError):
    """This offer cannot be had right now (sold out, or taken since the search): try the next."""


class LostAnswer(ProviderError):
    """A call that creates was sent but its answer never came: it may have created an
    instance, found later by its tag. Never retried blindly."""


class Provider(Protocol):
    name: str

    def offers(self, request: GpuRequest) -> list[Offer]:
        """Offers that fit `request`, cheapest first; may be empty."""
        ...

    def launch(
        self, offer: Offer, name: str, ssh_public_key: str, image: str | None = None
    ) -> Instance:
        """Rent one instance named `name` (already tagged); CapacityError to try the next.
        `image`: the job's, where the instance is a container of it (`runs_in_image`)."""
        ...

    def describe(self, instance_id: str) -> Instance:
        """The instance now; status `terminated` when the cloud no longer knows it."""
        ...

    def wait_until_running(self, instance_id: str, timeout: float) -> Instance:
        """Poll until `running` with an address; ProviderError on failure or timeout."""
        ...

    def terminate(self, instance_id: str) -> None:
        """Idempotent: an instance already gone or going is not an error."""
        ...

    def remove_added_keys(self, db: HostsDB, dry_run: bool = False) -> list[str]:
        """The account SSH keys gpujob registered with this cloud, removed (`down`, once no
        host of ours is left there); one line each of what was done (or would be)."""
        ...

    def list(self) -> list[Instance]:
        """Only instances carrying gpujob's tag, in any state but gone."""
        ...

    def autostop_call(self, instance_id: str, down: bool) -> AutostopCall:
        """How the host ends itself: terminated (`down`) or stopped where the cloud can."""
        ...

    @staticmethod
    def loss_verdict(inst: Instance, stop_asked: bool) -> HostLoss | None:
        """Pure: is the host `describe` just returned lost (None: fine, or still booting)?
        `stop_asked`: gpujob itself stopped it (autostop), so a stopped host is no loss."""
        ...


# Set when a launch fails or is interrupted (a signal: targets.cloud.interrupts): every poll loop of
# its worker threads ends at its next wait instead of polling a booting instance to its
# timeout while the user waits, and no further launch starts (targets.cloud.rent).
STOP = threading.Event()


class Stopped(ProviderError):
    """The command was interrupted; what it launched is being terminated."""


def pause(seconds: float) -> None:
    """A poll loop's wait, cut short by STOP."""
    if STOP.wait(seconds):
        raise Stopped("interrupted")


def poll_interval() -> float:
    """Seconds between status reads: Lambda allows about 1 request/s and Vast's show is
    limited to one per 2 s. `GPUJOB_POLL_S` shortens it in tests."""
    return float(os.environ.get("GPUJOB_POLL_S", "2.0"))


def poll_until_running(
    provider: Provider,
    instance_id: str,
    timeout: float,
    read: Callable[[str], Instance] | None = None,
    interval: Callable[[], float] = poll_interval,
) -> Instance:
    """`describe` (or `read`: many waiters sharing one list call, launcher.clouds.fleet)
    until running with an address; a failed or vanished instance ends it early, because
    neither turns into `running` on its own (both references say so). `interval`: the
    seconds to the next read, asked before each wait (a cloud's own pace)."""
    deadline = time.monotonic() + timeout
    while True:
        inst = (read or provider.describe)(instance_id)
        if inst.status == "running" and inst.ip and inst.ssh_port:
            return inst
        if inst.status in ("failed", "terminating", "terminated"):
            raise ProviderError(
                f"{provider.name}: instance {instance_id} is {inst.detail or inst.status}",
                "it will not become ready; it is being terminated",
            )
        if time.monotonic() >= deadline:
            raise ProviderError(
                f"{provider.name}: instance {instance_id} still {inst.detail or inst.status} "
                f"after {timeout:.0f} s",
                "raise --timeout for big images or multi-GPU hosts",
            )
        pause(interval())


MAX_OFFERS_TRIED = 25  # dstack's default for the same loop


def launch_cheapest(
    provider: Provider,
    request: GpuRequest,
    name: str,
    ssh_public_key: str,
    image: str | None = None,
    book: OfferBook | None = None,
) -> Instance:
    """The cheapest offer that really launches. Capacity is raced and Vast's offers churn,
    so after each refusal the offers are read again (skipping those tried), never trusted
    from one search; bounded, so a sold-out market ends in a clear error. `book`: the search
    shared by the launches of one `up --count N` (launcher.clouds.fleet)."""
    tried: dict[str, str] = {}
    while len(tried) < MAX_OFFERS_TRIED:
        offers = book.offers() if book is not None else provider.offers(request)
        fresh = [o for o in offers if o.raw_id not in tried]
        if not fresh:
            break
        offer = fresh[0]
        try:
            inst = provider.launch(offer, name, ssh_public_key, image)
        except CapacityError as refused:
            tried[offer.raw_id] = refused.message
            if book is not None:
                book.refused()
            continue
        if book is not None:
            book.took(offer)
        return inst
    if not tried:
        raise no_offers(provider.name, request)
    raise ProviderError(
        f"{provider.name}: no capacity for {request.label}: {len(tried)} offer(s) refused, "
        f"last: {list(tried.values())[-1]}",
        "try another --region, a higher --max-price, or later",
    )


def no_offers(provider: str, request: GpuRequest) -> ProviderError:
    limits = [f"under ${request.max_price:.2f}/h" if request.max_price is not None else "",
              f"in {request.region}" if request.region else "",
              f"with {request.min_disk_gb} GB disk" if request.min_disk_gb else ""]  # fmt: skip
    where = " ".join(x for x in limits if x)
    return ProviderError(
        f"{provider}: no offer for {request.label}" + (f" {where}" if where else ""),
        "raise --max-price, drop --region, or try the other --provider "
        f"({sold_where(request.gpu)})",
    )
