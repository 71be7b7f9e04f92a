"""Quickstart training: a small causal LM with random weights, trained with DDP under torchrun.

No download anywhere: the model is built from a transformers config, the text is generated
here (a tiny grammar, byte-level tokens), so the loss falls quickly and visibly. gpujob passes
the derived batch sizes and checkpoint settings as GPUJOB_* variables; flags override them.
Checkpoints follow the Hugging Face layout (`checkpoint-N/`, `trainer_state.json` written
last), saved by rank 0 into a temporary folder and renamed, so a half-written one never
carries the final name; then the `.gpujob-complete` marker (gpujob's contract, see
launcher/agent/ckpt_store.py) says the save returned, and only then may gpujob sync it.

SIGTERM (a cancel, `max_duration`, a GPU-idle stop: gpujob's agent sends it, and torchrun
passes it to every rank) ends the run at the end of the step under way, on every rank at the
same step (the stop is summed with the loss), with a checkpoint of that step: the work up to
the signal is saved, and gpujob syncs it before the job ends.
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

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from transformers import LlamaConfig, LlamaForCausalLM

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
        "--jit-op", action="store_true", help="Build and use a JIT-compiled op (seed 001)."
    )
    parser.add_argument(
        "--warmup-steps", type=int, default=10, help="Left out of the steady tokens/s figure."
    )
    return parser.parse_args()


def sentence(rng: random.Random) -> str:
    return (
        f"the {rng.choice(ADJECTIVES)} {rng.choice(NOUNS)} {rng.choice(VERBS)} "
        f"the {rng.choice(NOUNS)}. "
    )


def batches(rank: int, micro_batch: int, seq_len: int, device: torch.device):
    """Endless byte-level batches, a different stream per rank."""
    rng = random.Random(1000 + rank)
    while True:
        rows = []
        for _ in range(micro_batch):
            text = ""
            while len(text) < seq_len + 1:
                text += sentence(rng)
            rows.append(list(text.encode()[: seq_len + 1]))
        data = torch.tensor(rows, dtype=torch.long, device=device)
        yield data[:, :-1], data[:, 1:]


def save_checkpoint(model: torch.nn.Module, optimizer, step: int, loss: float, args) -> Path:
    root = Path(args.checkpoint_dir)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"checkpoint-{step}"
    tmp = root / f".tmp-checkpoint-{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    state = {"global_step": step, "loss": loss, "saved_at": time.time()}
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

    config = LlamaConfig(
        vocab_size=256,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 4,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.heads,
        max_position_embeddings=max(128, args.seq_len),
    )
    with torch.device(device):  # built where it trains: a 1B model on the CPU takes ~15 s
        model = LlamaForCausalLM(config)
    params = sum(p.numel() for p in model.parameters())
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=args.lr)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")
    if rank == 0:
        say(
            f"model: {params / 1e6:.2f}M parameters; global batch "
            f"{args.micro_batch * args.grad_accum * world} = micro {args.micro_batch} x accum "
            f"{args.grad_accum} x world {world}"
        )

    stop_requested: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stop_requested.append(signum))
    data = batches(rank, args.micro_batch, args.seq_len, device)
    tokens_per_step = args.micro_batch * args.grad_accum * world * args.seq_len
    started = time.perf_counter()
    window_start, window_step, loss_value = started, 0, float("nan")
    steady_start = started
    for step in range(1, args.steps + 1):
        optimizer.zero_grad(set_to_none=True)
        total = torch.zeros((), device=device)
        for micro in range(args.grad_accum):
            inputs, labels = next(data)
            sync = micro == args.grad_accum - 1
            with autocast, nullcontext() if sync else ddp.no_sync():
                logits = ddp(input_ids=inputs).logits
                loss = torch.nn.functional.cross_entropy(
                    logits.float().reshape(-1, logits.size(-1)), labels.reshape(-1)
                )
                (loss / args.grad_accum).backward()
            total += loss.detach() / args.grad_accum
        optimizer.step()
        if step == args.warmup_steps:
            if cuda:
                torch.cuda.synchronize()
            steady_start = time.perf_counter()
        # one collective for the loss and the stop: every rank stops after the same step
        reduced = torch.stack([total, torch.tensor(float(bool(stop_requested)), device=device)])
        dist.all_reduce(reduced)
        loss_sum, stops = reduced.tolist()  # one copy to the host, as `.item()` was
        loss_value, stopping = loss_sum / world, stops > 0
        if rank == 0 and (step % args.log_every == 0 or step == 1):
            now = time.perf_counter()
            rate = tokens_per_step * (step - window_step) / max(now - window_start, 1e-9)
            say(f"step {step}/{args.steps} loss {loss_value:.4f} tokens/s {rate:.0f}")
            window_start, window_step = now, step
        if stopping or (args.save_every and step % args.save_every == 0):
            if rank == 0:
                path = save_checkpoint(model, optimizer, step, loss_value, args)
                say(f"checkpoint saved: {path}")
            dist.barrier()
        if stopping:
            stopped(rank, step, args.steps)
    if cuda:
        torch.cuda.synchronize()
    finished = time.perf_counter()
    if rank == 0:
        say(
            f"train tokens/s {tokens_per_step * args.steps / (finished - started):.0f} "
            f"over {args.steps} steps"
        )
        if args.steps > args.warmup_steps:
            steady = tokens_per_step * (args.steps - args.warmup_steps) / (finished - steady_start)
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
