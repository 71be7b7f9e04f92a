"""The checks `gpujob doctor` runs on a host, shipped there as one file and run with the
host's Python. Standard library at import time: torch is imported inside the stages that
need it, so a host without torch still gets its disk, memory and import verdicts.

Prints one JSON object per stage: {"stage", "verdict": ok|warn|fail|not run, "value",
"unit", "detail"}. A stage that cannot run says why instead of pretending.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

HEAVY_IMPORTS = ("torch", "transformers", "accelerate", "peft", "trl", "flash_attn",
                 "deepspeed", "bitsandbytes")  # fmt: skip
NCCL_SIZES_MB = (1, 16, 64, 256)


STAGES = 7
"""gpus, torch, matmul, all-reduce, imports, disk/shm/memory here; S3 is run by doctor."""


def starting(number: int, what: str) -> None:
    """One line on stderr before each stage, so a slow one (torch's first import: tens of
    seconds) is seen running; gpujob streams it as it comes."""
    print(f"doctor [{number}/{STAGES}] {what}", file=sys.stderr, flush=True)


def emit(stage: str, verdict: str, value: float | None = None, unit: str = "",
         detail: str = "") -> None:  # fmt: skip
    print(json.dumps({"stage": stage, "verdict": verdict, "value": value, "unit": unit,
                      "detail": detail}), flush=True)  # fmt: skip


def gpus() -> list[str]:
    if shutil.which("nvidia-smi") is None:
        emit("gpus", "not run", detail="no nvidia-smi: no NVIDIA driver on this host")
        return []
    done = subprocess.run(
        ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True, text=True,
    )  # fmt: skip
    rows = [r.split(", ") for r in done.stdout.strip().splitlines() if r.strip()]
    if done.returncode != 0 or not rows:
        emit("gpus", "fail", detail=(done.stderr or done.stdout).strip()[-300:])
        return []
    names = [r[0] for r in rows]
    emit("gpus", "ok", len(rows), "GPUs", f"{names[0]}, driver {rows[0][1]}, {rows[0][2]}")
    return names


def torch_stage(want_gpus: int) -> object | None:
    try:
        import torch
    except ImportError as error:
        emit("torch", "fail", detail=f"cannot import torch: {error}")
        return None
    cuda = torch.version.cuda or "none"
    if want_gpus == 0:
        emit("torch", "ok", detail=f"torch {torch.__version__} (CUDA build {cuda}), CPU only")
        return torch
    seen = torch.cuda.device_count() if torch.cuda.is_available() else 0
    verdict = "ok" if seen == want_gpus else "fail"
    emit("torch", verdict, seen, "GPUs seen",
         f"torch {torch.__version__}, CUDA {cuda}; nvidia-smi lists {want_gpus}")  # fmt: skip
    return torch if seen else None


def matmul(torch: object, count: int) -> None:
    """TFLOPS of a large bf16 matmul per GPU (fp32 on CPU): a GPU far below its peers, or
    below its datasheet, is throttled or sick."""
    t = torch  # type: ignore[assignment]
    devices = [f"cuda:{i}" for i in range(count)] or ["cpu"]
    for device in devices:
        n = 8192 if device != "cpu" else 1024
        dtype = t.bfloat16 if device != "cpu" else t.float32  # type: ignore[attr-defined]
        a = t.randn(n, n, device=device, dtype=dtype)  # type: ignore[attr-defined]
        b = t.randn(n, n, device=device, dtype=dtype)  # type: ignore[attr-defined]
        for _ in range(3):
            a @ b
        sync(t, device)
        iters = 20 if device != "cpu" else 5
        start = time.perf_counter()
        for _ in range(iters):
            a @ b
        sync(t, device)
        tflops = 2 * n**3 * iters / (time.perf_counter() - start) / 1e12
        emit(f"matmul {device}", "ok", round(tflops, 2), "TFLOPS",
             f"{n}x{n} {'bf16' if device != 'cpu' else 'fp32'}")  # fmt: skip


def sync(t: object, device: str) -> None:
    if device != "cpu":
        t.cuda.synchronize(device)  # type: ignore[attr-defined]


def _allreduce_worker(rank: int, world: int, port: int, backend: str, out: object) -> None:
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(backend, rank=rank, world_size=world)
    device = f"cuda:{rank}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
    sizes = NCCL_SIZES_MB if backend == "nccl" else (1, 16)
    for size_mb in sizes:
        x = torch.ones(size_mb * 2**20 // 4, device=device)
        for _ in range(3):
            dist.all_reduce(x)
        sync(torch, device)
        iters = 20 if backend == "nccl" else 5
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        sync(torch, device)
        elapsed = (time.perf_counter() - start) / iters
        if rank == 0:
            algbw = size_mb * 2**20 / elapsed / 1e9
            out.put((size_mb, algbw * 2 * (world - 1) / world))  # type: ignore[attr-defined]
    dist.destroy_process_group()


def allreduce(torch: object, count: int) -> None:
    """All-reduce bus bandwidth (nccl-tests' busbw) across every GPU of the host, by size;
    on a CPU host a two-process gloo all-reduce shows that torch.distributed works at all."""
    import socket

    import torch.multiprocessing as mp

    backend, world = ("nccl", count) if count >= 2 else ("gloo", 2)
    if count == 1:
        emit("nccl all-reduce", "not run", detail="one GPU: nothing to reduce across")
        return
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_allreduce_worker, args=(r, world, port, backend, out))
             for r in range(world)]  # fmt: skip
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    if any(p.exitcode != 0 for p in procs):
        emit(f"{backend} all-reduce", "fail", detail=f"exit codes {[p.exitcode for p in procs]}")
        return
    while not out.empty():
        size_mb, busbw = out.get()
        emit(f"{backend} all-reduce {size_mb} MB", "ok", round(busbw, 2), "GB/s busbw",
             f"{world} ranks")  # fmt: skip


def imports() -> None:
    """Each heavy import timed alone in a fresh interpreter: a 40 s import is a slow start of
    every rank, and an import error here is a crash at step 0 later."""
    for name in HEAVY_IMPORTS:
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True,
                              text=True)  # fmt: skip
        took = round(time.perf_counter() - start, 2)
        if done.returncode == 0:
            emit(f"import {name}", "ok", took, "s")
        elif "No module named" in done.stderr and f"'{name}'" in done.stderr:
            emit(f"import {name}", "not run", detail="not installed")
        else:
            emit(f"import {name}", "fail", took, "s", done.stderr.strip().splitlines()[-1])


def space() -> None:
    for label, path, low_gb in (("disk", os.path.expanduser("~"), 50), ("shm", "/dev/shm", 1)):
        if not os.path.exists(path):
            emit(label, "not run", detail=f"no {path}")
            continue
        free = shutil.disk_usage(path).free / 1e9
        emit(label, "ok" if free >= low_gb else "warn", round(free, 1), "GB free",
             path + ("" if free >= low_gb else f": under {low_gb} GB"))  # fmt: skip
    try:
        with open("/proc/meminfo") as info:
            fields = dict(line.split(":", 1) for line in info)
        available = int(fields["MemAvailable"].split()[0]) / 1e6
        emit("memory", "ok", round(available, 1), "GB available")
    except (OSError, KeyError, ValueError) as error:
        emit("memory", "not run", detail=str(error))


def main() -> int:
    starting(1, "GPUs (nvidia-smi)")
    names = gpus()
    starting(2, "torch: import and CUDA")
    torch = torch_stage(len(names))
    if torch is None:
        for stage in ("matmul", "all-reduce"):
            emit(stage, "not run", detail="torch is not usable here")
    else:
        starting(3, f"matmul on {len(names) or 'the CPU, no'} GPU(s)")
        matmul(torch, len(names))
        starting(4, "all-reduce across the GPUs")
        allreduce(torch, len(names))
    starting(5, f"heavy imports, each timed alone ({', '.join(HEAVY_IMPORTS)})")
    imports()
    starting(6, "disk, shm and memory")
    space()
    return 0


if __name__ == "__main__":
    sys.exit(main())
