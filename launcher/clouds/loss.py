"""Is a rented host lost? The verdict a recovery acts on, from what the cloud says of it.

Pure: an `Instance` as `describe` returns it in, a `HostLoss` (or None: fine, or still
booting) out, so the rules can be read in one place and tested table-wise. Two kinds,
because they are counted apart (shared/reference/recovery.md §0.3, dstack's `interruption`
vs `error`): `preempted` is the cloud taking the host back (a Vast bid outbid, an instance
stopped or its container exited without gpujob asking, Lambda's `preempted`); `host_lost`
is a host that is gone or broken (destroyed, terminated, Vast `offline`/`unknown`, Lambda
`unhealthy`). Neither turns back into a running job on its own: Vast may resume an outbid
instance, but when is unbounded (recovery.md §5.2), so a recovery starts elsewhere.

No grace period here: a caller that wants one (Lambda's `unhealthy` can be brief) asks
again later; a verdict is about one reading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from launcher.clouds.base import Instance
from launcher.clouds.vast import BOOTING as VAST_STARTING

LossKind = Literal["preempted", "host_lost"]
VAST_GONE = {"offline", "unknown"}
"""The host stopped answering Vast: never `running` again on its own (§4.5)."""
VAST_STOPPED = {"stopped", "exited", "frozen"}
LAMBDA_FINE = {"booting", "active"}


@dataclass(frozen=True)
class HostLoss:
    kind: LossKind
    reason: str
    """One line with the cloud's own words (its status, Vast's status_msg)."""


def loss_verdict(inst: Instance, *, stop_asked: bool = False) -> HostLoss | None:
    """The verdict on `inst` as described just now. `stop_asked`: gpujob itself stopped it
    (autostop on Vast), so a stopped instance is no loss."""
    if inst.provider == "vast":
        return _vast(inst, stop_asked)
    if inst.provider == "lambda":
        return _lambda(inst)
    if inst.status in ("terminating", "terminated", "failed"):
        return HostLoss("host_lost", f"{inst.provider}: {inst.id} is {inst.detail or inst.status}")
    return None


def _vast(inst: Instance, stop_asked: bool) -> HostLoss | None:
    said = inst.cloud_status
    where = f"vast: instance {inst.id}"
    if inst.status == "terminated":  # `describe` found no such id: destroyed (by whom, Vast
        return HostLoss("host_lost", f"{where} is gone (Vast no longer knows it)")  # says not)
    if not said:  # not described (`launch`'s answer): nothing said yet, so nothing lost
        return None
    actual = said.get("actual_status")
    states = (said.get("intended_status"), said.get("cur_state"), said.get("next_state"))
    message = str(said.get("status_msg") or "").strip()
    words = f"actual_status {actual}" + (f": {message}" if message else "")
    if said.get("cur_state") == "unloaded":
        return HostLoss("host_lost", f"{where} was released (cur_state unloaded; {words})")
    outbid = states == ("stopped", "stopped", "stopped")
    if outbid or actual in VAST_STOPPED or said.get("intended_status") == "stopped":
        if stop_asked:
            return None
        if outbid and said.get("is_bid"):
            return HostLoss("preempted", f"{where} was outbid: intended, current and next "
                            f"state stopped ({words})")  # fmt: skip
        return HostLoss("preempted", f"{where} stopped without gpujob asking ({words}; "
                        f"intended_status {states[0]}, cur_state {states[1]})")  # fmt: skip
    if actual in VAST_GONE:
        return HostLoss("host_lost", f"{where} is {actual}: its host stopped answering Vast "
                        f"({words})")  # fmt: skip
    if actual == "created" and "oci runtime" in message.lower():
        return HostLoss("host_lost", f"{where}: its container failed to start ({words})")
    if actual == "running" or actual in VAST_STARTING:
        return None
    return HostLoss("host_lost", f"{where} is in a state gpujob does not know ({words})")


def _lambda(inst: Instance) -> HostLoss | None:
    status = inst.detail
    where = f"lambda: instance {inst.id}"
    if inst.status == "terminated" and not status:  # `describe`: 404 object-does-not-exist
        return HostLoss("host_lost", f"{where} is gone (Lambda no longer knows it)")
    if not status:  # not described (`launch`'s answer): nothing said yet, so nothing lost
        return None
    if status in LAMBDA_FINE:
        return None
    if status == "preempted":
        return HostLoss("preempted", f"{where} was preempted (status preempted)")
    if status == "unhealthy":
        return HostLoss("host_lost", f"{where} is unhealthy (status unhealthy: Lambda's health "
                        "checks fail)")  # fmt: skip
    if status in ("terminating", "terminated"):
        return HostLoss("host_lost", f"{where} was terminated (status {status})")
    return HostLoss("host_lost", f"{where} is in a state gpujob does not know (status {status})")
