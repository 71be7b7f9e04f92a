"""Quickstart training: a small causal LM with random weights, trained with DDP under torchrun.

No download anywhere: the model is a small Llama-style LM in plain torch (model.py: no
transformers import, a third of a CPU rank's time), the text is generated here (a tiny
grammar, byte-level tokens), so the loss falls quickly and visibly. gpujob passes
the derived batch sizes and checkpoint settings as GPUJOB_* variables; flags override them.
`GPUJOB_MAX_STEPS` (a rung of `submit --ladder`) caps `--steps`.
Checkpoints follow the Hugging Face layout (`checkpoint-N/`: `model.safetensors` and
`config.json` that transformers' LlamaForCausalLM loads, `trainer_state.json` written last),
saved by rank 0 into a temporary folder and renamed, so a half-written one never carries
the final name; then the `.gpujob-complete` marker (gpujob's contract, see
launcher/agent/ckpt_store.py) says the save returned, and only then may gpujob sync it.

SIGTERM (a cancel, `max_duration`, a GPU-idle stop: gpujob's agent sends it, and torchrun
passes it to every rank) ends the run at the end of the step under way, on every rank at the
same step (the stop is summed with the loss), with a checkpoint of that step: the work up to
the signal is saved, and gpujob syncs it before the job ends.

`GPUJOB_RESUME_FROM` (or `--resume-from`) naming a complete checkpoint folder continues that
run: weights, optimizer, step, every RNG and each rank's data position come back, so steps
N+1.. see the batches and give the losses an uninterrupted run would. Each rank's RNGs and
data position are in `rng_state_<rank>.pth` (Hugging Face's name), gathered and written by
rank 0, and only rank 0 reads the folder: gpujob's recovery pulls it onto the head node only.
A folder this run cannot continue from (incomplete, unreadable, saved with other model
flags) is refused in one line, exit 2.

Each step runs under gpujob_capture: one that raises or whose loss is not finite (or one
listed in GPUJOB_CAPTURE_STEPS) leaves its batches and RNG states in
`<checkpoints>/captures/rank-K/step-N.pt`, and `gpujob replay JOB -- python replay.py` runs
it again on one device (replay.py; docs/replay.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import NoReturn, TextIO

import torch
import torch.distributed as dist
from model import CausalLM, ModelConfig
from torch.nn.parallel import DistributedDataParallel

try:  # shipped by gpujob into the job's pylib/ (on PYTHONPATH): see replay.py
    import gpujob_capture
except ImportError:  # run bare (torchrun train.py): steps run unwatched
    gpujob_capture = None

NOUNS = ["cat", "dog", "model", "gpu", "node", "rank", "token", "loss", "batch", "host"]
VERBS = ["sees", "trains", "syncs", "saves", "loads", "feeds", "moves", "checks"]
ADJECTIVES = ["small", "fast", "quiet", "pinned", "remote", "stable", "large", "bright"]


def say(text: str) -> None:
    """Print one line in a single write: every rank shares torchrun's stdout, and gpujob runs
    Python unbuffered, where `print` writes the text and its newline separately, so another
    rank's line could land between them (`rank 1/2: donefinal loss ...`)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--micro-batch", type=int, default=env_int("GPUJOB_MICRO_BATCH", 4))
    parser.add_argument("--grad-accum", type=int, default=env_int("GPUJOB_GRAD_ACCUM_STEPS", 1))
    parser.add_argument("--save-every", type=int, default=env_int("GPUJOB_SAVE_EVERY", 20))
    parser.add_argument("--keep-last", type=int, default=env_int("GPUJOB_KEEP_LAST", 2))
    parser.add_argument("--checkpoint-dir", default=os.environ.get("GPUJOB_CHECKPOINT_DIR", "ckpt"))
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--log-every", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--resume-from",
        default=os.environ.get("GPUJOB_RESUME_FROM") or None,
        help="A complete checkpoint-N folder to continue from (default: $GPUJOB_RESUME_FROM).",
    )
    parser.add_argument(
        "--jit-op", action="store_true", help="Build and use a JIT-compiled op (seed 001)."
    )
    parser.add_argument(
        "--warmup-steps", type=int, default=10, help="Left out of the steady tokens/s figure."
    )
    args = parser.parse_args()
    args.steps = min(args.steps, env_int("GPUJOB_MAX_STEPS", args.steps))  # a ladder's rung
    return args


def sentence(rng: random.Random) -> str:
    return (
        f"the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} {rng.choice(VERBS)} "
        f"the {rng.choice(NOUNS)}. "
    )


class Batches:
    """Endless byte-level batches, a different stream per rank. Its state (the generator's
    and how many batches it served) is the data position a resumed run restores."""

    def __init__(self, rank: int, micro_batch: int, seq_len: int, device: torch.device) -> None:
        self.rng = random.Random(1000 + rank)
        self.served = 0
        self.micro_batch, self.seq_len, self.device = micro_batch, seq_len, device

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        rows = []
        for _ in range(self.micro_batch):
            text = ""
            while len(text) < self.seq_len + 1:
                text += sentence(self.rng)
            rows.append(list(text.encode()[: self.seq_len + 1]))
        data = torch.tensor(rows, dtype=torch.long, device=self.device)
        self.served += 1
        return data[:, :-1], data[:, 1:]

    def state_dict(self) -> dict:
        return {"rng": self.rng.getstate(), "served": self.served}

    def load_state_dict(self, state: dict) -> None:
        self.rng.setstate(state["rng"])
        self.served = int(state["served"])


def rng_state(data: Batches) -> dict:
    """This rank's randomness and data position, as Hugging Face keeps it per process."""
    state = {"python": random.getstate(), "cpu": torch.get_rng_state(), "data": data.state_dict()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict, data: Batches) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    data.load_state_dict(state["data"])


def save_checkpoint(
    model: CausalLM, optimizer, step: int, loss: float, args, rng_states: list[dict]
) -> Path:
    from safetensors.torch import save_file

    root = Path(args.checkpoint_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"checkpoint-{step}"
    tmp = root / f".tmp-checkpoint-{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    # "format": "pt" is what save_pretrained writes and transformers' loader looks for
    save_file(model.state_dict(), tmp / "model.safetensors", metadata={"format": "pt"})
    model.config.save(tmp)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    for rank, state in enumerate(rng_states):
        torch.save(state, tmp / f"rng_state_{rank}.pth")
    state = {"global_step": step, "loss": loss, "saved_at": time.time(),
             "world_size": len(rng_states)}  # fmt: skip
    (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, final)
    mark_complete(final, step)
    prune(root, args.keep_last)
    return final


def mark_complete(path: Path, step: int) -> None:
    """gpujob's marker: step and every file's size, written atomically after the save."""
    files = {
        p.relative_to(path).as_posix(): p.stat().st_size
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }
    body = {"step": step, "files": files, "written_by": "program"}
    tmp = path / ".gpujob-complete.tmp"
    tmp.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path / ".gpujob-complete")


def prune(root: Path, keep_last: int) -> None:
    """Keep the newest `keep_last` by step number (never by mtime)."""
    steps = sorted(
        int(p.name.split("-")[1])
        for p in root.glob("checkpoint-*")
        if p.name.split("-")[1].isdigit()
    )
    for step in steps[:-keep_last] if keep_last > 0 else []:
        shutil.rmtree(root / f"checkpoint-{step}", ignore_errors=True)


def read_checkpoint(
    path: Path, world: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> tuple[dict, list[dict | None]] | None:
    """Rank 0's read of a complete checkpoint into `model` and `optimizer` (built from this
    run's flags), with the trainer state (step, loss) and each rank's RNG file (None for a
    rank it has none for: saved with another world size). None, said in one line, for a
    folder this run cannot continue from: incomplete, unreadable, or another model's (a
    user's slip, such as another --hidden, is no traceback)."""
    if not (path / ".gpujob-complete").is_file():
        say(f"cannot resume: {path} is not a complete checkpoint (no .gpujob-complete)")
        return None
    import pickle

    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        weights: dict = {}
        for shard in sorted(path.glob("*.safetensors")):
            weights.update(load_file(shard))
        if not weights:
            raise ValueError("it holds no model weights (*.safetensors)")
        trainer = trainer_state(path / "trainer_state.json")
        state = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
        files = [path / f"rng_state_{rank}.pth" for rank in range(world)]
        rngs = [rng_file(f) if f.is_file() else None for f in files]
    except (KeyError, OSError, RuntimeError, ValueError, SafetensorError,
            pickle.UnpicklingError) as error:  # fmt: skip
        say(f"cannot resume: {path}: {unreadable(error)}")
        return None
    try:
        model.load_state_dict(weights, strict=True)
        optimizer.load_state_dict(state)
    except (KeyError, RuntimeError, ValueError) as error:
        say(f"cannot resume: {path} holds another model ({first_line(error)}); resume with "
            "the --hidden, --layers and --heads it was saved with")  # fmt: skip
        return None
    if None in rngs or (path / f"rng_state_{world}.pth").exists():
        say(f"warning: {path.name} was saved with another world size: RNG and data position "
            "are not restored for every rank, so the losses will differ from an "
            "uninterrupted run")  # fmt: skip
    return trainer, rngs


def trainer_state(file: Path) -> dict:
    body = json.loads(file.read_text())
    if not isinstance(body, dict) or "global_step" not in body or "loss" not in body:
        raise ValueError(f"{file.name} has no global_step and loss")
    return {"global_step": int(body["global_step"]), "loss": float(body["loss"])}


def rng_file(file: Path) -> dict:
    state = torch.load(file, weights_only=True)
    if not isinstance(state, dict) or not {"python", "cpu", "data"} <= state.keys():
        raise ValueError(f"{file.name} is not an RNG state of this program")
    return state


def unreadable(error: Exception) -> str:
    if isinstance(error, OSError) and error.filename:
        return f"cannot read {Path(error.filename).name} ({error.strerror or error})"
    return first_line(error)


def first_line(error: Exception) -> str:
    """The telling line of a message: torch's load_state_dict opens with a header line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].endswith(":"):
        return lines[1].rstrip(".")
    return lines[0].rstrip(".") if lines else type(error).__name__


def resume(
    path: Path,
    rank: int,
    world: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
) -> tuple[dict, dict | None]:
    """Rank 0 reads the folder (it is on the head only) into the model and the optimizer;
    the others get the rest from it. The weights need no sending: DDP, which wraps the model
    next, broadcasts rank 0's. The optimizer state goes tensor by tensor: pickled whole it
    would be one object as big as two models (8 GB for the GPU profile's), and under NCCL
    copied to the GPU. One rank sends nothing. A folder rank 0 refuses ends every rank, at
    once and alike (exit 2)."""
    read = read_checkpoint(path, world, model, optimizer) if rank == 0 else None
    if world == 1:
        if read is None:
            leave(2)
        return read[0], read[1][0]
    agreed = torch.tensor([float(read is not None)], device=device)
    dist.broadcast(agreed, src=0)
    if not agreed.item():
        leave(2)
    share_optimizer_state(optimizer, rank, device)
    trainer: list = [read[0] if read else None]
    dist.broadcast_object_list(trainer, src=0)  # a step and a loss
    mine: list = [None]
    dist.scatter_object_list(mine, list(read[1]) if read else None, src=0)
    return trainer[0], mine[0]


def share_optimizer_state(
    optimizer: torch.optim.Optimizer, rank: int, device: torch.device
) -> None:
    """Rank 0's optimizer state onto every rank. Only its layout (which tensor of which
    parameter, shapes, dtypes, the hyper-parameters) is a pickled object; each tensor goes
    by `dist.broadcast`, on the device the backend sends from (the GPU under NCCL), and a
    tensor rank 0 keeps on the CPU (AdamW's `step`) is put back there."""
    state = optimizer.state_dict() if rank == 0 else None
    layout: list = [None]
    if state is not None:
        layout[0] = ([(index, key, ("tensor", tuple(value.shape), value.dtype,
                                    value.device.type) if torch.is_tensor(value)
                       else ("value", value))
                      for index, values in state["state"].items()
                      for key, value in values.items()], state["param_groups"])  # fmt: skip
    dist.broadcast_object_list(layout, src=0)
    entries, groups = layout[0]
    received: dict = {}
    for index, key, (kind, *described) in entries:
        if kind == "value":  # a plain number, carried in the layout
            received.setdefault(index, {})[key] = described[0]
            continue
        shape, dtype, where = described
        if state is not None:
            tensor = state["state"][index][key].to(device)
        else:
            tensor = torch.empty(shape, dtype=dtype, device=device)
        dist.broadcast(tensor, src=0)
        if state is None:
            received.setdefault(index, {})[key] = tensor.cpu() if where == "cpu" else tensor
    if state is None:
        optimizer.load_state_dict({"state": received, "param_groups": groups})


def leave(code: int) -> NoReturn:
    dist.destroy_process_group()
    raise SystemExit(code)


def main() -> None:
    args = parse_args()
    cuda = torch.cuda.is_available()
    if args.jit_op:
        import jit_ops

        probe = torch.ones(4, device="cuda" if cuda else "cpu")
        assert float(jit_ops.ops.scale(probe, 2.0).sum()) == 8.0
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(args.seed)
    say(f"rank {rank}/{world}: ready on {device} ({socket.gethostname()})")

    config = ModelConfig.for_run(args.hidden, args.layers, args.heads, args.seq_len)
    with torch.device(device):  # built where it trains: a 1B model on the CPU takes ~15 s
        model = CausalLM(config)
    params = sum(p.numel() for p in model.parameters())
    start, loss_value, resumed = 0, float("nan"), None
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)  # DDP's are the same ones
    if args.resume_from:
        resumed = resume(Path(args.resume_from), rank, world, model, optimizer, device)
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    data = Batches(rank, args.micro_batch, args.seq_len, device)
    if resumed is not None:
        trainer, own_rng = resumed
        start, loss_value = trainer["global_step"], trainer["loss"]
        if own_rng is not None:
            set_rng_state(own_rng, data)
        if rank == 0:
            say(f"resumed from checkpoint-{start} (step {start})")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")
    if rank == 0:
        say(
            f"model: {params / 1e6:.2f}M parameters; global batch "
            f"{args.micro_batch * args.grad_accum * world} = micro {args.micro_batch} x accum "
            f"{args.grad_accum} x world {world}"
        )

    stop_requested: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stop_requested.append(signum))
    tokens_per_step = args.micro_batch * args.grad_accum * world * args.seq_len
    started = time.perf_counter()
    window_start, window_step = started, start
    metrics, step_start = open_metrics() if rank == 0 else None, started
    steady_start = started
    for step in range(start + 1, args.steps + 1):
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=device)
        batches = [next(data) for _ in range(args.grad_accum)]
        # A step that raises or whose loss is not finite is saved for `gpujob replay`
        watch = gpujob_capture.step(step, batches=batches) if gpujob_capture else nullcontext()
        with watch as captured:
            for micro, (inputs, labels) in enumerate(batches):
                sync = micro == args.grad_accum - 1
                with autocast, nullcontext() if sync else ddp.no_sync():
                    total += micro_step(ddp, inputs, labels, args.grad_accum)
            optimizer.step()
            if step == start + args.warmup_steps:
                if cuda:
                    torch.cuda.synchronize()
                steady_start = time.perf_counter()
            # one collective for the loss and the stop: every rank stops after the same step
            flag = torch.tensor(float(bool(stop_requested)), device=device)
            reduced = torch.stack([total, flag])
            dist.all_reduce(reduced)
            # one copy to the host, as `.item()` was
            loss_sum, stops, mine = torch.cat([reduced, total.reshape(1)]).tolist()
            if captured is not None:
                captured.loss(mine)
        loss_value, stopping = loss_sum / world, stops > 0
        if metrics is not None:  # every step's figures, for `gpujob metrics`
            now = time.perf_counter()
            rate, step_start = tokens_per_step / max(now - step_start, 1e-9), now
            metrics.write(json.dumps({"step": step, "loss": round(loss_value, 5),
                                      "tokens_per_s": round(rate)}) + "\n")  # fmt: skip
        if rank == 0 and (step % args.log_every == 0 or step == start + 1):
            now = time.perf_counter()
            rate = tokens_per_step * (step - window_step) / max(now - window_start, 1e-9)
            say(f"step {step}/{args.steps} loss {loss_value:.4f} tokens/s {rate:.0f}")
            window_start, window_step = now, step
        if stopping or (args.save_every and step % args.save_every == 0):
            rngs = [None] * world if rank == 0 else None
            dist.gather_object(rng_state(data), rngs, dst=0)
            if rank == 0:
                path = save_checkpoint(model, optimizer, step, loss_value, args, rngs)
                say(f"checkpoint saved: {path}")
            dist.barrier()
        if stopping:
            stopped(rank, step, args.steps)
    if cuda:
        torch.cuda.synchronize()
    finished = time.perf_counter()
    ran = args.steps - start
    if rank == 0:
        say(f"train tokens/s {tokens_per_step * ran / (finished - started):.0f} over {ran} steps")
        if ran > args.warmup_steps:
            steady = tokens_per_step * (ran - args.warmup_steps) / (finished - steady_start)
            say(f"steady tokens/s {steady:.0f} after {args.warmup_steps} warm-up steps")
        say(f"final loss {loss_value:.4f}")
    say(f"rank {rank}/{world}: done")
    dist.barrier()
    dist.destroy_process_group()
    # Exit here, before this frame's locals are freed: with gloo, the DDP reducer's destructor
    # can join a gloo worker thread that waits for the GIL the main thread holds, and the rank
    # hangs after "done" (seen here with torch 2.13.0+cpu, about one run in three).
    sys.stdout.flush()
    os._exit(0)


def micro_step(model, inputs: torch.Tensor, labels: torch.Tensor, accum: int) -> torch.Tensor:
    """One micro-batch's forward and backward; its loss (detached) as a share of the step's.
    replay.py runs it too, on a captured step's batches."""
    logits = model(inputs)
    loss = torch.nn.functional.cross_entropy(
        logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1)
    )
    (loss / accum).backward()
    return loss.detach() / accum


def open_metrics() -> TextIO | None:
    """`$GPUJOB_METRICS`, where gpujob's agent reads one JSON object per step (line-buffered:
    each step's line is whole in the file when written, and os._exit loses none)."""
    path = os.environ.get("GPUJOB_METRICS")
    return open(path, "a", buffering=1) if path else None


def stopped(rank: int, step: int, steps: int) -> None:
    """SIGTERM: the checkpoint of this step is saved; leave as a terminated program does."""
    if rank == 0:
        say(f"stopped by SIGTERM at step {step}/{steps}; checkpoint-{step} saved")
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(128 + signal.SIGTERM)  # os._exit: see the end of main()


if __name__ == "__main__":
    main()
