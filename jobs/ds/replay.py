"""One captured step of the DeepSpeed example again, alone, on one GPU: `gpujob replay JOB --
python replay.py [the job's model flags]` pulls the capture and the checkpoint saved before
it, and runs this under `deepspeed --num_gpus=1` (the job's launcher is DeepSpeed: gpujob
replay adds the runner), as seed 003's `deepspeed --num_gpus=1 replay_inputs.py` did by hand.

The engine is train_ds.py's (`build_engine`, ZeRO-2, the same seeded init) with the
accumulation set to the captured step's micro-batches, over a world of one. From a checkpoint
(`global_stepN`, saved every checkpoints.every_steps) only the module's weights are loaded:
its ZeRO optimizer shards were written for the job's world size. The micro-batches are the
captured rank's own and go through train_ds.py's `micro_step`, so a step that raised in the
job raises here with the same traceback; a healthy step gives the job's loss (the last
micro-batch's, as the job noted it) when it is the first step after a checkpoint, to bf16's
precision. Change a flag of the job with `gpujob replay --set` or this script's own flags to
see whether the step then passes.
"""

from __future__ import annotations

import sys
from pathlib import Path

import deepspeed
import gpujob_capture
from train_ds import build_engine, micro_step, parse_args


def main() -> None:
    args = parse_args()
    deepspeed.init_distributed()
    captured = gpujob_capture.load_capture(restore_rng=False)  # on the CPU, for their count
    args.grad_accum = len(captured.inputs["batches"])
    engine = build_engine(args)
    checkpoint = gpujob_capture.replay_checkpoint()
    start = "the initial weights"
    if checkpoint:
        folder = Path(checkpoint)
        start = folder.name
        engine.load_checkpoint(str(folder.parent), tag=folder.name, load_module_only=True,
                               load_optimizer_states=False,
                               load_lr_scheduler_states=False)  # fmt: skip
    captured = gpujob_capture.load_capture(device=engine.device)  # its RNG states, now
    for batch in captured.inputs["batches"]:
        loss = micro_step(engine, batch)
    sys.stdout.write(f"replayed step {captured.step} of rank {captured.rank} from {start} "
                     f"on {engine.device}: loss {loss.item():.9f} "
                     f"(the job's: {captured.loss})\n")  # fmt: skip


if __name__ == "__main__":
    main()
