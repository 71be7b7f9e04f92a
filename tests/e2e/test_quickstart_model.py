"""The quickstart's own model (jobs/quickstart/model.py, plain torch) against transformers'
LlamaForCausalLM, in the job's Python: a checkpoint the quickstart saves opens in
transformers with the same logits, and one saved by LlamaForCausalLM (as quickstarts before
model.py did) loads here, with the parameters in the same order, so its optimizer.pt
resumes too."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
QUICKSTART = Path(__file__).resolve().parents[2] / "jobs" / "quickstart"
PROGRAM = """
import json, sys
from pathlib import Path
import torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM
from model import CausalLM, ModelConfig

folder = Path(sys.argv[1])
ids = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(5))
torch.manual_seed(0)
ours = CausalLM(ModelConfig.for_run(64, 2, 4, 64))
(folder / "ours").mkdir()
save_file(ours.state_dict(), folder / "ours" / "model.safetensors", metadata={"format": "pt"})
ours.config.save(folder / "ours")
theirs = LlamaForCausalLM.from_pretrained(folder / "ours")

old = LlamaForCausalLM(LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=256,
                                   num_hidden_layers=2, num_attention_heads=4,
                                   num_key_value_heads=4, max_position_embeddings=128))
old.save_pretrained(folder / "old")
loaded = CausalLM(ModelConfig.load(folder / "old"))
loaded.load_state_dict(load_file(folder / "old" / "model.safetensors"), strict=True)
with torch.no_grad():
    print(json.dumps({
        "ours_in_transformers": (ours(ids) - theirs(input_ids=ids).logits).abs().max().item(),
        "old_here": (loaded(ids) - old(input_ids=ids).logits).abs().max().item(),
        "names": [name for name, _ in ours.named_parameters()],
        "old_names": [name for name, _ in old.named_parameters()],
    }))
"""


def test_a_quickstart_checkpoint_is_a_llama_checkpoint(job_python: str, tmp_path: Path) -> None:
    run = subprocess.run([job_python, "-c", PROGRAM, str(tmp_path)], cwd=QUICKSTART,
                         capture_output=True, text=True, timeout=300)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert found["ours_in_transformers"] <= 1e-6 and found["old_here"] <= 1e-6, found
    assert found["names"] == found["old_names"]
    assert found["names"][:2] == ["model.embed_tokens.weight",
                                  "model.layers.0.self_attn.q_proj.weight"]  # fmt: skip
