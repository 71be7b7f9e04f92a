"""A small C++ (and, with CUDA, CUDA) op JIT-compiled at import, as DeepSpeed ops are (seed 001).

Each rank builds its own copy under a fresh name, so every rank really compiles: the start-up
load that ran the seed's 8 ranks out of host memory when they did it at the same moment.
"""

from __future__ import annotations

import os
import sys
import time

import torch
from torch.utils.cpp_extension import load_inline

CPP = "torch::Tensor scale(torch::Tensor x, double a);"
CPU_IMPL = "torch::Tensor scale(torch::Tensor x, double a) { return x * a; }"
CUDA_IMPL = """
__global__ void scale_kernel(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
torch::Tensor scale(torch::Tensor x, double a) {
    auto y = x.contiguous().clone();
    int n = y.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(y.data_ptr<float>(), (float)a, n);
    return y;
}
"""

_rank = os.environ.get("RANK", "0")
_name = f"gpujob_scale_r{_rank}_{os.getpid()}"
_build = os.path.join(os.environ.get("GPUJOB_JIT_DIR", "/tmp/gpujob-jit"), _name)
os.makedirs(_build, exist_ok=True)
_began = time.monotonic()
if torch.cuda.is_available():
    ops = load_inline(_name, cpp_sources=CPP, cuda_sources=CUDA_IMPL, functions=["scale"],
                      build_directory=_build)  # fmt: skip
else:
    ops = load_inline(
        _name, cpp_sources=CPP + CPU_IMPL, functions=["scale"], build_directory=_build
    )
# One write for the whole line: every rank compiles at once and shares stdout, where an
# unbuffered `print` writes text and newline separately and lines from ranks interleave.
sys.stdout.write(f"rank {_rank}: jit_ops built in {time.monotonic() - _began:.1f} s\n")
sys.stdout.flush()
