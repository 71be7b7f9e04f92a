"""What the PPO, SFT and eval jobs share: process group, models, prompts, checkpoints.

A model is either a Hugging Face name (production: downloaded by the host, bf16 on GPUs) or
`random:HIDDEN:LAYERS` (a small Llama with random weights over byte tokens, so the lab and
CI run the same code with no download). Checkpoints use the Hugging Face layout
(`checkpoint-N/`, `trainer_state.json` written last) in a temporary folder renamed when
complete, and only the newest `keep_last` are kept, chosen by step number, never mtime.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

BYTE_VOCAB = 256


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    return int(value) if value else default


def say(text: str) -> None:
    """Print one line in a single write: every rank shares torchrun's stdout, and gpujob runs
    Python unbuffered, where `print` writes the text and its newline separately, so another
    rank's line could land between them (`rank 1/2: donefinal loss ...`)."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


@dataclass(frozen=True)
class Dist:
    rank: int
    world: int
    local_rank: int
    device: torch.device

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed() -> Dist:
    """torchrun's environment in, a process group out; every rank says where it runs, so a
    multi-node log shows the whole world."""
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
    node = os.environ.get("GROUP_RANK", "0")
    say(f"rank {rank}/{world}: node {node} local rank {local_rank} on {device} "
        f"({socket.gethostname()})")  # fmt: skip
    return Dist(rank, world, local_rank, device)


def finish(d: Dist) -> None:
    """Leave without running gloo's destructors (they can deadlock at exit on torch 2.13 CPU;
    see the quickstart)."""
    say(f"rank {d.rank}/{d.world}: done")
    dist.barrier()
    dist.destroy_process_group()
    sys.stdout.flush()
    os._exit(0)


def load_causal_lm(name: str, device: torch.device, dtype: torch.dtype) -> tuple[Any, Any]:
    """(model, tokenizer); the tokenizer is None for a random byte-level model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    if name.startswith("random:"):
        _, hidden, layers = name.split(":")
        heads = max(1, int(hidden) // 32)
        config = LlamaConfig(
            vocab_size=BYTE_VOCAB, hidden_size=int(hidden), intermediate_size=int(hidden) * 4,
            num_hidden_layers=int(layers), num_attention_heads=heads, num_key_value_heads=heads,
            max_position_embeddings=512, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        )  # fmt: skip
        torch.manual_seed(0)  # `random:H:L` names one model: the same weights in every job
        with torch.device(device):
            return LlamaForCausalLM(config).to(dtype), None
    tokenizer = AutoTokenizer.from_pretrained(name, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype).to(device)
    return model, tokenizer


def prompt_batches(
    path: str | None, tokenizer: Any, batch: int, prompt_len: int, seed: int, device: torch.device
):
    """Endless (input_ids, attention_mask) batches, left-padded, a different stream per rank:
    from a JSONL file of {"prompt": ...} with a tokenizer, else random byte prompts."""
    rng = random.Random(seed)
    texts = []
    if path:
        texts = [json.loads(line)["prompt"] for line in Path(path).read_text().splitlines()
                 if line.strip()]  # fmt: skip
    while True:
        if texts and tokenizer is not None:
            chosen = [rng.choice(texts) for _ in range(batch)]
            enc = tokenizer(chosen, return_tensors="pt", padding=True, truncation=True,
                            max_length=prompt_len)  # fmt: skip
            yield enc["input_ids"].to(device), enc["attention_mask"].to(device)
        else:
            ids = torch.tensor(
                [[rng.randrange(3, BYTE_VOCAB) for _ in range(prompt_len)] for _ in range(batch)],
                device=device,
            )
            yield ids, torch.ones_like(ids)


def save_checkpoint(
    root: Path, step: int, state: dict[str, Any], write: Any, keep_last: int
) -> Path:
    """`write(tmp)` fills a temporary folder; trainer_state.json goes in last, then the
    folder takes its final name, so a half-written checkpoint never carries one."""
    root.mkdir(parents=True, exist_ok=True)
    final, tmp = root / f"checkpoint-{step}", root / f".tmp-checkpoint-{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    write(tmp)
    state = {"global_step": step, "saved_at": time.time(), **state}
    (tmp / "trainer_state.json").write_text(json.dumps(state, indent=2) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    steps = sorted(int(p.name.split("-")[1]) for p in root.glob("checkpoint-*")
                   if p.name.split("-")[1].isdigit())  # fmt: skip
    for old in steps[:-keep_last] if keep_last > 0 else []:
        shutil.rmtree(root / f"checkpoint-{old}", ignore_errors=True)
    return final


def mean_over_ranks(value: float, device: torch.device) -> float:
    tensor = torch.tensor([value], device=device, dtype=torch.float64)
    dist.all_reduce(tensor)
    return float(tensor.item()) / dist.get_world_size()
