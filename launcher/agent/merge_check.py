"""Seed 002: a LoRA adapter trained on a 4-bit base and then merged gave a corrupted model.

The rule, once, for both places it is applied: at submit (storage/merge_guard.py, by the
base's name and any config it can read here) and on the host, after the job's run wrote
the adapter and before gpujob's merge step loads it (`python merge_check.py ADAPTER BASE`):
a quantized base stops the job with one line naming the adapter's config file.
Standard library only: shipped into the node's folder and run with the job's Python.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

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
CONFIG = "adapter_config.json"


def described(quant: dict) -> str:
    """A `quantization_config` in words: 'bitsandbytes 4-bit', 'gptq 4', ..."""
    method = quant.get("quant_method", "quantized")
    bits = "4-bit" if quant.get("load_in_4bit") else "8-bit" if quant.get("load_in_8bit") else ""
    return f"{method} {bits or quant.get('bits', '')}".strip()


def quantization_of(base: str, *folders: Path) -> str | None:
    """How the base is quantized ('bnb 4-bit', 'gptq', ...), or None for full precision: its
    own config.json where the base is a folder (absolute, or under one of `folders`), else
    its name."""
    places = [Path(base)] if Path(base).is_absolute() else [f / base for f in folders]
    for place in places:
        config = place / "config.json"
        if config.is_file():
            try:
                quant = json.loads(config.read_text()).get("quantization_config") or {}
            except ValueError:
                quant = {}
            if quant:
                return described(quant)
    match = QUANTIZED.search(base)
    return match.group(0).strip("-_.").lower() if match else None


def full_precision(base: str) -> str:
    if base.lower() in KNOWN:
        return KNOWN[base.lower()]
    stripped = SUFFIXES.sub("", base)
    return stripped if stripped != base else f"the unquantized model {base} was made from"


def fixes(base: str) -> str:
    """Both ways out, as one clause."""
    return (
        f"merge into the 16-bit base {full_precision(base)} (train the adapter on it), or keep "
        "the adapter separate (remove `merge:`)"
    )


def refusal(adapter_dir: Path, merge_base: str, cwd: Path) -> str | None:
    """The one line that stops the merge, or None when it may run. Reads the adapter's own
    config: the base it was trained on and any quantization it records."""
    config_file = adapter_dir / CONFIG
    try:
        config = json.loads(config_file.read_text())
    except FileNotFoundError:
        return (f"{config_file}: not found: the run did not write the adapter that "
                "merge.adapter names; write it there, or point merge.adapter at it")  # fmt: skip
    except ValueError as err:
        return f"{config_file}: not JSON ({err})"
    trained_on = str(config.get("base_model_name_or_path") or "")
    quant = config.get("quantization_config")
    if isinstance(quant, dict) and quant:
        base = trained_on or merge_base
        return (f"{config_file}: the adapter records a quantized base ({described(quant)}); "
                f"merging it gives a corrupted model (seed 002): {fixes(base)}")  # fmt: skip
    for base in dict.fromkeys(b for b in (trained_on, merge_base) if b):
        found = quantization_of(base, cwd, adapter_dir)
        if found:
            verb = "was trained on" if base == trained_on else "would merge into"
            return (f"{config_file}: the adapter {verb} {base}, a quantized base ({found}); "
                    f"merging it gives a corrupted model (seed 002): {fixes(base)}")  # fmt: skip
    if not trained_on and not merge_base:
        return (f"{config_file}: no base_model_name_or_path, and merge.base is not set; "
                "set merge.base to the model the adapter was trained on")  # fmt: skip
    return None


def main(argv: list[str]) -> int:
    adapter, merge_base = argv[0], argv[1] if len(argv) > 1 else ""
    why = refusal(Path.cwd() / adapter, merge_base, Path.cwd())
    if why:
        print(f"[gpujob] merge refused: {why}", flush=True)
        return 3
    print(f"[gpujob] merge: {adapter}/{CONFIG} names a full-precision base", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
