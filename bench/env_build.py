"""A cold job environment for an image (lab-cpu by default), made by gpujob's own script with
uv and with pip, from the same local wheel cache, in one run. Prints both times and the ratio.

The wheel cache is a folder of every pinned wheel, downloaded once before anything is timed
(`pip download`, from the machine's configured sources); both runs then install from it alone
(PIP_NO_INDEX + PIP_FIND_LINKS, which the script hands to uv as it does any pip
configuration). Cold: a fresh environment folder each run, uv with an empty cache of its own,
pip with its cache off. The uv run finds uv through GPUJOB_UV; the pip run gets a Python with
no uv beside it and a PATH without uv, as on a host that lacks it.
Usage: .venv/bin/python bench/env_build.py [--image lab-cpu] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from launcher.plan.env_build import env_script  # noqa: E402
from launcher.spec.image import load_image_definition  # noqa: E402

UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
BASE_PYTHON = shutil.which("python3", path="/usr/local/bin:/usr/bin") or "python3"


def wheel_cache(pins: list[str], where: Path) -> Path:
    """Every pinned wheel in one folder; downloaded once, reused by later runs."""
    where.mkdir(parents=True, exist_ok=True)
    reqs = where / "requirements.txt"
    reqs.write_text("\n".join(pins) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary=:all:",
                    "--dest", str(where), "-r", str(reqs)], check=True,
                   stderr=subprocess.DEVNULL)  # fmt: skip
    return where


def build(tool: str, pins: list[str], wheels: Path, scratch: Path, name: str = "") -> float:
    """One environment made by gpujob's script; `name` a second one beside the first (uv's
    cache in `scratch` is then warm)."""
    env_dir = scratch / f"env-{tool}{name}"
    reqs = scratch / "requirements.txt"
    reqs.write_text("\n".join(pins) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "VIRTUAL_ENV"))}
    env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheels), PIP_NO_CACHE_DIR="1",
               UV_CACHE_DIR=str(scratch / f"uv-cache-{tool}"))  # fmt: skip
    if tool == "uv":
        env["GPUJOB_UV"] = UV or ""
    else:
        env["PATH"] = ":".join(p for p in env["PATH"].split(":")
                               if not (Path(p) / "uv").exists())  # fmt: skip
        env["HOME"] = str(scratch / "home")  # no ~/.local/bin/uv either
    script = env_script(str(env_dir), BASE_PYTHON, str(reqs), len(pins))
    start = time.monotonic()
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if done.returncode != 0 or f"with {tool}:" not in done.stderr:
        sys.exit(f"{tool} build failed ({done.returncode}):\n{done.stderr[-3000:]}")
    check = [str(env_dir / "bin" / "python"), "-c", "import torch, transformers"]
    subprocess.run(check, check=True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="lab-cpu")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if UV is None:
        sys.exit("no uv here: pip install uv (it is in gpujob's dependencies)")
    image = load_image_definition(args.image, REPO)
    assert image is not None, args.image
    pins = list(image.pins)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    wheels = wheel_cache(pins, cache / "gpujob-bench" / f"wheels-{image.name}")
    times: dict[str, list[float]] = {"pip": [], "uv": [], "uv, its cache warm": []}
    for _ in range(args.rounds):  # interleaved, so a busy minute hits both
        with tempfile.TemporaryDirectory(prefix="envbench-pip-") as scratch:
            times["pip"].append(build("pip", pins, wheels, Path(scratch)))
        with tempfile.TemporaryDirectory(prefix="envbench-uv-") as scratch:
            times["uv"].append(build("uv", pins, wheels, Path(scratch)))
            times["uv, its cache warm"].append(build("uv", pins, wheels, Path(scratch), "-2"))
    version = subprocess.run([UV, "--version"], capture_output=True, text=True).stdout.strip()
    print(f"image {image.name}: {len(pins)} pins, wheels from {wheels}; {version}; "
          f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")  # fmt: skip
    pip_s = min(times["pip"])
    print("| build | best | runs (s) | ratio to pip |\n| --- | --- | --- | --- |")
    for label, runs in times.items():
        shown = ", ".join(f"{t:.1f}" for t in runs)
        print(f"| {label} | {min(runs):.1f} s | {shown} | {min(runs) / pip_s:.2f} |")
    print("target: uv (cold) at most 0.35 of pip's time")


if __name__ == "__main__":
    main()
