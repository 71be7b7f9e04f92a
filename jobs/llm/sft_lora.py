"""LoRA supervised fine-tuning with peft, on a base model kept in full precision.

Seed 002 learned it the hard way: an adapter trained on a 4-bit base and then merged into
the full-precision weights corrupts the model. Here the base is loaded unquantized (fp32 on
CPU, bf16 on GPUs, never 4/8-bit), so `--merge` writes a merged model that is what was
trained. Loss is on response tokens only; DDP averages the adapter's gradients over ranks.
Data: JSONL of {"prompt", "response"} with a tokenizer, or byte-level synthetic pairs for a
`random:` model (random bytes in, a fixed reply out: learnt in a few dozen steps).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from common import (
    env_int,
    finish,
    init_distributed,
    load_causal_lm,
    mean_over_ranks,
    save_checkpoint,
    say,
)
from torch.nn.parallel import DistributedDataParallel

REPLY = list(b" ok, done")


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="random:64:2", help="HF name or random:HIDDEN:LAYERS")
    p.add_argument("--data", default=None, help="JSONL of {'prompt': ..., 'response': ...}")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--micro-batch", type=int, default=env_int("GPUJOB_MICRO_BATCH", 8))
    p.add_argument("--seq-len", type=int, default=32)
    p.add_argument("--rank", type=int, default=8, help="LoRA rank")
    p.add_argument("--alpha", type=int, default=16)
    p.add_argument("--targets", default="all-linear", help="all-linear, or module names a,b")
    p.add_argument("--save-modules", default="",
                   help="Modules trained in full beside the adapter (e.g. lm_head: a random "
                        "model's output head is too weak for low-rank updates alone)")  # fmt: skip
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--merge", action="store_true", help="Also save the merged model at the end.")
    p.add_argument("--save-every", type=int, default=env_int("GPUJOB_SAVE_EVERY", 10))
    p.add_argument("--keep-last", type=int, default=env_int("GPUJOB_KEEP_LAST", 2))
    p.add_argument("--checkpoint-dir", default=os.environ.get("GPUJOB_CHECKPOINT_DIR", "ckpt"))
    return p.parse_args()


def examples(args: argparse.Namespace, tokenizer, seed: int):
    """Endless (input_ids, labels) batches; labels are -100 on the prompt."""
    rng = random.Random(seed)
    pairs = []
    if args.data:
        pairs = [json.loads(line) for line in Path(args.data).read_text().splitlines() if line]
    while True:
        rows, labels = [], []
        for _ in range(args.micro_batch):
            if pairs and tokenizer is not None:
                pair = rng.choice(pairs)
                prompt = tokenizer(pair["prompt"])["input_ids"]
                answer = tokenizer(pair["response"])["input_ids"] + [tokenizer.eos_token_id]
            else:  # "<random bytes> =" -> a fixed reply: a task a small adapter learns fast
                prompt = [rng.randrange(3, 256) for _ in range(args.seq_len // 2 - 1)] + [61]
                answer = [*REPLY, 2]
            ids = (prompt + answer)[: args.seq_len]
            label = ([-100] * len(prompt) + answer)[: args.seq_len]
            pad = args.seq_len - len(ids)
            rows.append(ids + [0] * pad)
            labels.append(label + [-100] * pad)
        yield torch.tensor(rows), torch.tensor(labels)


def main() -> None:
    from peft import LoraConfig, get_peft_model

    args = parse_args()
    d = init_distributed()
    torch.manual_seed(0)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    base, tokenizer = load_causal_lm(args.model, d.device, dtype)
    targets = args.targets if args.targets == "all-linear" else args.targets.split(",")
    full = [m for m in args.save_modules.split(",") if m] or None
    config = LoraConfig(
        r=args.rank, lora_alpha=args.alpha, lora_dropout=0.0, target_modules=targets,
        task_type="CAUSAL_LM", modules_to_save=full,
    )  # fmt: skip
    model = get_peft_model(base, config)
    model.peft_config["default"].base_model_name_or_path = args.model  # what eval loads it onto
    if d.main:
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        total = sum(p.numel() for p in model.parameters())
        say(f"sft-lora: {args.model} base in {args.dtype} (unquantized), LoRA r={args.rank}: "
            f"{trainable / 1e3:.1f}k of {total / 1e6:.2f}M parameters train")  # fmt: skip
    ddp = DistributedDataParallel(model, device_ids=[d.local_rank] if d.device.type == "cuda"
                                  else None)  # fmt: skip
    optimizer = torch.optim.AdamW([p for p in ddp.parameters() if p.requires_grad], lr=args.lr)
    data = examples(args, tokenizer, seed=1000 + d.rank)
    loss_value = float("nan")
    for step in range(1, args.steps + 1):
        began = time.perf_counter()
        ids, labels = (t.to(d.device) for t in next(data))
        logits = ddp(
            input_ids=ids, attention_mask=(ids != 0).long() | (labels != -100).long()
        ).logits
        loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.size(-1)),
                               labels[:, 1:].reshape(-1), ignore_index=-100)  # fmt: skip
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss_value = mean_over_ranks(loss.item(), d.device)
        if d.main and (step % 5 == 0 or step == 1):
            say(f"sft step {step}/{args.steps} loss {loss_value:.4f} "
                f"{time.perf_counter() - began:.2f}s/step")  # fmt: skip
        if args.save_every and (step % args.save_every == 0 or step == args.steps):
            if d.main:
                path = save_checkpoint(Path(args.checkpoint_dir), step, {"loss": loss_value},
                                       model.save_pretrained, args.keep_last)  # fmt: skip
                say(f"checkpoint saved: {path}")
            torch.distributed.barrier()
    if d.main and args.merge:
        merged = Path(args.checkpoint_dir) / "merged"
        model.merge_and_unload().save_pretrained(merged, safe_serialization=True)
        say(f"merged model saved: {merged} (full-precision base)")
    if d.main:
        say(f"final loss {loss_value:.4f}")
    finish(d)


if __name__ == "__main__":
    main()
