"""`submit --ladder 1,2,4` (world sizes) or `--ladder nodes:1,2` (node counts): the job planned
at each rung of a scale-up ladder, before anything runs (seed 001 found its `bad_alloc` with
a ladder of scripts run by hand: one GPU, then four, then eight).

A rung is the spec with its layout changed and nothing else: the processes (and GPUs) per
node and the node count, given to the launch as `--set` overrides, so each rung is planned
exactly as a submit of it would be. The batch arithmetic is checked per rung here, and every
rung that cannot divide is named at once, before the first rung starts. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass

from launcher.errors import ManyUsageErrors, UsageError
from launcher.spec.batch import batch_refusal
from launcher.spec.job import JobSpec
from launcher.spec.run import ONE_PER_NODE

MAX_RUNGS = 16
LADDER_HINT = "write world sizes, e.g. --ladder 1,2,4, or node counts, e.g. --ladder nodes:1,2"


@dataclass(frozen=True)
class Rung:
    """One rung: its world size and the layout that gives it."""

    world: int
    nodes: int
    nproc_per_node: int
    gpu: str | None
    """`NAME:COUNT` for resources.accelerators (None: a CPU job)."""
    grad_accum_steps: int | None
    one_per_node: bool = False
    """launcher none, ray, a shell block: no `run.nproc_per_node` to set."""

    @property
    def sets(self) -> tuple[str, ...]:
        """The rung as `--set` overrides of the spec, appended after the user's own."""
        sets = [f"nodes={self.nodes}"]
        if not self.one_per_node:
            sets.append(f"run.nproc_per_node={self.nproc_per_node}")
        if self.gpu is not None:
            sets.append(f"resources.accelerators={self.gpu}")
        return tuple(sets)

    def job_id(self, ladder_id: str) -> str:
        return f"{ladder_id}-r{self.world}"

    def line(self) -> str:
        gpus = f", {self.gpu} per node" if self.gpu else ""
        accum = f", grad_accum_steps {self.grad_accum_steps}" if self.grad_accum_steps else ""
        return (f"world {self.world}: {self.nodes} node(s) x {self.nproc_per_node} "
                f"process(es){gpus}{accum}; --set {' --set '.join(self.sets)}")  # fmt: skip


@dataclass(frozen=True)
class Ladder:
    """The rungs in the order they run, each bounded to `steps` steps (GPUJOB_MAX_STEPS), or
    with `steps` None (no --ladder-steps) to its first complete checkpoint: the agent's own
    word that a save finished, whatever the framework, so no job has to honour a variable."""

    rungs: tuple[Rung, ...]
    steps: int | None

    @property
    def until_checkpoint(self) -> bool:
        return self.steps is None

    def bound(self) -> str:
        if self.steps is not None:
            return f"each up to {self.steps} steps (GPUJOB_MAX_STEPS)"
        return "each until its first complete checkpoint (or its own end)"

    def text(self, ladder_id: str) -> str:
        lines = [f"ladder {ladder_id}: {len(self.rungs)} rung(s), {self.bound()}, in order; "
                 "the first that fails ends it"]  # fmt: skip
        lines += [f"  {rung.job_id(ladder_id)}  {rung.line()}" for rung in self.rungs]
        return "\n".join(lines) + "\n"


def parse_rungs(text: str) -> tuple[bool, list[int]]:
    """`1,2,4` -> (False, [1, 2, 4]); `nodes:1,2` -> (True, [1, 2]). Whole numbers going up."""
    flag = f"--ladder {text}"
    by_nodes = text.strip().startswith("nodes:")
    body = text.strip().removeprefix("nodes:")
    items = [item.strip() for item in body.split(",")]
    if not body.strip() or any(not item.isdigit() or int(item) < 1 for item in items):
        bad = next((item for item in items if not item.isdigit() or int(item) < 1), body)
        raise UsageError(f"{flag}: `{bad}` is not a whole number of 1 or more", LADDER_HINT)
    sizes = [int(item) for item in items]
    if any(b <= a for a, b in itertools.pairwise(sizes)):
        ordered = ",".join(map(str, sorted(set(sizes))))
        raise UsageError(f"{flag}: a ladder goes up, each rung larger than the one before",
                         f"write them in order, e.g. --ladder {ordered}")  # fmt: skip
    if len(sizes) > MAX_RUNGS:
        raise UsageError(f"{flag}: {len(sizes)} rungs; a ladder has at most {MAX_RUNGS}")
    return by_nodes, sizes


def plan_ladder(
    spec: JobSpec, text: str, steps: int | None, batch_where: str = "batch.global_batch"
) -> Ladder:
    """Each rung's layout from the spec's (processes and GPUs per node, nodes), every rung
    that cannot be laid out or whose batch cannot divide refused together, by name. `steps`
    None: each rung ends at its first complete checkpoint."""
    by_nodes, sizes = parse_rungs(text)
    if steps is not None and steps < 1:
        raise UsageError(f"--ladder-steps {steps}: a rung runs at least one step")
    rungs, refusals = [], []
    for size in sizes:
        try:
            rung = _rung(spec, size, by_nodes)
            rungs.append(_with_batch(spec, rung, batch_where))
        except UsageError as err:
            refusals.append(f"--ladder {text}: rung {'nodes:' if by_nodes else ''}{size}: "
                            f"{err.message}")  # fmt: skip
    if refusals:
        raise ManyUsageErrors(refusals)
    return Ladder(tuple(rungs), steps)


def _rung(spec: JobSpec, size: int, by_nodes: bool) -> Rung:
    per_node = spec.nproc_per_node
    one_per_node = spec.run.launcher_name in ONE_PER_NODE
    if by_nodes:
        nodes, nproc = size, per_node
    elif one_per_node:  # launcher none, ray, a shell block: one process per node
        nodes, nproc = size, 1
    elif spec.nodes == 1 or size <= per_node:  # one node, `size` processes (GPUs)
        nodes, nproc = 1, size
    elif size % per_node == 0:
        nodes, nproc = size // per_node, per_node
    else:
        raise UsageError(f"world size {size} is not a multiple of the spec's {per_node} "
                         f"processes per node over {spec.nodes} nodes")  # fmt: skip
    gpu = None
    if spec.resources.gpus_per_node:
        count = spec.resources.gpus_per_node if one_per_node or by_nodes else nproc
        gpu = f"{spec.resources.gpu_name}:{count}"
    world = nodes * (1 if one_per_node else nproc)
    return Rung(world=world, nodes=nodes, nproc_per_node=nproc, gpu=gpu, grad_accum_steps=None,
                one_per_node=one_per_node)  # fmt: skip


def _with_batch(spec: JobSpec, rung: Rung, where: str) -> Rung:
    """The spec's batch arithmetic at this rung's world size (spec/batch.py's refusal)."""
    total, micro = spec.batch.global_batch, spec.batch.micro_batch
    if total is None or micro is None:
        return rung
    if total % (rung.world * micro):
        raise UsageError(f"{where}: {batch_refusal(total, rung.world, micro)}")
    return dataclasses.replace(rung, grad_accum_steps=total // (rung.world * micro))
