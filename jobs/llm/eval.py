"""Evaluate a causal LM: loss and perplexity on held-out text, plus a few sampled answers.

The model is a Hugging Face name, a checkpoint folder (`checkpoint-N/` from the PPO or SFT
jobs: a LoRA adapter folder is loaded onto its base), or `random:` for CPU runs. Each rank
scores its own shard; the sums are all-reduced, so the figure is the same at any world size.
The result is written as JSON beside the checkpoints (`eval.json`), by rank 0, atomically.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from common import BYTE_VOCAB, finish, init_distributed, load_causal_lm, say


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="random:64:2")
    p.add_argument("--data", default=None, help="JSONL of {'text': ...}")
    p.add_argument("--examples", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--samples", type=int, default=2, help="Answers sampled by rank 0.")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--out", default=os.path.join(os.environ.get("GPUJOB_CHECKPOINT_DIR", "."),
                                                 "eval.json"))  # fmt: skip
    return p.parse_args()


def load(name: str, device: torch.device, dtype: torch.dtype):
    folder = Path(name)
    if (folder / "adapter_config.json").is_file():
        from peft import PeftModel

        base_name = json.loads((folder / "adapter_config.json").read_text())[
            "base_model_name_or_path"
        ]
        base, tokenizer = load_causal_lm(base_name, device, dtype)
        return PeftModel.from_pretrained(base, folder).eval(), tokenizer
    if (folder / "config.json").is_file():
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_pretrained(folder, dtype=dtype).to(device).eval(), None
    model, tokenizer = load_causal_lm(name, device, dtype)
    return model.eval(), tokenizer


def shard(args: argparse.Namespace, tokenizer, rank: int, world: int) -> list[list[int]]:
    texts = []
    if args.data:
        texts = [json.loads(line)["text"] for line in Path(args.data).read_text().splitlines()
                 if line.strip()]  # fmt: skip
    rng = random.Random(7)
    rows = []
    for index in range(args.examples):
        if texts and tokenizer is not None:
            ids = tokenizer(texts[index % len(texts)])["input_ids"][: args.seq_len]
        else:
            ids = [rng.randrange(3, BYTE_VOCAB) for _ in range(args.seq_len)]
        if index % world == rank:
            rows.append(ids)
    return rows


@torch.no_grad()
def main() -> None:
    args = parse_args()
    d = init_distributed()
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    model, tokenizer = load(args.model, d.device, dtype)
    rows = shard(args, tokenizer, d.rank, d.world)
    totals = torch.zeros(2, dtype=torch.float64, device=d.device)  # loss sum, token count
    for start in range(0, len(rows), args.batch):
        batch = rows[start : start + args.batch]
        width = max(len(r) for r in batch)
        ids = torch.tensor([r + [0] * (width - len(r)) for r in batch], device=d.device)
        mask = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in batch], device=d.device)
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
        labels = ids[:, 1:].masked_fill(mask[:, 1:] == 0, -100)
        totals[0] += F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                                     ignore_index=-100, reduction="sum")  # fmt: skip
        totals[1] += (labels != -100).sum()
    dist.all_reduce(totals)
    loss = float(totals[0] / totals[1].clamp(min=1))
    if d.main:
        result = {"model": args.model, "examples": args.examples, "tokens": int(totals[1]),
                  "loss": round(loss, 5), "perplexity": round(math.exp(min(loss, 50)), 3),
                  "world_size": d.world}  # fmt: skip
        for index in range(args.samples):
            prompt = torch.tensor([rows[index % len(rows)][:8]], device=d.device)
            out = model.generate(input_ids=prompt, max_new_tokens=16, do_sample=False,
                                 pad_token_id=0)  # fmt: skip
            tokens = out[0, prompt.size(1) :].tolist()
            text = tokenizer.decode(tokens) if tokenizer is not None else str(tokens)
            say(f"sample {index}: {text}")
        out_path = Path(args.out)
        out_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = out_path.with_name(f".{out_path.name}.tmp")
        tmp.write_text(json.dumps(result, indent=2) + "\n")
        os.replace(tmp, out_path)
        say(f"eval loss {loss:.4f} perplexity {result['perplexity']} over {result['tokens']} "
            f"tokens; written to {out_path}")  # fmt: skip
    finish(d)


if __name__ == "__main__":
    main()
