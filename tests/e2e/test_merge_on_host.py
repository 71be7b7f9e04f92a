"""A job that trains, then merges (`merge:` naming an adapter the job writes): through the
real CLI on this machine, in the lab-cpu environment (peft, transformers). The run writes a
tiny base and a LoRA adapter; gpujob checks the adapter's own adapter_config.json on the
host, then merges. An adapter that says it was trained on a 4-bit base stops the job with
one line naming that file, and no merge runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
IMAGE = str(REPO / "launcher" / "images" / "definitions" / "lab-cpu.yaml")
TRAIN = """\
import json, sys
from pathlib import Path
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

torch.manual_seed(0)
config = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                     num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=32)
base = LlamaForCausalLM(config)
base.save_pretrained("base")
model = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj", "v_proj"],
                                        init_lora_weights=False, task_type="CAUSAL_LM"))
model.save_pretrained("out/lora")
adapter_config = Path("out/lora/adapter_config.json")
written = json.loads(adapter_config.read_text())
written["base_model_name_or_path"] = sys.argv[1]
adapter_config.write_text(json.dumps(written))
print("trained: adapter written", flush=True)
"""


def submit(tmp_path: Path, trained_on: str, job_id: str) -> subprocess.CompletedProcess:
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(TRAIN)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"name: lora\nimage: {IMAGE}\nworkdir: work\n"
        f"run: {{entrypoint: train.py, launcher: none, args: ['{trained_on}']}}\n"
        "envs: {OMP_NUM_THREADS: 1}\n"
        "merge: {adapter: work/out/lora, base: base}\n"
    )
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))
    return subprocess.run([GPUJOB, "submit", str(spec), "--job-id", job_id], env=env,
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip


def test_the_adapter_the_job_wrote_is_merged_into_its_base(tmp_path: Path) -> None:
    done = submit(tmp_path, "base", "merge-ok")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "trained: adapter written" in done.stdout
    assert "[gpujob] merge: out/lora/adapter_config.json names a full-precision base" in done.stdout
    assert "[gpujob] merge: merged model saved: out/lora-merged" in done.stdout
    merged = tmp_path / "state" / "jobs" / "merge-ok" / "workdir" / "out" / "lora-merged"
    assert (merged / "model.safetensors").is_file()
    assert json.loads((merged / "config.json").read_text())["hidden_size"] == 16
    assert not (merged / "adapter_config.json").exists()  # weights merged, not an adapter
    # The LoRA delta is in (init_lora_weights=False makes it non-zero): q_proj and v_proj
    # changed, k_proj (not adapted) did not; the base saved unmerged would fail here.
    base = tmp_path / "state" / "jobs" / "merge-ok" / "workdir" / "base" / "model.safetensors"
    before, after = tensors(base), tensors(merged / "model.safetensors")
    layer = "model.layers.0.self_attn"
    assert after[f"{layer}.q_proj.weight"] != before[f"{layer}.q_proj.weight"]
    assert after[f"{layer}.v_proj.weight"] != before[f"{layer}.v_proj.weight"]
    assert after[f"{layer}.k_proj.weight"] == before[f"{layer}.k_proj.weight"]


def tensors(path: Path) -> dict[str, bytes]:
    """Each tensor's raw bytes, read as the safetensors format lays them out (an 8-byte
    header length, a JSON header of offsets, the data)."""
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    data = raw[8 + size :]
    return {
        name: data[meta["data_offsets"][0] : meta["data_offsets"][1]]
        for name, meta in header.items()
        if name != "__metadata__"
    }


def test_an_adapter_trained_on_a_4bit_base_merges_into_its_16bit_sibling(tmp_path: Path) -> None:
    """QLoRA's fix, which the refusal recommends (issue 30): the adapter says it was trained
    on `base-bnb-4bit`, merge.base names `base` (that name minus its suffix, full precision):
    the host's check lets it through and the merge runs."""
    done = submit(tmp_path, "base-bnb-4bit", "merge-sibling")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert ("[gpujob] merge: out/lora/adapter_config.json was trained on a quantized "
            "base-bnb-4bit; merging into its 16-bit sibling base") in done.stdout  # fmt: skip
    assert "[gpujob] merge: merged model saved: out/lora-merged" in done.stdout
    merged = tmp_path / "state" / "jobs" / "merge-sibling" / "workdir" / "out" / "lora-merged"
    assert (merged / "model.safetensors").is_file()


def test_an_adapter_trained_on_a_4bit_base_stops_the_job_before_the_merge(
    tmp_path: Path,
) -> None:
    """Trained on another model's 4-bit base: `base` is not its 16-bit sibling."""
    done = submit(tmp_path, "unsloth/Qwen2.5-1.5B-bnb-4bit", "merge-4bit")
    assert done.returncode == 3, done.stdout[-3000:] + done.stderr[-2000:]
    config = tmp_path / "state" / "jobs" / "merge-4bit" / "workdir" / "out" / "lora"
    line = next(x for x in done.stdout.splitlines() if "merge refused" in x)
    assert line == (
        f"[gpujob] merge refused: {config}/adapter_config.json: the adapter was trained on "
        "unsloth/Qwen2.5-1.5B-bnb-4bit, a quantized base (bnb), and merge.base base is not "
        "that base's 16-bit sibling (another model's weights): merge into its 16-bit sibling "
        "unsloth/Qwen2.5-1.5B instead (merge.base), or keep the adapter separate (remove "
        "`merge:`)"
    )
    assert "[gpujob] merge: out/lora into" not in done.stdout
    assert not (config.parent / "lora-merged").exists()
    assert "job merge-4bit failed (exit code 3)" in done.stderr


STOPPABLE = """\
import signal, sys, time
def stop(*_):
    print("stop: saving the stop checkpoint", flush=True)
    time.sleep(2)  # a checkpoint that takes a while to write
    print("stop: checkpoint saved", flush=True)
    open("saved_at", "w").write(repr(time.time()))
    sys.exit(0)  # a clean exit after a stop: still no merge
signal.signal(signal.SIGTERM, stop)
print("training", flush=True)
time.sleep(600)
"""


def test_a_cancel_waits_for_the_stop_checkpoint_and_skips_the_merge(tmp_path: Path) -> None:
    """The program is bash's child (the merge follows it): a cancel reaches it once, the job
    ends only when it has saved, and the merge does not start though it exited 0."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "train.py").write_text(STOPPABLE)
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: lora\nimage: host\nworkdir: work\nrun: {entrypoint: train.py, launcher: none}\n"
        "merge: {adapter: work/out/lora, base: org/model}\n"
    )
    env = dict(os.environ, GPUJOB_STATE_DIR=str(tmp_path / "state"))

    def gpujob(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True,
                              timeout=120, check=False)  # fmt: skip

    started = gpujob("submit", str(spec), "--detach", "--job-id", "merge-stop")
    assert started.returncode == 0, started.stderr
    node_dir = tmp_path / "state" / "jobs" / "merge-stop" / "node-0"
    log = node_dir / "job.log"
    deadline = time.monotonic() + 60
    while b"training" not in (log.read_bytes() if log.exists() else b""):
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)

    assert gpujob("cancel", "merge-stop", "--grace", "30").returncode == 0
    deadline = time.monotonic() + 60
    while json.loads((node_dir / "status.json").read_text())["state"] in ("starting", "running"):
        assert time.monotonic() < deadline, "the job never ended"
        time.sleep(0.05)
    said = log.read_text()
    assert said.count("stop: saving the stop checkpoint") == 1, said  # one TERM, not two
    assert "stop: checkpoint saved" in said, said
    assert "[gpujob] merge" not in said
    ended = json.loads((node_dir / "status.json").read_text())
    saved_at = float((node_dir.parent / "workdir" / "saved_at").read_text())
    assert ended["ended_at"] >= saved_at  # the job ended after its checkpoint, not before
    assert (ended["state"], ended["exit_code"]) == ("cancelled", 0)  # the program's, not 143
