"""The quickstart's model: a small Llama-style causal LM in plain torch.

Written here rather than imported from transformers because importing transformers cost
every rank of every quickstart run (the first `make run`, each test job) about a third of
its CPU (0.9 of 2.9 s for 20 steps on a CPU), for a model of a few dozen lines.
The parameter names and config.json keys are Llama's in transformers (`model.layers.0.
self_attn.q_proj.weight`, `hidden_size`, ...) and the maths is the same (RMSNorm, rotary
embeddings with halves rotated, SwiGLU, no biases, untied head), so a checkpoint saved here
loads into `LlamaForCausalLM` and one saved by earlier quickstarts loads here.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class ModelConfig:
    """The model's shape. Field names are transformers' LlamaConfig keys, so config.json
    means the same to both."""

    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    max_position_embeddings: int = 128  # recorded only: rotary angles are made per forward
    vocab_size: int = 256  # byte-level tokens
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    initializer_range: float = 0.02

    @property
    def intermediate_size(self) -> int:
        return 4 * self.hidden_size

    @classmethod
    def for_run(cls, hidden: int, layers: int, heads: int, seq_len: int) -> ModelConfig:
        """The config train.py's and replay.py's flags describe."""
        return cls(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                   max_position_embeddings=max(128, seq_len))  # fmt: skip

    def save(self, folder: Path) -> None:
        """config.json, with the keys transformers needs to read it as a Llama config."""
        body = asdict(self) | {"intermediate_size": self.intermediate_size,
                               "num_key_value_heads": self.num_attention_heads,
                               "model_type": "llama", "architectures": ["LlamaForCausalLM"],
                               "tie_word_embeddings": False}  # fmt: skip
        (folder / "config.json").write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, folder: Path) -> ModelConfig:
        """A checkpoint's config.json; keys this model has no use for (transformers writes
        many) are left out."""
        body = json.loads((folder / "config.json").read_text())
        return cls(**{f.name: body[f.name] for f in fields(cls) if f.name in body})


class RMSNorm(nn.Module):
    """Scale by the root mean square, computed in float32 so bf16 autocast keeps its range."""

    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.float()
        wide = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * wide.to(x.dtype)


def rotary(config: ModelConfig, positions: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    """cos and sin of each position's angles, (positions, head_dim), in float32: computed
    per forward (a few hundred numbers), so they are never a buffer a checkpoint must hold."""
    dim = config.hidden_size // config.num_attention_heads
    inv_freq = 1.0 / config.rope_theta ** (
        torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim
    )
    angles = torch.outer(torch.arange(positions, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding with the halves convention (transformers' rotate_half), the one the
    Llama weight layout expects."""
    first, second = x.chunk(2, dim=-1)
    return x * cos.to(x.dtype) + torch.cat([-second, first], dim=-1) * sin.to(x.dtype)


class Attention(nn.Module):
    """Causal self-attention; SDPA picks the fused kernel the device has."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        hidden, self.heads = config.hidden_size, config.num_attention_heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape
        q, k, v = (proj(x).view(batch, length, self.heads, -1).transpose(1, 2)
                   for proj in (self.q_proj, self.k_proj, self.v_proj))  # fmt: skip
        out = F.scaled_dot_product_attention(rotate(q, cos, sin), rotate(k, cos, sin), v,
                                             is_causal=True)  # fmt: skip
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, hidden))


class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        hidden, inner = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(hidden, inner, bias=False)
        self.up_proj = nn.Linear(hidden, inner, bias=False)
        self.down_proj = nn.Linear(inner, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm block: x + attention(norm(x)), then x + mlp(norm(x)). Submodules are made in
    transformers' order: the optimizer's state is keyed by parameter position, so only this
    order resumes a checkpoint an earlier (transformers) quickstart saved."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Decoder(nn.Module):
    """The body; its own module so parameter names carry Llama's `model.` prefix."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class CausalLM(nn.Module):
    """Token ids (batch, length) in, next-token logits (batch, length, vocab) out.
    Weights start as Llama's do (normal, std `initializer_range`; norms at one), drawn from
    torch's global RNG: the same seed before construction gives the same model."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Decoder(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        for module in self.modules():
            if isinstance(module, nn.Linear | nn.Embedding):
                nn.init.normal_(module.weight, std=config.initializer_range)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        cos, sin = rotary(self.config, input_ids.size(1), input_ids.device)
        x = self.model.embed_tokens(input_ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.model.norm(x))
