"""`gpujob up --count 8` against `up` of one on the lab's Lambda and Vast fakes (issue 32:
within 1.5x), both measured in one run, each followed by `gpujob down --all`.

Every host is rented, waited for and bootstrapped (`--allow-cpu`: lab hosts have no GPU).
The fakes' rate limits are turned on (off by default), at the clouds' figures: Lambda takes
one launch per 12 s and its API 1.10 launches one instance a call (no `quantity`), so 8 hosts
cost at least 7 x 12 s of launches however the rest overlaps (gpujob paces its launches to
that); Vast's fake takes a create per 4.5 s per key (gpujob's creates go at once and wait
out its 429s). The bench works on a lab of its
own name (`GPUJOB_LAB_NAME`, default `gjupcount`), under that lab's lock, and takes it down
at the end (`gpujob lab down`). Usage (root):
    python bench/up_count.py [--rounds 1] [--count 8] [--clouds lambda,vast]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from parallel_up import timed  # a sibling: `python bench/up_count.py` puts bench/ first

REPO = Path(__file__).resolve().parents[1]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))  # the venv running the bench
GPU = {"lambda": "a100", "vast": "rtx4090"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1, help="alternated rounds of 1 and N")
    parser.add_argument("--count", type=int, default=8)
    parser.add_argument("--clouds", default="lambda,vast")
    options = parser.parse_args()
    os.environ.setdefault("GPUJOB_LAB_NAME", "gjupcount")
    sys.path.insert(0, str(REPO))
    import infra.lab
    from infra.lab import naming

    scratch = Path(tempfile.mkdtemp(prefix="gjbench-upcount-"))
    with naming.session_lock().open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            infra.lab.up(hosts=0, report=lambda line: print(f"lab: {line}", file=sys.stderr))
            times = run_bench(scratch, options)
        finally:
            down = subprocess.run([GPUJOB, "lab", "down"], capture_output=True, text=True)
            print(f"gpujob lab down: exit {down.returncode}", file=sys.stderr)
            shutil.rmtree(scratch, ignore_errors=True)
    for cloud, by_count in times.items():
        one, many = (statistics.median(by_count[n]) for n in (1, options.count))
        for n in (1, options.count):
            runs = ", ".join(f"{t:.1f}" for t in by_count[n])
            print(f"{cloud}: up --count {n}: median {statistics.median(by_count[n]):5.1f} s"
                  f"  (runs {runs})")  # fmt: skip
        print(f"{cloud}: ratio {options.count}/1: {many / one:.2f}  (target within 1.5)")


def run_bench(scratch: Path, options: argparse.Namespace) -> dict[str, dict[int, list[float]]]:
    import infra.lab
    from infra.fakes import LAMBDA_API_KEY, VAST_API_KEY, serve_lambda, serve_vast
    from infra.fakes.lab_backend import LabBackend
    from infra.lab import base_image, registry

    backend = LabBackend(scratch / "records.json")
    fakes = {"lambda": serve_lambda(backend), "vast": serve_vast(backend)}
    env = dict(os.environ, GPUJOB_STATE_DIR=str(scratch / "state"),
               GPUJOB_CACHE_DIR=str(scratch / "cache"),
               GPUJOB_HOSTS_FILE=str(scratch / "hosts.yaml"),
               GPUJOB_SSH_KEY=str(infra.lab.user_key()), GPUJOB_POLL_S="0.5",
               GPUJOB_LAMBDA_SSH_USER="root", LAMBDA_API_KEY=LAMBDA_API_KEY,
               GPUJOB_LAMBDA_API_URL=fakes["lambda"].url, VAST_API_KEY=VAST_API_KEY,
               GPUJOB_VAST_API_URL=fakes["vast"].url,
               GPUJOB_VAST_IMAGE=f"{registry.address()}/{base_image.TAG}")  # fmt: skip
    for fake in fakes.values():  # off by default in the fakes: on, at the clouds' figures
        fake.api.knobs.rate_limits = True
    _more_offers(fakes["vast"].api, options.count)
    clouds = options.clouds.split(",")
    times = {cloud: {1: [], options.count: []} for cloud in clouds}
    try:
        for _ in range(options.rounds):
            for cloud in clouds:
                for count in (1, options.count):
                    argv = ("up", GPU[cloud], "--provider", cloud, "--count", str(count))
                    took = timed(env, *argv, "--yes", "--allow-cpu", "--timeout", "600")
                    times[cloud][count].append(took)
                    print(f"{cloud}: up --count {count}: {took:.1f} s", file=sys.stderr)
                    timed(env, "down", "--all")
                    _settled(backend)
    finally:
        subprocess.run([GPUJOB, "down", "--all"], env=env, capture_output=True)
        for fake in fakes.values():
            fake.stop()
        backend.close()
    return times


def _more_offers(api, count: int) -> None:  # api: the Vast fake's VastApi
    """The Vast fake's seed has one single-RTX 4090 machine a location; `count` more like the
    cheapest, each a machine of its own, as a marketplace of many hosts has."""
    offers = api.books.offers
    cheapest = min((o for o in offers.values() if o["gpu_name"] == "RTX 4090"
                    and o["num_gpus"] == 1), key=lambda o: o["dph_total"])  # fmt: skip
    for n in range(count):
        offer_id = 12349000 + n
        offers[offer_id] = {
            **cheapest,
            "id": offer_id,
            "ask_contract_id": offer_id,
            "bundle_id": 987659000 + n,
            "machine_id": 89000 + n,
            "host_id": 59000 + n,
            "public_ipaddr": f"203.0.113.{100 + n}",
        }


def _settled(backend, timeout_s: float = 120.0) -> None:  # backend: a LabBackend
    """The fake tears a destroyed instance's container and host down after `down` returns;
    the next round waits for that, so it never lands on a machine being torn down."""
    deadline = time.monotonic() + timeout_s
    while backend.records and time.monotonic() < deadline:
        time.sleep(0.5)


if __name__ == "__main__":
    main()
