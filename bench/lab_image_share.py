"""How a freshly booted lab host best gets the 1.5 GB lab-cpu image, measured three ways, each
on a new host with its own dockerd (what every Lambda rent and most lab test fixtures make):

- pull:  the host's dockerd pulls it from the lab registry (what hosts did before the store);
- load:  `docker save` once (not timed), then `docker load` of that tarball into the host;
- store: the lab's image store (infra/lab/image_store.py): the host's data root starts from
         hard links to a data root that holds the image, before its dockerd starts.

Each time is from "host has an empty dockerd" to "the image is usable on the host" (`docker
image inspect` answers), host boot excluded; store includes its dockerd's start, which the
others have already paid. Needs root and the lab image built (`python -m infra.lab.job_image`);
takes the session lock of the lab named by GPUJOB_LAB_NAME (default gjlab) and removes its hosts.
Run: `python bench/lab_image_share.py [--rounds N]`.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def docker(host, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(["docker", "-H", host.docker_host, *args], capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"docker {' '.join(args)}: {done.stderr.strip()}")
    return done


def fresh_host(name: str, store: bool):
    """A new host with Docker; with `store` off its data root starts empty."""
    import infra.lab

    os.environ["GPUJOB_LAB_IMAGE_STORE"] = "1" if store else "0"
    try:
        return infra.lab.create_host(name, docker=True)
    finally:
        os.environ.pop("GPUJOB_LAB_IMAGE_STORE")


def one_round(ref: str, tarball: Path) -> dict[str, float]:
    import infra.lab

    times = {}
    for way in ("pull", "load", "store"):
        name = f"share-{way}"
        try:
            start = time.monotonic()
            host = fresh_host(name, store=way == "store")
            if way != "store":
                start = time.monotonic()  # boot excluded where the image comes after it
            if way == "pull":
                docker(host, "pull", "-q", ref)
            elif way == "load":
                docker(host, "load", "-q", "-i", str(tarball))
            docker(host, "image", "inspect", ref)
            times[way] = time.monotonic() - start
        finally:
            infra.lab.destroy_host(name)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1)
    rounds = parser.parse_args().rounds
    sys.path.insert(0, str(REPO))
    import infra.lab
    from infra.lab import job_image, naming

    with naming.session_lock().open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        infra.lab.up(hosts=0, report=lambda _: None)
        ref = job_image.build(report=lambda _: None)  # pushed: the store holds it too
        with tempfile.TemporaryDirectory(dir="/var/tmp") as tmp:
            tarball = Path(tmp) / "lab-cpu.tar"
            subprocess.run(["docker", "tag", job_image.TAG, ref], check=True)  # load names it
            subprocess.run(["docker", "save", "-o", str(tarball), ref], check=True)
            subprocess.run(["docker", "rmi", ref], check=True, capture_output=True)  # the tag
            results = [one_round(ref, tarball) for _ in range(rounds)]
    for way in ("pull", "load", "store"):
        seen = [r[way] for r in results]
        print(
            f"{way:5s}  median {statistics.median(seen):6.1f} s   "
            f"({', '.join(f'{s:.1f}' for s in seen)})"
        )


if __name__ == "__main__":
    main()
