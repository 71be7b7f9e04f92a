"""Save a training step's inputs when it fails, so `gpujob replay` can run that step again on
one GPU (seed 003: days of hand-made pickling to get one failing actor call onto one GPU).

    import gpujob_capture

    with gpujob_capture.step(step, batch=batch, labels=labels) as captured:
        loss = model(batch, labels)
        captured.loss(loss)             # a non-finite loss saves the step too

    @gpujob_capture.captured()      # the same, around a function of (..., step)
    def train_step(batch, step): ...

A step is saved, as `<checkpoint dir>/captures/rank-K/step-N.pt`, when it raises (the
exception goes on, unchanged), when its loss is NaN or infinite, every `GPUJOB_CAPTURE_EVERY`
steps and at the steps listed in `GPUJOB_CAPTURE_STEPS` (`7,120`), or as `configure()` says.
The file holds the inputs given (tensors moved to the CPU, dtypes and shapes kept, inside
dicts, lists and tuples; other objects by their repr only), the RNG states taken as the step
began (Python, torch CPU, CUDA where initialized, NumPy where imported), the rank, world size,
step and why it was saved; `step-N.json` beside it says the step, rank, reason, error and
time without torch. gpujob's agent ships `captures/` with the checkpoints.

In the replay script, `load_capture()` (reading GPUJOB_REPLAY_INPUT) gives the inputs back and
restores the RNG states, and `replay_checkpoint()` names the checkpoint to load.

Shipped by gpujob into the job's `pylib/` folder (on PYTHONPATH): standard library only, torch
imported when first needed, so importing it costs nothing.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import os
import random
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FORMAT = 1
FOLDER = "captures"


@dataclass
class Settings:
    root: str | None = None
    every: int = 0
    steps: frozenset[int] = frozenset()


_settings = Settings()


def configure(root: str | None = None, every: int | None = None,
              steps: list[int] | None = None) -> None:  # fmt: skip
    """Where captures go (default: $GPUJOB_CHECKPOINT_DIR, else ./checkpoints) and which
    healthy steps are saved too; the environment's GPUJOB_CAPTURE_* are read otherwise."""
    if root is not None:
        _settings.root = root
    if every is not None:
        _settings.every = every
    if steps is not None:
        _settings.steps = frozenset(steps)


def _requested(step: int) -> bool:
    every = _settings.every or int(os.environ.get("GPUJOB_CAPTURE_EVERY") or 0)
    listed = os.environ.get("GPUJOB_CAPTURE_STEPS", "")
    chosen = _settings.steps | {int(s) for s in listed.replace(" ", "").split(",") if s}
    return step in chosen or (every > 0 and step % every == 0)


def _root() -> Path:
    return Path(_settings.root or os.environ.get("GPUJOB_CHECKPOINT_DIR") or "checkpoints")


def _rank_and_world() -> tuple[int, int]:
    """torchrun's, DeepSpeed's and accelerate's RANK, else torch.distributed's, else 0."""
    if "RANK" in os.environ:
        return int(os.environ["RANK"]), int(os.environ.get("WORLD_SIZE", "1"))
    dist = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rng_states() -> dict[str, Any]:
    """Every generator a step may draw from. CUDA's only once CUDA is up (asking would start
    it), NumPy's only where the program imported it."""
    states: dict[str, Any] = {"python": random.getstate()}
    torch = sys.modules.get("torch")
    if torch is not None:
        states["torch_cpu"] = torch.get_rng_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            states["cuda"] = torch.cuda.get_rng_state_all()
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        states["numpy"] = numpy.random.get_state()
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    random.setstate(states["python"])
    if "torch_cpu" in states:
        import torch

        torch.set_rng_state(states["torch_cpu"])
        if "cuda" in states and torch.cuda.is_available():
            count = min(len(states["cuda"]), torch.cuda.device_count())
            torch.cuda.set_rng_state_all(states["cuda"][:count])
    if "numpy" in states:
        import numpy

        numpy.random.set_state(states["numpy"])


def to_cpu(value: Any) -> Any:
    """Tensors detached onto the CPU (dtype and shape kept), containers walked, plain values
    kept; anything else (a model, a file) by its repr: the capture holds data, never code."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {key: to_cpu(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        items = [to_cpu(item) for item in value]
        return items if isinstance(value, list) else tuple(items)
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    return {"unsaved": type(value).__name__, "repr": repr(value)[:200]}


def to_device(value: Any, device: Any) -> Any:
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {key: to_device(item, device) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        items = [to_device(item, device) for item in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def path_for(step: int, rank: int, root: Path | None = None) -> Path:
    return (root or _root()) / FOLDER / f"rank-{rank}" / f"step-{step}.pt"


def save(step: int, inputs: dict[str, Any], rng: dict[str, Any], reason: str,
         error: BaseException | None = None, loss: float | None = None) -> Path:  # fmt: skip
    """Write one capture whole: a temporary name in the same folder, then renamed, so the
    agent never ships half a file."""
    import torch

    rank, world = _rank_and_world()
    final = path_for(step, rank)
    final.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "format": FORMAT, "step": step, "rank": rank, "world_size": world, "reason": reason,
        "error": f"{type(error).__name__}: {error}" if error is not None else None,
        "traceback": "".join(traceback.format_exception(error)) if error is not None else None,
        "loss": loss, "inputs": to_cpu(inputs), "rng": rng, "saved_at": time.time(),
    }  # fmt: skip
    tmp = final.with_name(f".tmp-{final.name}.{os.getpid()}")
    about = {key: body[key] for key in ("step", "rank", "world_size", "reason", "error",
                                        "loss", "saved_at")}  # fmt: skip
    try:
        torch.save(body, tmp)
        os.replace(tmp, final)
        # beside it, one JSON line: which rank failed first, told apart without torch
        tmp.write_text(json.dumps(about) + "\n")
        os.replace(tmp, final.with_suffix(".json"))
    finally:
        tmp.unlink(missing_ok=True)
    sys.stderr.write(f"[gpujob_capture] rank {rank} step {step} ({reason}): saved {final}\n")
    return final


@dataclass
class Step:
    """One step under watch: its number, inputs and the RNG states as it began."""

    number: int
    inputs: dict[str, Any]
    rng: dict[str, Any]
    saved: Path | None = None
    last_loss: float | None = field(default=None, repr=False)

    def loss(self, value: Any) -> Any:
        """Note the step's loss (a float or a one-element tensor); a NaN or an infinity saves
        the step. Returns `value`. A tensor is read once (one sync on a GPU)."""
        number = float(value.detach().float().sum()) if hasattr(value, "detach") else float(value)
        self.last_loss = number
        if not math.isfinite(number) and self.saved is None:
            self.saved = save(self.number, self.inputs, self.rng, "non-finite loss", loss=number)
        return value


@contextmanager
def step(number: int, **inputs: Any) -> Iterator[Step]:
    """Watch one step: saved if it raises, if its loss is not finite, or when requested."""
    current = Step(number, inputs, rng_states())
    try:
        yield current
    except BaseException as error:
        if not isinstance(error, (KeyboardInterrupt, SystemExit)) and current.saved is None:
            try:
                current.saved = save(number, inputs, current.rng, "exception", error,
                                     current.last_loss)  # fmt: skip
            except Exception as failed:  # the step's own error matters more than ours
                sys.stderr.write(f"[gpujob_capture] step {number}: not saved: {failed}\n")
        raise
    if current.saved is None and _requested(number):
        current.saved = save(number, inputs, current.rng, "requested", loss=current.last_loss)


def captured(step_arg: str = "step") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator: the function's arguments are the step's inputs, its argument named
    `step_arg` the step's number, and a number (or one-element tensor) it returns the loss."""

    def wrap(function: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def run(*args: Any, **kwargs: Any) -> Any:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            inputs = dict(bound.arguments)
            with step(int(inputs[step_arg]), **inputs) as current:
                result = function(*args, **kwargs)
                if isinstance(result, (int, float)) or getattr(result, "numel", lambda: 0)() == 1:
                    current.loss(result)
                return result

        return run

    return wrap


@dataclass
class Capture:
    step: int
    rank: int
    world_size: int
    reason: str
    error: str | None
    traceback: str | None
    loss: float | None
    inputs: dict[str, Any]
    rng: dict[str, Any]


def load_capture(path: str | os.PathLike[str] | None = None, *, device: Any = None,
                 restore_rng: bool = True) -> Capture:  # fmt: skip
    """The capture `gpujob replay` pulled (GPUJOB_REPLAY_INPUT), its tensors on `device`
    (default: where they are, the CPU), and the RNG states as the step began restored, so
    the step draws what it drew in the job."""
    import torch

    where = path or os.environ.get("GPUJOB_REPLAY_INPUT")
    if not where:
        raise SystemExit("gpujob_capture: no capture given: run under `gpujob replay` "
                         "(it sets GPUJOB_REPLAY_INPUT) or pass a path")  # fmt: skip
    body = torch.load(where, map_location="cpu", weights_only=False)
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise SystemExit(f"gpujob_capture: {where} is not a capture of format {FORMAT}")
    inputs = body["inputs"] if device is None else to_device(body["inputs"], device)
    if restore_rng:
        set_rng_states(body["rng"])
    return Capture(body["step"], body["rank"], body["world_size"], body["reason"],
                   body["error"], body["traceback"], body["loss"], inputs, body["rng"])  # fmt: skip


def replay_checkpoint() -> str | None:
    """The checkpoint `gpujob replay` pulled (the newest saved before the step), or None."""
    return os.environ.get("GPUJOB_REPLAY_CHECKPOINT") or None
