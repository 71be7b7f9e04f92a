"""gpujob's checkpoint sync against raw `rclone copy` with default flags: same 2 GB tree, same
moto S3 server (loopback), one run each, then a no-change re-sync of each.

gpujob's figure is its whole push (launcher/agent/ckpt_sync.py, what the agent and
`gpujob sync-ckpt` run): tuned copy, `rclone check` of every byte's MD5, markers last. The
raw copy does no verification. moto rejects rclone's post-upload HEAD of multipart objects
(runtime.md 1.11), so the raw copy's first attempt fails and rclone retries: that is what
default flags cost against this server, and the table says so.

    python3 bench/sync_ckpt.py [--gb 2] [--checkpoints 4]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "launcher" / "agent"))
import ckpt_store  # noqa: E402 - the agent's own module, stdlib only

SYNC = REPO / "launcher" / "agent" / "ckpt_sync.py"
KEYS = {"access_key_id": "bench", "secret_access_key": "bench-secret"}


def remote_env(url: str) -> dict[str, str]:
    head = "RCLONE_CONFIG_GPUJOB_BENCH_"
    opts = {
        "TYPE": "s3",
        "PROVIDER": "Other",
        "ENDPOINT": url,
        "REGION": "us-east-1",
        "ACCESS_KEY_ID": KEYS["access_key_id"],
        "SECRET_ACCESS_KEY": KEYS["secret_access_key"],
        "FORCE_PATH_STYLE": "true",
    }
    return {head + k: v for k, v in opts.items()}


def make_tree(root: Path, total_gb: float, count: int) -> int:
    """`count` HF-shaped checkpoints summing to `total_gb`: weights, optimizer, small files."""
    block = os.urandom(16 << 20)
    per = int(total_gb * (1 << 30) / count)
    for n in range(1, count + 1):
        path = root / f"checkpoint-{n * 500}"
        path.mkdir(parents=True)
        for name, share in (("model.safetensors", 0.34), ("optimizer.pt", 0.66)):
            size = int(per * share)
            with open(path / name, "wb") as out:
                out.write(f"{n}{name}".encode())
                while out.tell() < size:
                    out.write(block[: min(len(block), size - out.tell())])
        for small in ("config.json", "trainer_state.json", "scheduler.pt", "rng_state.pth"):
            (path / small).write_text(json.dumps({"global_step": n * 500, "file": small}))
        ckpt_store.write_marker(path, n * 500, "program")
    return sum(ckpt_store.tree_bytes(p) for p in root.iterdir())


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    return time.perf_counter() - started, done.returncode, done.stderr + done.stdout


def gpujob_push(src: Path, dest: str, url: str) -> tuple[float, int, str]:
    env_file = Path(tempfile.mkstemp(suffix=".json")[1])
    env_file.write_text(json.dumps(remote_env(url)))
    return timed(
        [sys.executable, str(SYNC), "push", str(src), dest, "--env-file", str(env_file), "--json"],
        dict(os.environ),
    )


def rclone_version() -> str:
    return subprocess.run(["rclone", "version"], capture_output=True, text=True).stdout.split()[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gb", type=float, default=2.0)
    parser.add_argument("--checkpoints", type=int, default=4)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="gj-bench-sync-"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    moto = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(url, timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        size = make_tree(work / "src", args.gb, args.checkpoints)
        env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
        env |= remote_env(url) | {"RCLONE_CONFIG": "/dev/null"}
        for bucket in ("raw", "gpujob"):
            subprocess.run(["rclone", "mkdir", f"gpujob_bench:{bucket}"], env=env, check=True)
        raw_argv = ["rclone", "copy", str(work / "src"), "gpujob_bench:raw/run"]
        rows = {
            "raw rclone copy (defaults)": timed(raw_argv, env),
            "gpujob sync (tuned + check + markers)": gpujob_push(
                work / "src", "gpujob_bench:gpujob/run", url
            ),
            "raw rclone copy, no change": timed(raw_argv, env),
            "gpujob sync, no change": gpujob_push(work / "src", "gpujob_bench:gpujob/run", url),
        }
        print(
            f"machine: {platform.node()}, {os.cpu_count()} cores; tree {size / 1e9:.2f} GB in "
            f"{args.checkpoints} checkpoints; moto_server on loopback; rclone "
            f"{rclone_version()}"
        )
        for name, (seconds, code, output) in rows.items():
            retried = "retried" if "Attempt 1/" in output and "failed" in output else ""
            print(
                f"{name:40s} {seconds:7.2f} s  exit {code}  "
                f"{size / seconds / 1e6:8.1f} MB/s {retried}"
            )
        raw, ours = (
            rows["raw rclone copy (defaults)"][0],
            rows["gpujob sync (tuned + check + markers)"][0],
        )
        raw_nc, ours_nc = rows["raw rclone copy, no change"][0], rows["gpujob sync, no change"][0]
        print(
            f"ratio gpujob/raw, full copy: {ours / raw:.2f}; "
            f"no-change re-sync: {ours_nc / raw_nc:.2f}"
        )
        return 0 if all(code == 0 for _, code, _ in rows.values()) else 1
    finally:
        moto.terminate()
        moto.wait(10)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
