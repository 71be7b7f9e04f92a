"""PPO for a causal LM (RLHF-style), in plain torch + transformers, under torchrun (DDP).

Why not TRL: TRL 1.16 (the newest on the index) no longer ships a PPO trainer at all (only
GRPO/RLOO and experimental async GRPO), and the last TRL with one pulls datasets, pyarrow,
pandas and accelerate into the image for a trainer that was already marked experimental.
This file is the same algorithm as TRL's former PPOTrainer / the "N implementation details
of RLHF with PPO" recipe, in one readable loop:

1. rollout: each rank samples responses to its prompts from the policy;
2. score: a reward per response (a reward model, or a rule for CPU runs), minus a per-token
   KL penalty against a frozen reference copy of the initial policy;
3. GAE advantages from a value head on the policy's last hidden state, whitened;
4. a few epochs of clipped-ratio policy loss + clipped value loss over minibatches, with
   gradients averaged over every rank by DDP.

Model, reward and sizes all come from the job spec (`run.args`); gpujob's GPUJOB_* variables
give the checkpoint folder and cadence.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from common import (
    Dist,
    env_int,
    finish,
    init_distributed,
    load_causal_lm,
    mean_over_ranks,
    prompt_batches,
    save_checkpoint,
    say,
)
from torch.nn.parallel import DistributedDataParallel


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="random:64:2", help="HF name or random:HIDDEN:LAYERS")
    p.add_argument("--reward", default="rule:range:3:64",
                   help="HF reward model name, or rule:range:LO:HI (share of response tokens in "
                        "[LO, HI): a byte-level task a random model can learn)")  # fmt: skip
    p.add_argument("--prompts", default=None, help="JSONL of {'prompt': ...} (with a tokenizer)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--rollout-batch", type=int, default=env_int("GPUJOB_MICRO_BATCH", 8))
    p.add_argument("--minibatch", type=int, default=4)
    p.add_argument("--ppo-epochs", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=8)
    p.add_argument("--response-len", type=int, default=16)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--kl-coef", type=float, default=0.05)
    p.add_argument("--clip", type=float, default=0.2)
    p.add_argument("--clip-value", type=float, default=0.2)
    p.add_argument("--vf-coef", type=float, default=0.1)
    p.add_argument("--gamma", type=float, default=1.0)
    p.add_argument("--lam", type=float, default=0.95)
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--save-every", type=int, default=env_int("GPUJOB_SAVE_EVERY", 4))
    p.add_argument("--keep-last", type=int, default=env_int("GPUJOB_KEEP_LAST", 2))
    p.add_argument("--checkpoint-dir", default=os.environ.get("GPUJOB_CHECKPOINT_DIR", "ckpt"))
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args()


class PolicyWithValue(torch.nn.Module):
    """The LM and a scalar value head on its last hidden state (one trunk, two heads)."""

    def __init__(self, lm: Any) -> None:
        super().__init__()
        self.lm = lm
        self.value_head = torch.nn.Linear(lm.config.hidden_size, 1)
        torch.nn.init.zeros_(self.value_head.weight)
        torch.nn.init.zeros_(self.value_head.bias)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.lm(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        hidden = out.hidden_states[-1]
        return out.logits, self.value_head(hidden.to(self.value_head.weight.dtype)).squeeze(-1)


class Reward:
    """A score per response: a sequence-classification reward model, or a rule."""

    def __init__(self, spec: str, device: torch.device, tokenizer: Any) -> None:
        self.rule = None
        if spec.startswith("rule:range:"):
            lo, hi = spec.split(":")[2:4]
            self.rule = (int(lo), int(hi))
            return
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.policy_tokenizer = tokenizer
        self.tokenizer = AutoTokenizer.from_pretrained(spec)
        self.model = AutoModelForSequenceClassification.from_pretrained(spec).to(device).eval()
        self.device = device

    @torch.no_grad()
    def __call__(self, prompts: torch.Tensor, responses: torch.Tensor, mask: torch.Tensor):
        if self.rule is not None:
            lo, hi = self.rule
            hit = ((responses >= lo) & (responses < hi)).float() * mask
            return hit.sum(1) / mask.sum(1).clamp(min=1)
        texts = self.policy_tokenizer.batch_decode(
            torch.cat([prompts, responses], 1), skip_special_tokens=True
        )
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, truncation=True)
        return self.model(**enc.to(self.device)).logits[:, 0].float()


def response_mask(responses: torch.Tensor, eos: int | None) -> torch.Tensor:
    """1 up to and including the first EOS, 0 after it."""
    if eos is None:
        return torch.ones_like(responses, dtype=torch.float)
    is_eos = (responses == eos).long()
    after = (is_eos.cumsum(1) - is_eos) > 0
    return (~after).float()


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.gather(F.log_softmax(logits.float() / temperature, -1), 2,
                        tokens.unsqueeze(-1)).squeeze(-1)  # fmt: skip


def forward_response(model, ids, attn, prompt_len: int, temperature: float):
    """Log-probs of the response tokens and the values of the states that emitted them."""
    logits, values = model(ids, attn)
    responses = ids[:, prompt_len:]
    logits = logits[:, prompt_len - 1 : -1]
    return token_logprobs(logits, responses, temperature), values[:, prompt_len - 1 : -1].float()


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp(min=1)


def whiten(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    return (x - mean) * torch.rsqrt(var + 1e-8) * mask


def gae(rewards, values, mask, gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    advantages = torch.zeros_like(rewards)
    last = torch.zeros(rewards.size(0), device=rewards.device)
    for t in reversed(range(rewards.size(1))):
        next_value = values[:, t + 1] if t + 1 < rewards.size(1) else 0.0
        delta = rewards[:, t] + gamma * next_value * mask[:, t] - values[:, t]
        last = delta + gamma * lam * last
        advantages[:, t] = last * mask[:, t]
    return advantages, advantages + values


@torch.no_grad()
def rollout(ddp, ref, reward: Reward, prompts, prompt_mask, args, eos: int | None):
    policy = ddp.module
    policy.eval()
    ids = policy.lm.generate(
        input_ids=prompts, attention_mask=prompt_mask, do_sample=True, top_k=0, top_p=1.0,
        temperature=args.temperature, max_new_tokens=args.response_len,
        min_new_tokens=args.response_len if eos is None else 0,
        pad_token_id=policy.lm.config.pad_token_id, eos_token_id=eos,
    )  # fmt: skip
    responses = ids[:, prompts.size(1) :]
    mask = response_mask(responses, eos)
    attn = torch.cat([prompt_mask, mask.long()], 1)
    logprobs, values = forward_response(policy, ids, attn, prompts.size(1), args.temperature)
    ref_logits = ref(input_ids=ids, attention_mask=attn).logits[:, prompts.size(1) - 1 : -1]
    ref_logprobs = token_logprobs(ref_logits, responses, args.temperature)
    scores = reward(prompts, responses, mask)
    kl = (logprobs - ref_logprobs) * mask
    rewards = -args.kl_coef * kl
    last = (mask.sum(1).long() - 1).clamp(min=0)
    rewards[torch.arange(ids.size(0)), last] += scores
    advantages, returns = gae(rewards, values * mask, mask, args.gamma, args.lam)
    policy.train()
    return {
        "ids": ids, "attn": attn, "mask": mask, "logprobs": logprobs, "values": values,
        "advantages": whiten(advantages, mask), "returns": returns,
        "score": scores.mean().item(), "kl": (kl.sum(1)).mean().item(),
    }  # fmt: skip


def ppo_update(ddp, optimizer, batch: dict[str, Any], args, prompt_len: int) -> dict[str, float]:
    n = batch["ids"].size(0)
    stats = {"pg_loss": 0.0, "vf_loss": 0.0, "clipfrac": 0.0}
    updates = 0
    for _ in range(args.ppo_epochs):
        order = torch.randperm(n, device=batch["ids"].device)
        for start in range(0, n, args.minibatch):
            idx = order[start : start + args.minibatch]
            mask = batch["mask"][idx]
            logprobs, values = forward_response(
                ddp, batch["ids"][idx], batch["attn"][idx], prompt_len, args.temperature
            )
            ratio = torch.exp(logprobs - batch["logprobs"][idx])
            adv = batch["advantages"][idx]
            pg = torch.max(-adv * ratio, -adv * ratio.clamp(1 - args.clip, 1 + args.clip))
            pg_loss = masked_mean(pg, mask)
            old_values, returns = batch["values"][idx], batch["returns"][idx]
            clipped = old_values + (values - old_values).clamp(-args.clip_value, args.clip_value)
            vf = torch.max((values - returns) ** 2, (clipped - returns) ** 2)
            vf_loss = 0.5 * masked_mean(vf, mask)
            optimizer.zero_grad(set_to_none=True)
            (pg_loss + args.vf_coef * vf_loss).backward()
            torch.nn.utils.clip_grad_norm_(ddp.parameters(), 1.0)
            optimizer.step()
            stats["pg_loss"] += pg_loss.item()
            stats["vf_loss"] += vf_loss.item()
            stats["clipfrac"] += masked_mean(((ratio - 1).abs() > args.clip).float(), mask).item()
            updates += 1
    return {key: value / max(updates, 1) for key, value in stats.items()}


def save(d: Dist, ddp, optimizer, step: int, score: float, args) -> None:
    def write(folder: Path) -> None:
        ddp.module.lm.save_pretrained(folder, safe_serialization=True)
        torch.save(ddp.module.value_head.state_dict(), folder / "value_head.pt")
        torch.save(optimizer.state_dict(), folder / "optimizer.pt")

    if d.main:
        path = save_checkpoint(Path(args.checkpoint_dir), step, {"score": score}, write,
                               args.keep_last)  # fmt: skip
        say(f"checkpoint saved: {path}")
    torch.distributed.barrier()


def main() -> None:
    args = parse_args()
    d = init_distributed()
    torch.manual_seed(args.seed + d.rank)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    lm, tokenizer = load_causal_lm(args.model, d.device, dtype)
    eos = tokenizer.eos_token_id if tokenizer is not None else None
    ref = copy.deepcopy(lm).eval().requires_grad_(False)
    policy = PolicyWithValue(lm).to(d.device)
    ddp = DistributedDataParallel(policy, device_ids=[d.local_rank] if d.device.type == "cuda"
                                  else None)  # fmt: skip
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=args.lr)
    reward = Reward(args.reward, d.device, tokenizer)
    prompts = prompt_batches(args.prompts, tokenizer, args.rollout_batch, args.prompt_len,
                             seed=1000 + d.rank, device=d.device)  # fmt: skip
    if d.main:
        params = sum(p.numel() for p in policy.parameters()) / 1e6
        say(
            f"ppo: policy {args.model} ({params:.2f}M params), reward {args.reward}, "
            f"{args.rollout_batch * d.world} responses/step over {d.world} rank(s)"
        )
    score = 0.0
    for step in range(1, args.steps + 1):
        began = time.perf_counter()
        ids, attn = next(prompts)
        batch = rollout(ddp, ref, reward, ids, attn, args, eos)
        stats = ppo_update(ddp, optimizer, batch, args, ids.size(1))
        score = mean_over_ranks(batch["score"], d.device)
        kl = mean_over_ranks(batch["kl"], d.device)
        if d.main:
            say(f"ppo step {step}/{args.steps} score {score:.4f} kl {kl:.4f} "
                f"pg_loss {stats['pg_loss']:.4f} vf_loss {stats['vf_loss']:.4f} "
                f"clipfrac {stats['clipfrac']:.3f} "
                f"{time.perf_counter() - began:.2f}s/step")  # fmt: skip
        if args.save_every and (step % args.save_every == 0 or step == args.steps):
            save(d, ddp, optimizer, step, score, args)
    if d.main:
        say(f"final score {score:.4f}")
    finish(d)


if __name__ == "__main__":
    main()
