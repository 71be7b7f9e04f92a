"""A fresh host to its first training step (issue 32): `gpujob submit --up` of the
quickstart on the lab's Lambda fake, from the command's start to the job's first step,
against the sum of its unavoidable parts measured in the same run (target: at most 1.15).

The quickstart runs with the bare runtime (`--runtime bare`): its lab-cpu pins become a job
environment on the host, made with uv. The lab has no internet, so the fake's machine image
carries a warm wheel cache: every pinned wheel in a folder, and a pip.conf naming it
(no index), as a user's image with a wheelhouse would; uv's own cache on the fresh host is
empty. The parts, each measured directly (no gpujob) on a fresh instance of the same fake,
rounds alternating with gpujob's:
  boot       the fake's launch, read until it has an address, until SSH answers
             (the API and the banner read back to back, no interval)
  bootstrap  what a fresh host must get before a bare job: uv (this machine's, copied as
             bootstrap does) and the job's files, over one open connection
  env        the job environment from the wheel cache with uv: gpujob's own env script
  start      the job's own start on the ready host: torchrun of train.py in that
             environment, as gpujob's run script starts it, until `step 1/` is printed
The gpujob round stamps each line of the submit's output as it comes, to show where the
rest goes (`--trace`). The bench works on the lab that is up, or brings one up under its
own name (GPUJOB_LAB_NAME, default `gjfresh`) and takes it down at the end.
Usage (root): .venv/bin/python bench/fresh_host.py [--rounds 3] [--trace]
"""

from __future__ import annotations

import argparse
import fcntl
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from env_build import wheel_cache  # siblings: `python bench/fresh_host.py` puts bench/ first
from recovery import GPUJOB, REPO, Stamped, pump, terminate

from infra.fakes.lab_backend import LabBackend
from infra.lab import boot, user_key
from launcher.bootstrap.steps import local_uv
from launcher.plan.env_build import UV_HOME_PATH, env_script

JOB = REPO / "jobs" / "quickstart.yaml"
ARGS = "--steps 60 --seq-len 64"  # the quickstart's
FIRST_STEP = rb"step 1/60 "
PHASES = {  # gpujob's own lines, each ending a phase of the submit (its name)
    rb": launching on lambda": "rent",
    rb": bootstrapping ": "boot",
    rb": ready at ": "bootstrap",
    rb"creating the job environment": "submit",
    rb"Installed \d+ packages|Successfully installed": "env",  # uv, or pip where no uv
    rb"starting torchrun": "ship",
}
"""The last phase, `start`, ends at the first step line."""
WHEELS = Path("/var/cache/gpujob-bench/wheels-lab-cpu")  # where the lab hosts see it too


def gpujob_round(env: dict[str, str], n: int, trace: bool) -> dict:
    """`submit --up` from its start to the first step line, its output stamped."""
    job_id = f"bench-fresh-{n}"
    out, err = Stamped(), Stamped()
    start = time.monotonic()
    proc = subprocess.Popen([GPUJOB, "submit", str(JOB), "--up", "a100", "--allow-cpu",
                             "--runtime", "bare", "--job-id", job_id], env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    pumps = [threading.Thread(target=pump, args=(pipe, into), daemon=True)
             for pipe, into in ((proc.stdout, out), (proc.stderr, err))]  # fmt: skip
    for thread in pumps:
        thread.start()
    first = out.wait(FIRST_STEP, proc=proc)
    code = proc.wait(timeout=600)
    for thread in pumps:
        thread.join(timeout=10)
    if code != 0:
        sys.exit(f"gpujob failed ({code}): {b''.join(line for _, line in err.lines)[-2000:]!r}")
    merged = sorted([*out.lines, *err.lines], key=lambda pair: pair[0])
    if trace:
        print(f"{job_id}: gpujob's lines (s after the start)")
        for at, line in merged:
            if at <= first:
                print(f"  {at - start:6.2f}  {line.decode(errors='replace')[:140]}")
    subprocess.run([GPUJOB, "down", "--all"], env=env, capture_output=True)
    at = [start, *(next(t for t, line in merged if re.search(event, line)) for event in PHASES),
          first]  # fmt: skip
    names = [*PHASES.values(), "start"]
    phases = {f"g.{name}": b - a for name, a, b in zip(names, at[:-1], at[1:], strict=True)}
    return {"total": first - start, **phases}


class WheelhouseHosts(LabBackend):
    """The lab's Lambda VMs, each with a pip.conf naming the wheel cache and no index."""

    def launch_vm(self, instance_id: str, ssh_public_key: str) -> tuple[str, int]:
        made = super().launch_vm(instance_id, ssh_public_key)
        conf = boot.host_dir(self.records[instance_id]["host"]) / "root" / ".config" / "pip"
        conf.mkdir(parents=True, exist_ok=True)
        (conf / "pip.conf").write_text(f"[global]\nno-index = true\nfind-links = {WHEELS}\n")
        return made


class Direct:
    """A fresh instance of the fake made ready by hand: the API, ssh, gpujob's env script."""

    def __init__(self, fake: object, scratch: Path, key_name: str) -> None:
        self.fake, self.scratch, self.key_name = fake, scratch, key_name
        self.address = ""

    def api(self, method: str, path: str, **body: object) -> dict:
        import requests

        from infra.fakes import LAMBDA_API_KEY

        reply = requests.request(method, f"{self.fake.url}{path}", timeout=30,  # type: ignore[attr-defined]
                                 headers={"Authorization": f"Bearer {LAMBDA_API_KEY}"},
                                 json=body or None)  # fmt: skip
        reply.raise_for_status()
        return reply.json()["data"]

    def argv(self, *args: str) -> list[str]:
        """OpenSSH to the instance through one master connection (the first call opens it)."""
        return ["ssh", "-i", str(user_key()), "-o", "StrictHostKeyChecking=no",
                "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
                "-o", "BatchMode=yes", "-o", "ControlMaster=auto",
                "-o", f"ControlPath={self.scratch / 'direct.sock'}", "-o", "ControlPersist=120",
                *args, f"root@{self.address}"]  # fmt: skip

    def ssh(self, command: str, **kwargs: object) -> subprocess.CompletedProcess:
        return subprocess.run([*self.argv(), command], **kwargs)  # type: ignore[call-overload]

    def boot(self) -> str:
        """Launch, read the instance back to back until it has an address, then the banner."""
        from launcher.clouds.reach import ssh_banner

        (instance,) = self.api("POST", "/instance-operations/launch", region_name="us-east-1",
                               instance_type_name="gpu_1x_a100",
                               ssh_key_names=[self.key_name])["instance_ids"]  # fmt: skip
        while not (seen := self.api("GET", f"/instances/{instance}")).get("ip"):
            time.sleep(0.01)
        self.address = seen["ip"]
        while ssh_banner(self.address, 22, timeout=1.0) is None:
            time.sleep(0.01)
        return instance

    def bootstrap(self) -> None:
        """uv to where bootstrap puts it, and the quickstart's folder, one connection."""
        uv = local_uv()
        assert uv is not None
        with open(uv, "rb") as binary:
            self.ssh(f"mkdir -p .local/bin && cat > {UV_HOME_PATH} && chmod 755 {UV_HOME_PATH}",
                     stdin=binary, check=True)  # fmt: skip
        tar = subprocess.Popen(["tar", "-C", str(JOB.parent / "quickstart"), "-c", "."],
                               stdout=subprocess.PIPE)  # fmt: skip
        self.ssh("mkdir -p qs && tar -C qs -x", stdin=tar.stdout, check=True)
        tar.wait()

    def env(self, pins: list[str]) -> None:
        script = env_script("/root/env", "python3", "/root/requirements.txt", len(pins))
        self.ssh("cat > requirements.txt", input="\n".join(pins) + "\n", text=True, check=True)
        done = self.ssh("bash -s", input=script, text=True, capture_output=True)
        if done.returncode != 0 or "with uv:" not in done.stderr:
            sys.exit(f"the direct env build failed ({done.returncode}): {done.stderr[-2000:]}")

    def start(self) -> None:
        """torchrun of the quickstart until its first step line."""
        run = ("cd qs && OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 GPUJOB_GLOBAL_BATCH=16 "
               "GPUJOB_MICRO_BATCH=4 GPUJOB_GRAD_ACCUM_STEPS=2 exec /root/env/bin/python -m "
               "torch.distributed.run --standalone --nnodes 1 --local-addr 127.0.0.1 "
               f"--nproc-per-node 2 --max-restarts 0 train.py {ARGS}")  # fmt: skip
        proc = subprocess.Popen([*self.argv(), run], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL)  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            if FIRST_STEP in line:
                break
        else:
            sys.exit(f"the direct start never printed a first step ({proc.wait()})")
        proc.kill()
        proc.wait()


def direct_round(direct: Direct, pins: list[str]) -> dict:
    stamps = [time.monotonic()]
    instance = direct.boot()
    stamps.append(time.monotonic())
    direct.bootstrap()
    stamps.append(time.monotonic())
    direct.env(pins)
    stamps.append(time.monotonic())
    direct.start()
    stamps.append(time.monotonic())
    subprocess.run(direct.argv("-O", "exit"), capture_output=True)  # the master goes too
    terminate(direct.fake, instance)
    names = ("boot", "bootstrap", "env", "start")
    parts = {name: b - a for name, a, b in zip(names, stamps, stamps[1:], strict=False)}
    return {**parts, "parts": sum(parts.values())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds of each")
    parser.add_argument("--trace", action="store_true", help="gpujob's lines, stamped")
    args = parser.parse_args()
    os.environ.setdefault("GPUJOB_LAB_NAME", "gjfresh")
    sys.path.insert(0, str(REPO))
    import infra.lab
    from infra.lab import naming, state

    with naming.session_lock().open("a") as lock:  # the lab tests': one user at a time
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = not state.alive(state.read_state()["daemons"].get("registry"))
        try:
            infra.lab.up(hosts=0, report=lambda line: print(f"lab: {line}", file=sys.stderr))
            results = run_bench(args.rounds, args.trace)
        finally:
            if started:
                infra.lab.down(report=lambda _: None)
    report(results, args.rounds)


def run_bench(rounds: int, trace: bool) -> dict[str, list[float]]:
    from infra.fakes import LAMBDA_API_KEY, serve_lambda
    from launcher.spec.image import load_image_definition

    image = load_image_definition("lab-cpu", REPO)
    assert image is not None
    pins = list(image.pins)
    wheel_cache(pins, WHEELS)
    scratch = Path(tempfile.mkdtemp(prefix="gjbench-fresh-"))
    backend = WheelhouseHosts(scratch / "records.json")
    fake = serve_lambda(backend)
    env = dict(os.environ, GPUJOB_STATE_DIR=str(scratch / "state"),
               GPUJOB_CACHE_DIR=str(scratch / "cache"), GPUJOB_CONFIG_DIR=str(scratch),
               GPUJOB_HOSTS_FILE=str(scratch / "hosts.yaml"),
               GPUJOB_SSH_KEY=str(user_key()), GPUJOB_LAMBDA_SSH_USER="root",
               LAMBDA_API_KEY=LAMBDA_API_KEY, GPUJOB_LAMBDA_API_URL=fake.url)  # fmt: skip
    direct = Direct(fake, scratch, "bench-direct")
    public = Path(f"{user_key()}.pub").read_text().strip()
    direct.api("POST", "/ssh-keys", name="bench-direct", public_key=public)
    results: dict[str, list[float]] = {}
    try:
        for n in range(rounds):  # alternated, so a drift in the machine's load hits both
            for first in ("gpujob", "direct")[:: 1 if n % 2 == 0 else -1]:
                done = (gpujob_round(env, n, trace) if first == "gpujob"
                        else direct_round(direct, pins))  # fmt: skip
                for name, value in done.items():
                    results.setdefault(name, []).append(value)
                while backend.records:  # the fake tears its host down before the next launch
                    time.sleep(0.1)
    finally:
        subprocess.run([GPUJOB, "down", "--all"], env=env, capture_output=True)
        fake.stop()
        backend.close()
    return results


def report(results: dict[str, list[float]], rounds: int) -> None:
    parts = ("boot", "bootstrap", "env", "start", "parts", "total")
    own = [name for name in results if name.startswith("g.")]
    print(f"{os.cpu_count()} cores, load {os.getloadavg()[0]:.1f} at the end; {rounds} "
          "alternated round(s) of each; direct parts, then gpujob's total and ratio, then "
          "gpujob's own phases (from its lines)")  # fmt: skip
    print(f"| round | {' | '.join(parts)} | ratio | {' | '.join(own)} |")
    print("|" + " --- |" * (len(parts) + len(own) + 2))
    rows = [[results[name][n] for name in parts] for n in range(rounds)]
    for n, row in enumerate(rows):
        mine = " | ".join(f"{results[name][n]:.2f}" for name in own)
        print(f"| {n} | {' | '.join(f'{v:.2f}' for v in row)} | {row[-1] / row[-2]:.2f} | "
              f"{mine} |")  # fmt: skip
    med = {name: statistics.median(values) for name, values in results.items()}
    print(f"| median | {' | '.join(f'{med[name]:.2f}' for name in parts)} | "
          f"{statistics.median(r[-1] / r[-2] for r in rows):.2f} | "
          f"{' | '.join(f'{med[name]:.2f}' for name in own)} |")  # fmt: skip
    print(f"ratio launch->first step / (boot + bootstrap + env + start), medians: "
          f"{med['total'] / med['parts']:.2f}  (target at most 1.15)")  # fmt: skip


if __name__ == "__main__":
    main()
