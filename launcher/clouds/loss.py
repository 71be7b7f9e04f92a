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

from launcher.clouds.base import HostLoss, Instance, LossKind

__all__ = ["HostLoss", "LossKind", "loss_verdict"]


def loss_verdict(inst: Instance, *, stop_asked: bool = False) -> HostLoss | None:
    """The verdict on `inst` as described just now, in its cloud's own reading
    (`Provider.loss_verdict` in each cloud's module). `stop_asked`: gpujob itself stopped it
    (autostop on Vast), so a stopped instance is no loss."""
    from launcher.clouds.registry import CLOUDS, provider_class

    if inst.provider in CLOUDS:
        return provider_class(inst.provider).loss_verdict(inst, stop_asked)
    if inst.status in ("terminating", "terminated", "failed"):
        return HostLoss("host_lost", f"{inst.provider}: {inst.id} is {inst.detail or inst.status}")
    return None
