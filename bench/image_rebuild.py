"""A no-change `gpujob image build` against the first build of the same lock, one run each.

The first build is forced with --no-cache (every layer built again; the verified wheelhouse
cache stays warm, so no download is timed); the rebuild is the command a user or CI runs
again with nothing changed. Prints both times and their ratio.
Usage: .venv/bin/python bench/image_rebuild.py [--image lab-cpu]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

GPUJOB = str(Path(__file__).resolve().parents[1] / ".venv" / "bin" / "gpujob")


def timed(*argv: str) -> tuple[float, str]:
    start = time.monotonic()
    done = subprocess.run([GPUJOB, "image", "build", *argv], capture_output=True, text=True)
    elapsed = time.monotonic() - start
    if done.returncode != 0:
        sys.exit(f"gpujob image build {' '.join(argv)} failed:\n{done.stderr[-3000:]}")
    return elapsed, done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="lab-cpu")
    image = parser.parse_args().image
    first, _ = timed(image, "--no-cache")
    again, log = timed(image)
    assert "cached" in log, log
    print(f"first build (--no-cache): {first:.1f} s")
    print(f"no-change rebuild:        {again:.2f} s")
    print(f"ratio rebuild/first:      {again / first:.4f} ({first / again:.0f}x faster)")


if __name__ == "__main__":
    main()
