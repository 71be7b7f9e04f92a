"""Seed 002: a LoRA adapter trained on a 4-bit base and then merged gave a corrupted model.

Before a job that merges an adapter starts, read its `adapter_config.json`; when the base is
quantized (bitsandbytes 4/8-bit, GPTQ, AWQ), refuse and name the full-precision base to
train and merge on instead.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from launcher.errors import UsageError
from launcher.spec.load import LoadedSpec

QUANTIZED = re.compile(
    r"(?i)([-_.](bnb|nf4|fp4)\b|[-_.]?\b(4|8)bit\b|[-_.]gptq\b|[-_.]awq\b|[-_.]int[48]\b)"
)
SUFFIXES = re.compile(
    r"(?i)([-_.](unsloth[-_])?(bnb[-_.]?)?(4|8)bit|[-_.]bnb|[-_.]gptq(-int[48])?|[-_.]awq"
    r"|[-_.]int[48]|[-_.]nf4)+$"
)
KNOWN = {
    "unsloth/meta-llama-3.1-8b-instruct-unsloth-bnb-4bit": "meta-llama/Meta-Llama-3.1-8B-Instruct",
    "unsloth/meta-llama-3.1-8b-instruct-bnb-4bit": "meta-llama/Meta-Llama-3.1-8B-Instruct",
    "unsloth/meta-llama-3.1-8b-bnb-4bit": "meta-llama/Meta-Llama-3.1-8B",
}
"""Names users meet in the field whose full-precision base is not just the name minus a suffix."""


def quantization_of(base: str, adapter_dir: Path) -> str | None:
    """How the base is quantized ('bnb 4-bit', 'gptq', ...), or None for full precision."""
    local = (adapter_dir / base) if not Path(base).is_absolute() else Path(base)
    config = local / "config.json"
    if config.is_file():
        try:
            quant = json.loads(config.read_text()).get("quantization_config") or {}
        except ValueError:
            quant = {}
        if quant:
            method = quant.get("quant_method", "quantized")
            bits = "4-bit" if quant.get("load_in_4bit") else quant.get("bits", "")
            return f"{method} {bits}".strip()
    match = QUANTIZED.search(base)
    return match.group(0).strip("-_.").lower() if match else None


def full_precision(base: str) -> str:
    if base.lower() in KNOWN:
        return KNOWN[base.lower()]
    stripped = SUFFIXES.sub("", base)
    return stripped if stripped != base else f"the unquantized model {base} was made from"


def check_merge(loaded: LoadedSpec) -> None:
    merge = loaded.spec.merge
    if merge is None:
        return
    where = loaded.where("merge", "adapter")
    adapter = (loaded.path.parent / merge.adapter).resolve()
    config_file = adapter / "adapter_config.json"
    try:
        config = json.loads(config_file.read_text())
    except FileNotFoundError:
        raise UsageError(
            f"{where}: merge.adapter: no adapter_config.json in {adapter}",
            "point merge.adapter at the adapter's folder",
        ) from None
    except ValueError as err:
        raise UsageError(f"{config_file}: not JSON ({err})") from None
    base = merge.base or config.get("base_model_name_or_path")
    if not base:
        raise UsageError(
            f"{config_file}: no base_model_name_or_path",
            "set merge.base to the model the adapter was trained on",
        )
    quant = quantization_of(str(base), adapter)
    if quant:
        raise UsageError(
            f"{where}: merge.adapter: the adapter was trained on {base}, a quantized base "
            f"({quant}); merging it gives a corrupted model (4-bit rounding, seed 002)",
            f"train the adapter on the full-precision base {full_precision(str(base))} and merge "
            "onto that; quantize after merging if you need to",
        )
