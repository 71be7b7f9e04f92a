"""The step shared by the job and its replay: a tiny model, a dropout (so the RNG matters),
and a planted bug: the "fast path" refuses an outlier, which only rank 1 sees at step 7."""

import torch


def batch_for(rank: int, step: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(100 * rank + step)
    x = torch.randn(4, 8, generator=generator)
    if rank == 1 and step == 7:
        x[0, 0] = 1e6
    return x


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(8, 1)


def loss_of(net: torch.nn.Module, x: torch.Tensor, fast: bool) -> torch.Tensor:
    if fast and x.abs().max() > 1e3:
        raise RuntimeError("fast path: value out of range")
    out = torch.nn.functional.dropout(net(x.clamp(-10, 10)), p=0.5, training=True)
    return out.pow(2).mean()
