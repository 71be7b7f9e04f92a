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
    "unsloth/llama-3-8b-bnb-4bit": "meta-llama/Meta-Llama-3-8B",
    "unsloth/llama-3-8b-instruct-bnb-4bit": "meta-llama/Meta-Llama-3-8B-Instruct",
    "unsloth/meta-llama-3.1-8b-instruct-unsloth-bnb-4bit": "meta-llama/Meta-Llama-3.1-8B-Instruct",
    "unsloth/meta-llama-3.1-8b-instruct-bnb-4bit": "meta-llama/Meta-Llama-3.1-8B-Instruct",
    "unsloth/meta-llama-3.1-8b-bnb-4bit": "meta-llama/Meta-Llama-3.1-8B",
}
"""Names users meet in the field whose full-precision base is not just the name minus a suffix
(their upstream 16-bit model; the same owner's name minus the suffix counts too)."""
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


def siblings(trained_on: str, recorded: bool = False) -> list[str]:
    """The 16-bit bases an adapter trained on the quantized `trained_on` may merge into, by
    name, and only these (the rule is conservative: a model of another name may hold other
    weights): the same name without its quantization suffix, same owner
    (`unsloth/llama-3-8b-bnb-4bit` -> `unsloth/llama-3-8b`); the upstream model KNOWN
    records for it (`meta-llama/Meta-Llama-3-8B`); and, when only the adapter's own
    `quantization_config` says it was quantized (QLoRA loading a 16-bit model in 4 bits),
    `trained_on` itself."""
    found = []
    if recorded and not QUANTIZED.search(trained_on):
        found.append(trained_on)
    stripped = SUFFIXES.sub("", trained_on)
    if stripped != trained_on and stripped.strip("/") and not QUANTIZED.search(stripped):
        found.append(stripped)
    if trained_on.lower() in KNOWN:
        found.append(KNOWN[trained_on.lower()])
    return list(dict.fromkeys(found))


def is_sibling(candidate: str, names: list[str], *folders: Path) -> bool:
    """`candidate` (merge.base) is one of `names`, compared as the Hub compares repo ids
    (case aside); a folder base counts when its config.json's `_name_or_path` is one."""
    wanted = {n.lower().rstrip("/") for n in names}
    if candidate.lower().rstrip("/") in wanted:
        return True
    here = Path(candidate)
    for place in [here] if here.is_absolute() else [f / candidate for f in folders]:
        try:
            named = json.loads((place / "config.json").read_text()).get("_name_or_path")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(named, str) and named.lower().rstrip("/") in wanted:
            return True
    return False


def fixes(base: str, names: list[str] | None = None) -> str:
    """Both ways out, as one clause: the 16-bit sibling to name in merge.base, or no merge."""
    names = siblings(base) if names is None else names
    into = " or ".join(names[:2]) if names else full_precision(base)
    return (f"merge into its 16-bit sibling {into} instead (merge.base), or keep the adapter "
            "separate (remove `merge:`)")  # fmt: skip


def refusal(adapter_dir: Path, merge_base: str, cwd: Path) -> str | None:
    """The one line that stops the merge, or None when it may run. Reads the adapter's own
    config: the base it was trained on and any quantization it records. A quantized base is
    never merged into; an adapter trained on one merges only into that base's 16-bit
    sibling (`siblings`), named by merge.base: the QLoRA fix this check recommends."""
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
    recorded = described(quant) if isinstance(quant, dict) and quant else None
    if merge_base:
        into = quantization_of(merge_base, cwd, adapter_dir)
        if into:
            own = [trained_on] if trained_on and not QUANTIZED.search(trained_on) else []
            names = list(dict.fromkeys([*own, *siblings(trained_on or merge_base)]))
            return (f"{config_file}: the adapter would merge into {merge_base}, a quantized base "
                    f"({into}); merging it gives a corrupted model (seed 002): "
                    f"{fixes(merge_base, names)}")  # fmt: skip
    if not trained_on and not merge_base:
        return (f"{config_file}: no base_model_name_or_path, and merge.base is not set; "
                "set merge.base to the model the adapter was trained on")  # fmt: skip
    found = recorded or (quantization_of(trained_on, cwd, adapter_dir) if trained_on else None)
    if not found:
        return None
    names = siblings(trained_on, recorded is not None)
    if merge_base and is_sibling(merge_base, names, cwd, adapter_dir):
        return None  # QLoRA's own fix: the 16-bit sibling of the base it was trained on
    trained = f"the adapter was trained on {trained_on}"
    what = (f"the adapter records a quantized base ({found})" if not trained_on
            else f"{trained} loaded quantized ({found})" if recorded
            else f"{trained}, a quantized base ({found})")  # fmt: skip
    if not merge_base and recorded:
        return (f"{config_file}: {what}, and merge.base does not name the 16-bit base to merge "
                f"into: {fixes(trained_on, names)}")  # fmt: skip
    if not merge_base:
        return (f"{config_file}: {what}; merging it into that base gives a corrupted model "
                f"(seed 002): {fixes(trained_on, names)}")  # fmt: skip
    return (f"{config_file}: {what}, and merge.base {merge_base} is not that base's 16-bit "
            f"sibling (another model's weights): {fixes(trained_on, names)}")  # fmt: skip


def main(argv: list[str]) -> int:
    adapter, merge_base = argv[0], argv[1] if len(argv) > 1 else ""
    why = refusal(Path.cwd() / adapter, merge_base, Path.cwd())
    if why:
        print(f"[gpujob] merge refused: {why}", flush=True)
        return 3
    config = json.loads((Path.cwd() / adapter / CONFIG).read_text())
    trained_on = str(config.get("base_model_name_or_path") or "")
    if config.get("quantization_config") or (
        trained_on and quantization_of(trained_on, Path.cwd(), Path.cwd() / adapter)
    ):
        print(f"[gpujob] merge: {adapter}/{CONFIG} was trained on a quantized {trained_on}; "
              f"merging into its 16-bit sibling {merge_base}", flush=True)  # fmt: skip
    else:
        print(f"[gpujob] merge: {adapter}/{CONFIG} names a full-precision base", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
