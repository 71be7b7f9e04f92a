"""The GPUs a user can ask for, by SkyPilot's names, in each cloud's own spelling.

Lambda is matched on the model in `gpu_description` ("A100 (40 GB PCIe)") and, where one
name is a form factor, on the mark in its parentheses (`SXM5`, `PCIe`); Vast on its exact,
spaced `gpu_name` values (Vast matches names exactly, so a family is a list). Names are read
as SkyPilot reads them: case-insensitive, and `RTX4090`, `RTX 4090`, `rtx_4090` are one GPU
(reference: lambda-cloud-api.md §4.2, vast-api.md §2.4). Standard library only: the CLI
parses `GPU[:N]` with it before any network.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

VAST_COUNTS = (1, 2, 4, 8)
"""What Vast's hosts commonly list; a marketplace, so another count may still be found."""


@dataclass(frozen=True)
class GpuModel:
    name: str
    lambda_model: str
    """"" where Lambda sells none."""
    vast_names: tuple[str, ...]
    min_memory_gb: int = 0
    lambda_counts: tuple[int, ...] = ()
    """GPUs per instance type Lambda sells (its `gpu_Nx_*` types)."""
    lambda_form: str = ""
    """A mark Lambda's description must carry (`SXM`, `PCIe`), for a form-factor name."""
    aliases: tuple[str, ...] = ()

    def sold_by(self, provider: str) -> tuple[int, ...]:
        """The GPU counts per host `provider` sells this GPU in; () where it sells none."""
        if provider == "lambda":
            return self.lambda_counts if self.lambda_model else ()
        if provider == "vast":
            return VAST_COUNTS if self.vast_names else ()
        return ()


_A100 = ("A100 PCIE", "A100 SXM4", "A100X")
_H100 = ("H100 PCIE", "H100 SXM", "H100 NVL")
CATALOG: tuple[GpuModel, ...] = (
    GpuModel("l4", "", ("L4",)),
    GpuModel("l40s", "", ("L40S",)),
    GpuModel("l40", "", ("L40",)),
    GpuModel("a10", "A10", ("A10",), lambda_counts=(1,)),
    GpuModel("a10g", "", ()),  # AWS's only (g5): neither Lambda nor Vast sells it
    GpuModel("a6000", "A6000", ("RTX A6000",), lambda_counts=(1, 2, 4), aliases=("rtxa6000",)),
    GpuModel("rtx4090", "", ("RTX 4090",), aliases=("4090",)),
    GpuModel("rtx5090", "", ("RTX 5090",), aliases=("5090",)),
    GpuModel("rtx3090", "", ("RTX 3090",), aliases=("3090",)),
    GpuModel("a100", "A100", _A100, lambda_counts=(1, 2, 4, 8), aliases=("a10040gb",)),
    GpuModel("a100-80gb", "A100", _A100, 80, lambda_counts=(8,)),
    GpuModel("h100", "H100", _H100, lambda_counts=(1, 2, 4, 8)),
    GpuModel("h100-sxm", "H100", ("H100 SXM",), 0, (1, 2, 4, 8), "SXM", ("h100sxm5", "h100mega")),
    GpuModel("h100-pcie", "H100", ("H100 PCIE",), lambda_counts=(1,), lambda_form="PCIe"),
    GpuModel("h200", "H200", ("H200", "H200 NVL")),
    GpuModel("b200", "B200", ("B200",), lambda_counts=(1, 2, 8)),
    GpuModel("gh200", "GH200", (), lambda_counts=(1,)),
    GpuModel("v100", "V100", ("Tesla V100",), lambda_counts=(8,), aliases=("teslav100",)),
    GpuModel("t4", "", ("Tesla T4",), aliases=("teslat4",)),
)
GPUS: dict[str, GpuModel] = {g.name: g for g in CATALOG}


def _key(name: str) -> str:
    return re.sub(r"[\s_-]+", "", name.lower())


_BY_KEY: dict[str, GpuModel] = {
    key: g for g in CATALOG for key in (_key(g.name), *(_key(a) for a in g.aliases))
}


def gpu_model(name: str) -> GpuModel | None:
    """SkyPilot's spelling of a GPU (`A100-80GB`, `H100`, `RTX4090`, `l4`), or None."""
    return _BY_KEY.get(_key(name))


def sold_where(gpu: GpuModel) -> str:
    """`lambda 1, 2, 4 or 8 per host; vast 1, 2, 4 or 8`: for a hint."""
    parts = []
    for provider in ("lambda", "vast"):
        counts = gpu.sold_by(provider)
        if counts:
            shown = ", ".join(map(str, counts[:-1])) + " or " * (len(counts) > 1)
            parts.append(f"{provider} sells {gpu.name} with {shown}{counts[-1]} per host")
    return "; ".join(parts) or f"neither Lambda nor Vast sells {gpu.name}"


def serving_provider(gpu_text: str, provider: str, given: bool) -> tuple[str, str | None]:
    """The cloud that rents `gpu_text` and the line that says why it changed: a GPU the
    default cloud does not sell (`--up l4`: Lambda has none) is served where it is sold,
    unless the user named the cloud (then its "no offer" answer says where it is sold)."""
    gpu = gpu_model(gpu_text.partition(":")[0].strip())
    if given or gpu is None or gpu.sold_by(provider):
        return provider, None
    for other in ("lambda", "vast"):
        if gpu.sold_by(other):
            return other, f"{gpu.name}: {provider} sells none; renting on {other} (--provider)"
    return provider, None
