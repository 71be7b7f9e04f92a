"""A small causal LM trained with DeepSpeed ZeRO stage 2, started by DeepSpeed's own launcher
(gpujob's `launcher: deepspeed`, or `deepspeed --num_gpus=N train_ds.py` by hand).

No download anywhere: the model is built from a transformers config and the tokens are
random (the loss falls as the model learns their frequencies). Prints the loss and tokens/s
every few steps, then the steady tokens/s (after the warm-up) that bench/deepspeed_launch.py
compares; saves a ZeRO checkpoint every --save-every steps (checkpoints.every_steps) and one
at the end, each marked complete for gpujob.

Each step runs under gpujob_capture: one that raises or whose loss is not finite (or one
listed in GPUJOB_CAPTURE_STEPS) leaves its micro-batches and RNG states in
`<checkpoints>/captures/rank-K/step-N.pt`, and `gpujob replay JOB -- python replay.py` runs
it again on one GPU under `deepspeed --num_gpus=1` (replay.py; docs/replay.md).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import deepspeed
import torch
from transformers import LlamaConfig, LlamaForCausalLM

try:  # shipped by gpujob into the job's pylib/ (on PYTHONPATH): see replay.py
    import gpujob_capture
except ImportError:  # run bare (deepspeed --num_gpus=N train_ds.py): steps run unwatched
    gpujob_capture = None


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--grad-accum", type=int,
                        default=int(os.environ.get("GPUJOB_GRAD_ACCUM_STEPS", "1")))  # fmt: skip
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--lr", type=float, default=3e-4)
    parser.add_argument("--log-every", type=int, default=10)
    parser.add_argument("--save-dir", default=os.environ.get("GPUJOB_CHECKPOINT_DIR", ""))
    parser.add_argument("--save-every", type=int,
                        default=int(os.environ.get("GPUJOB_SAVE_EVERY") or 0))  # fmt: skip
    parser.add_argument("--local_rank", type=int, default=-1)  # DeepSpeed's launcher adds it
    return parser.parse_args()


def ds_config(args: argparse.Namespace) -> dict:
    return {
        "train_micro_batch_size_per_gpu": args.micro_batch,
        "gradient_accumulation_steps": args.grad_accum,
        "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2, "overlap_comm": True, "contiguous_gradients": True},
        "zero_allow_untested_optimizer": True,  # torch's AdamW: no CUDA ops to compile
        "gradient_clipping": 1.0,
        "steps_per_print": 10**9,
    }


def mark_complete(folder: Path, step: int) -> None:
    """gpujob's marker, written after the save returned: every file and its size."""
    files = {p.relative_to(folder).as_posix(): p.stat().st_size
             for p in sorted(folder.rglob("*")) if p.is_file()}  # fmt: skip
    tmp = folder / ".gpujob-complete.tmp"
    tmp.write_text(json.dumps({"step": step, "files": files, "written_by": "program"}))
    tmp.replace(folder / ".gpujob-complete")


def build_engine(args: argparse.Namespace) -> Any:
    """The model (seeded: every run, and replay.py, builds the same weights) in a ZeRO-2
    engine; deepspeed.init_distributed() comes first."""
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 4,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        max_position_embeddings=args.seq_len,
    )
    model = LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds_config(args))
    return engine


def micro_step(engine: Any, batch: torch.Tensor) -> torch.Tensor:
    """One micro-batch: forward, backward, and the engine's step (an optimizer step at the
    accumulation boundary). replay.py runs the same on a captured step's batches."""
    loss = engine(input_ids=batch, labels=batch).loss
    engine.backward(loss)
    engine.step()
    return loss


def save(engine: Any, args: argparse.Namespace, step: int, rank: int) -> None:
    tag = f"global_step{step}"
    engine.save_checkpoint(args.save_dir, tag=tag)
    torch.distributed.barrier()
    if rank == 0:
        mark_complete(Path(args.save_dir) / tag, step)
        say(f"checkpoint saved: {Path(args.save_dir) / tag}")


def main() -> None:
    args = parse_args()
    deepspeed.init_distributed()
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    engine = build_engine(args)
    params = sum(p.numel() for p in engine.module.parameters())
    if rank == 0:
        say(f"model: {params / 1e6:.1f}M parameters, ZeRO stage 2, world {world}, "
            f"micro {args.micro_batch} x accum {args.grad_accum} x seq {args.seq_len}")  # fmt: skip
    device = engine.device
    generator = torch.Generator(device="cpu").manual_seed(rank)
    tokens_per_step = args.micro_batch * args.grad_accum * world * args.seq_len
    steady_start = None
    started = time.perf_counter()
    loss_value = float("nan")
    for step in range(1, args.steps + 1):
        batches = [torch.randint(0, args.vocab // 8, (args.micro_batch, args.seq_len),
                                 generator=generator).to(device)
                   for _ in range(args.grad_accum)]  # fmt: skip
        # A step that raises or whose loss is not finite is saved for `gpujob replay`
        watch = gpujob_capture.step(step, batches=batches) if gpujob_capture else nullcontext()
        with watch as captured:
            for batch in batches:
                loss = micro_step(engine, batch)
            if captured is not None:
                captured.loss(loss)  # the last micro-batch's, as the log prints it
        if step == args.warmup:
            torch.cuda.synchronize()
            steady_start = time.perf_counter()
        if step % args.log_every == 0 or step == args.steps:
            loss_value = loss.item()
            elapsed = time.perf_counter() - started
            if rank == 0:
                say(f"step {step}/{args.steps} loss {loss_value:.4f} "
                    f"tokens/s {tokens_per_step * step / elapsed:.0f}")  # fmt: skip
        if args.save_dir and args.save_every and step % args.save_every == 0 and step < args.steps:
            save(engine, args, step, rank)
    torch.cuda.synchronize()
    if rank == 0 and steady_start is not None:
        steady = tokens_per_step * (args.steps - args.warmup) / (time.perf_counter() - steady_start)
        say(f"steady tokens/s {steady:.0f} after {args.warmup} warm-up steps")
        say(f"final loss {loss_value:.4f}")
    if args.save_dir:
        save(engine, args, args.steps, rank)


if __name__ == "__main__":
    main()
