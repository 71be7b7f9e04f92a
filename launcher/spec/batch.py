"""The batch arithmetic users get wrong by hand (seed 001): a global batch that the world size
times the micro batch does not divide is refused with the division, what shell arithmetic would
silently do instead, and the valid choices both ways."""

from __future__ import annotations

from pydantic import Field

from launcher.spec.limits import StrictModel


class BatchSpec(StrictModel):
    global_batch: int | None = Field(default=None, ge=1)
    micro_batch: int | None = Field(default=None, ge=1)


def batch_refusal(
    global_batch: int,
    world: int,
    micro: int,
    micro_name: str = "batch.micro_batch",
    global_name: str = "global_batch",
) -> str:
    """The division, what shell arithmetic would silently train on instead (seed 001's
    start.sh), and the valid choices both ways; the names as the user wrote them."""
    per_step = world * micro
    floor = global_batch // per_step
    silent = (
        f"shell arithmetic would take {floor} and train on {floor * per_step} per step"
        if floor
        else "shell arithmetic would take 0 steps of accumulation"
    )
    worlds = [w for w in range(1, 1025) if global_batch % (w * micro) == 0]
    other_way = (
        f", or a world size of {', '.join(map(str, worlds[:8]))}"
        if worlds
        else f" (no world size divides it with {micro_name} {micro}: that needs a "
        f"{micro_name} that divides {global_batch})"
    )
    return (
        f"{global_batch} / (world_size {world} x {micro_name} {micro}) = "
        f"{global_batch / per_step:.2f}, not a whole number of accumulation steps; {silent}; "
        f"use a {global_name} of {nearest_multiples(global_batch, per_step)}{other_way}"
    )


def nearest_multiples(value: int, step: int) -> str:
    below = (value // step) * step
    above = below + step
    return f"{below} or {above}" if below else str(above)
