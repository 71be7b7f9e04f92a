"""A stand-in training program for the checkpoint tests: stdlib only, almost no CPU.

Saves `--size` MB checkpoints every `--every` seconds, the way gpujob asks programs to:
write `.tmp-checkpoint-N`, rename it to `checkpoint-N`, then write the `.gpujob-complete`
marker. `--stall-at N` writes half of save N and then hangs (to be killed mid-save).
`--keep-last` imitates a framework's own limit (0: none).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

BLOCK = bytes(range(256)) * 4096  # 1 MiB


def write_file(path: Path, size_mb: int, salt: int) -> None:
    head = f"step {salt}\n".encode()
    with open(path, "wb") as out:
        out.write(head)
        for _ in range(size_mb):
            out.write(BLOCK)
        out.flush()
        os.fsync(out.fileno())


def save(root: Path, step: int, size_mb: int, stall: bool) -> None:
    tmp, final = root / f".tmp-checkpoint-{step}", root / f"checkpoint-{step}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write_file(tmp / "model.bin", size_mb // 2, step)
    if stall:
        os.replace(tmp, final)  # the worst case: final name, half the files, no marker
        print(f"stalling inside save {step}", flush=True)
        time.sleep(3600)
    write_file(tmp / "optimizer.bin", size_mb - size_mb // 2, step)
    (tmp / "trainer_state.json").write_text(json.dumps({"global_step": step}) + "\n")
    os.replace(tmp, final)
    files = {p.name: p.stat().st_size for p in sorted(final.iterdir())}
    marker = final / ".gpujob-complete.tmp"
    marker.write_text(json.dumps({"step": step, "files": files, "written_by": "program"}))
    os.replace(marker, final / ".gpujob-complete")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", required=True)
    parser.add_argument("--saves", type=int, default=20)
    parser.add_argument("--size", type=int, default=200, help="MB per checkpoint")
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--stall-at", type=int, default=0)
    parser.add_argument("--keep-last", type=int, default=0)
    args = parser.parse_args()
    root = Path(args.dir)
    for n in range(1, args.saves + 1):
        time.sleep(args.every)
        try:
            save(root, n * 10, args.size, stall=n == args.stall_at)
        except OSError as err:
            print(f"save {n * 10} failed: {err}", flush=True)
            return 28
        print(f"saved checkpoint-{n * 10}", flush=True)
        if args.keep_last:
            done = sorted((p for p in root.glob("checkpoint-*")), key=lambda p: int(p.name[11:]))
            for old in done[: -args.keep_last]:
                shutil.rmtree(old)
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
