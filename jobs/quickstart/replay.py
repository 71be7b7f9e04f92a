"""One captured quickstart step again, alone, on one device: `gpujob replay JOB -- python
replay.py [the job's model flags]` pulls the capture and the checkpoint saved before it.

The model comes from that checkpoint (its config.json and weights), else from the flags with
the job's seed; the batches and RNG states are the captured rank's own. The step's forward
and backward are train.py's (`micro_step`), so a step that raised in the job raises here with
the same traceback, and a healthy step gives the job's loss: the same step after a
checkpoint (GPUJOB_CAPTURE_STEPS=21 with checkpoints every 20 steps) matches to 1e-6 on the
same kind of device. Change a flag of the job with `gpujob replay --set` or this script's
own flags to see whether the step then passes.
"""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path

import gpujob_capture
import torch
from model import CausalLM, ModelConfig
from safetensors.torch import load_file
from train import micro_step, parse_args


def model_for(args, checkpoint: str | None, device: torch.device) -> CausalLM:
    if checkpoint:
        config = ModelConfig.load(Path(checkpoint))
    else:
        torch.manual_seed(args.seed)
        config = ModelConfig.for_run(args.hidden, args.layers, args.heads, args.seq_len)
    with torch.device(device):
        model = CausalLM(config)
    if checkpoint:
        weights: dict = {}
        for shard in sorted(Path(checkpoint).glob("*.safetensors")):
            weights.update(load_file(shard, device=str(device)))
        model.load_state_dict(weights, strict=True)
    return model


def main() -> None:
    args = parse_args()
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    checkpoint = gpujob_capture.replay_checkpoint()
    model = model_for(args, checkpoint, device)
    captured = gpujob_capture.load_capture(device=device)  # its RNG states, after the init
    batches = captured.inputs["batches"]
    bf16 = args.dtype == "bf16"
    autocast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext()
    total = torch.zeros((), device=device)
    for inputs, labels in batches:
        with autocast:
            total += micro_step(model, inputs, labels, len(batches))
    loss = total.item()
    start = Path(checkpoint).name if checkpoint else "the initial weights"
    sys.stdout.write(f"replayed step {captured.step} of rank {captured.rank} from {start} on "
                     f"{device}: loss {loss:.9f} (the job's: {captured.loss})\n")  # fmt: skip


if __name__ == "__main__":
    main()
