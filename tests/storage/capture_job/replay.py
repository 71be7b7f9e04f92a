"""The captured step again, alone: the checkpoint before it, its inputs and RNG states."""

import os
import sys
from pathlib import Path

import gpujob_capture
import torch
from steps import loss_of, model

net = model()
checkpoint = gpujob_capture.replay_checkpoint()
if checkpoint:
    net.load_state_dict(torch.load(Path(checkpoint) / "model.pt"))
captured = gpujob_capture.load_capture()  # after the model: its init draws from the RNG too
loss = loss_of(net, captured.inputs["x"], os.environ.get("FAST_PATH") == "1")
sys.stdout.write(
    f"replayed step {captured.step} rank {captured.rank} from "
    f"{Path(checkpoint).name if checkpoint else 'init'}: loss {loss.item()!r} "
    f"(job: {captured.loss!r}, finite: {bool(torch.isfinite(loss))})\n"
)
