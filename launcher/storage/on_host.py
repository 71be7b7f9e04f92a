"""Storage work on a job's host, through its Connection: the host, not this machine, is
where the checkpoints are and from where S3 must answer.

Each step is a short stdlib Python program run with the host's python3 (`python3 -c`, argv
literal). The remote's variables travel on the program's stdin, so keys are never on a
command line or in a file on the host: a client killed at any point leaves none behind.
"""

from __future__ import annotations

import json
from typing import Any

from launcher.errors import GpujobError
from launcher.remote.base import Connection, Result

PROBE = r"""
import json, os, subprocess, sys, uuid
bucket_path, prefix_path = sys.argv[1:3]
env = dict(os.environ)
env.pop("AWS_CA_BUNDLE", None)
env["RCLONE_CONFIG"] = "/dev/null"
env["PATH"] = os.path.expanduser("~/.local/bin") + os.pathsep + env.get("PATH", "")
env.update(json.load(sys.stdin))
probe = prefix_path.rstrip("/") + "/.gpujob-probe-" + uuid.uuid4().hex[:8]
steps = [("list the bucket", ["rclone", "lsf", "--max-depth", "1", bucket_path]),
         ("write a probe object", ["rclone", "touch", probe]),
         ("delete the probe object", ["rclone", "deletefile", probe])]
for what, argv in steps:
    done = subprocess.run(argv + ["--contimeout", "5s", "--low-level-retries", "2",
                                  "--retries", "1"], env=env, capture_output=True, text=True)
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["exit %d" % done.returncode])[-1]
        print("%s: %s" % (what, last))
        sys.exit(1)
print("ok")
"""

FREE = r"""
import os, shutil, sys
path = os.path.expanduser(sys.argv[1])
while not os.path.exists(path):
    path = os.path.dirname(path)
print(shutil.disk_usage(path).free, int(os.path.isdir(os.path.expanduser(sys.argv[2]))), path)
"""


def run_python(
    conn: Connection, script: str, args: list[str], env: dict[str, str] | None = None
) -> Result:
    """`script` with the host's python3; `env` (the remote's keys) as JSON on its stdin."""
    given = None if env is None else json.dumps(env).encode()
    return conn.run(["python3", "-c", script, *args], input=given)


def probe(conn: Connection, env: dict[str, str], bucket_path: str, prefix_path: str) -> str | None:
    """None when the host lists the bucket and writes/deletes a probe; else what failed."""
    result = run_python(conn, PROBE, [bucket_path, prefix_path], env)
    if result.ok and result.stdout.strip() == "ok":
        return None
    return (result.stdout.strip() or result.stderr.strip() or f"exit {result.exit_code}")[-300:]


def free_space(conn: Connection, path: str, env_dir: str) -> tuple[int, bool, str]:
    """(free bytes where `path` will be, whether `env_dir` exists, the folder measured)."""
    result = run_python(conn, FREE, [path, env_dir])
    try:
        free, exists, where = result.stdout.split(maxsplit=2)
        return int(free), exists == "1", where.strip()
    except ValueError:
        raise GpujobError(
            f"{conn.host}: cannot measure free disk at {path}: {result.stderr.strip()[-200:]}"
        ) from None


def read_json(conn: Connection, path: str) -> dict[str, Any]:
    result = conn.run(["cat", path])
    if not result.ok:
        raise GpujobError(f"{conn.host}: cannot read {path}: {result.stderr.strip()[-200:]}")
    return json.loads(result.stdout)
