"""Ten steps of DDP on 2 gloo ranks, each under gpujob_capture; a checkpoint every 5 steps."""

import json
import os
import sys
from pathlib import Path

import gpujob_capture
import torch
import torch.distributed as dist
from steps import batch_for, loss_of, model
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank = dist.get_rank()
net = model()
ddp = DistributedDataParallel(net)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
root = Path(os.environ["GPUJOB_CHECKPOINT_DIR"])
fast = os.environ.get("FAST_PATH") == "1"
for step in range(1, 11):
    x = batch_for(rank, step)
    with gpujob_capture.step(step, x=x) as captured:
        loss = captured.loss(loss_of(ddp, x, fast))
        loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    if step % 5 == 0 and rank == 0:
        final, tmp = root / f"checkpoint-{step}", root / f".tmp-checkpoint-{step}"
        tmp.mkdir(parents=True)
        torch.save(net.state_dict(), tmp / "model.pt")
        os.replace(tmp, final)
        files = {"model.pt": (final / "model.pt").stat().st_size}
        (final / ".gpujob-complete").write_text(json.dumps({"step": step, "files": files}))
    dist.barrier()
sys.stdout.write(f"rank {rank}: done\n")
dist.destroy_process_group()
