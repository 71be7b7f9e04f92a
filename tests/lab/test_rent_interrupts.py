"""SIGINT, SIGTERM and SIGHUP during `gpujob up` and `gpujob submit --up` terminate what the
command rented, then the command exits with 128 + the signal's number: through the real CLI,
against the provider fakes backed by real lab hosts.

Each phase of a rent is held open by the fakes or the lab, never by a sleep: the launch call
by a `delay` fault, the boot by `boot_forever`, the bootstrap by an image pull from a
registry that never answers a host. The signal goes to the gpujob process once its stderr
says it reached the phase. Then the fake must list no live instance, its request log must
show the terminate call, and the lab host behind the instance must be gone.
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_up_hosts as up_hosts
from labtools import GPUJOB, base_image_ref, read_some, wait_until

from infra.fakes import RunningFake

pytestmark = pytest.mark.lab
# The fixtures of the `up` tests: both fakes over a LabBackend, and a user's environment.
backend, clouds, lab_env, live = up_hosts.backend, up_hosts.clouds, up_hosts.env, up_hosts.live

LAUNCH_HELD_S = 3.0  # the fake's answer to the launch call comes this late
TERMINATE_OP = {"lambda": "terminate", "vast": "destroy_instance"}
LAUNCH_OP = {"lambda": "launch", "vast": "create_instance"}
PHASE_LINE = {"launch": r"launching on {cloud}", "boot": r"{cloud} \S+ booting",
              "bootstrap": r"bootstrapping", "ready": r"ready at"}  # fmt: skip


@pytest.fixture
def env(lab_env: dict[str, str]) -> dict[str, str]:
    return {**lab_env, "GPUJOB_RETRY_BASE_S": "0.05"}


class SilentRegistry:
    """A registry on the lab bridge that takes a host's connection and never answers it, as
    a stalled registry does: the bootstrap's image pull hangs there. A check made from this
    machine (`submit --up` asks before it rents) gets a plain-http 200 for any manifest."""

    def __init__(self) -> None:
        from infra.lab import naming

        self.own = naming.bridge_address()
        self.sock = socket.create_server((self.own, 0))
        self.address = f"{self.own}:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, (peer, _) = self.sock.accept()
            except OSError:
                return
            if peer != self.own:
                self.held.append(conn)  # a lab host's dockerd: left waiting
                continue
            with conn:  # TLS first (closed: the check falls back to http), then http
                if conn.recv(4096)[:1] != b"\x16":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n"
                                 b"Connection: close\r\n\r\n")  # fmt: skip

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def silent() -> Iterator[SilentRegistry]:
    registry = SilentRegistry()
    yield registry
    registry.close()


class Command:
    """The real `gpujob` in a subprocess, its stderr (or stdout) read as it comes."""

    def __init__(self, env: dict[str, str], *args: str) -> None:
        self.proc = subprocess.Popen([GPUJOB, *args], env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        self.err = self.out = b""

    def wait_for(self, pattern: str, timeout: float = 240, stdout: bool = False) -> None:
        """Read stderr (or stdout) until `pattern` shows; the deadline only guards against a
        hang."""
        deadline = time.monotonic() + timeout
        name, pipe = ("out", self.proc.stdout) if stdout else ("err", self.proc.stderr)
        while not re.search(pattern.encode(), getattr(self, name)):
            what = f"gpujob never printed {pattern!r}; its stderr:\n{self.err.decode()[-3000:]}"
            chunk = read_some(pipe, what, max(1.0, deadline - time.monotonic()))
            setattr(self, name, getattr(self, name) + chunk)

    def finish(self) -> tuple[int, str]:
        try:
            out, rest = self.proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"gpujob did not exit; stderr:\n{self.err.decode()}") from None
        self.out += out
        return self.proc.returncode, (self.err + rest).decode()


def hold(fake: RunningFake, cloud: str, phase: str) -> None:
    """Keep the rent in `phase` until the signal comes (bootstrap: the caller's image)."""
    if phase == "launch":
        fake.control.fault("delay", op=LAUNCH_OP[cloud], seconds=LAUNCH_HELD_S)
    elif phase == "boot":
        fake.control.knobs(boot_forever=True)


def interrupt(command: Command, cloud: str, phase: str, signum: int) -> str:
    command.wait_for(PHASE_LINE[phase].format(cloud=cloud))
    command.proc.send_signal(signum)
    code, err = command.finish()
    assert code == 128 + signum, err
    assert f"interrupted ({signal.Signals(signum).name})" in err, err
    return err


def nothing_left(fake: RunningFake, cloud: str, backend: Any, err: str) -> None:
    assert re.search(rf"terminated {re.escape('gpujob-')}\S+ \({cloud} ", err), err
    assert live(fake, cloud) == [], err
    ops = [r["op"] for r in fake.control.requests()]
    assert TERMINATE_OP[cloud] in ops, ops
    wait_until(lambda: not backend.records, "the lab host of the terminated instance goes")


# Each phase once and each signal once, in pairs `submit --up` below does not take: across the
# two commands each phase gets two of the three signals and each signal two of the phases (one
# handler serves the three signals; the phases differ in what was rented and must be found).
@pytest.mark.parametrize(("phase", "signum"), [
    ("launch", signal.SIGTERM), ("boot", signal.SIGINT), ("bootstrap", signal.SIGHUP),
], ids=["launch-SIGTERM", "boot-SIGINT", "bootstrap-SIGHUP"])  # fmt: skip
def test_a_signal_during_up_terminates_what_it_rented(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any, silent: SilentRegistry,
    phase: str, signum: int,
) -> None:  # fmt: skip
    fake = clouds["lambda"]
    hold(fake, "lambda", phase)
    image = f"{silent.address}/gpujob-lab/stalled:1"  # pulled last in the bootstrap
    up = Command(env, "up", "a100", "--yes", "--allow-cpu", "--image", image)
    err = interrupt(up, "lambda", phase, signum)
    nothing_left(fake, "lambda", backend, err)


def job_spec(tmp_path: Path, image: str, program: str = "print('never started')\n") -> str:
    (tmp_path / "work").mkdir(exist_ok=True)
    (tmp_path / "work" / "train.py").write_text(program)
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: t\nimage: {image}\nworkdir: work\nrun: {{entrypoint: train.py}}\n")
    return str(spec)


@pytest.mark.parametrize(("cloud", "phase", "signum"), [
    ("lambda", "launch", signal.SIGINT), ("lambda", "boot", signal.SIGHUP),
    ("lambda", "bootstrap", signal.SIGTERM), ("vast", "boot", signal.SIGTERM),
], ids=["lambda-launch-SIGINT", "lambda-boot-SIGHUP", "lambda-bootstrap-SIGTERM",
        "vast-boot-SIGTERM"])  # fmt: skip
def test_a_signal_during_submit_up_terminates_what_it_rented(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any, silent: SilentRegistry,
    tmp_path: Path, cloud: str, phase: str, signum: int,
) -> None:  # fmt: skip
    fake = clouds[cloud]
    hold(fake, cloud, phase)
    image = base_image_ref() if cloud == "vast" else f"{silent.address}/gpujob-lab/stalled:1"
    submit = Command(env, "submit", job_spec(tmp_path, image), "--up", "a100", "--provider",
                     cloud, "--allow-cpu")  # fmt: skip
    err = interrupt(submit, cloud, phase, signum)
    nothing_left(fake, cloud, backend, err)
    assert "job t-" not in err  # it never started


def test_a_signal_after_the_rent_before_the_job_starts_terminates_the_host(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any, tmp_path: Path
) -> None:
    """The hosts are ready and the submit goes on (placement, checks on the host, shipping
    the workdir, the start): until the job has started they are still the command's. (The
    refusal below holds this phase for sure; a signal lands in it or just before.)"""
    submit = Command(env, "submit", job_spec(tmp_path, base_image_ref()), "--up", "a100",
                     "--allow-cpu")  # fmt: skip
    err = interrupt(submit, "lambda", "ready", signal.SIGINT)
    nothing_left(clouds["lambda"], "lambda", backend, err)
    assert "job started" not in err, err


def test_a_refusal_after_the_rent_terminates_the_host(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any, tmp_path: Path
) -> None:
    """The sync target answers from here (checked before the rent) but not from the host,
    whose `host_endpoint` is a closed port: refused on the host, so the host goes."""
    import json

    from infra.lab import naming, s3

    closed = socket.socket()  # bound, never listening: connections to it are refused
    closed.bind((naming.bridge_address(), 0))
    remote = {"provider": "Other", "endpoint": s3.endpoint(), "bucket": s3.create_bucket(),
              "host_endpoint": f"http://{naming.bridge_address()}:{closed.getsockname()[1]}",
              "access_key_env": "GJ_LAB_KEY", "secret_key_env": "GJ_LAB_SECRET"}  # fmt: skip
    (tmp_path / "config.yaml").write_text(json.dumps({"remotes": {"lab": remote}}))
    spec = job_spec(tmp_path, base_image_ref())
    with open(spec, "a") as more:
        more.write("checkpoints: {dir: checkpoints, sync_to: 'lab:runs/t'}\n")
    env = {**env, "GPUJOB_CONFIG_DIR": str(tmp_path), "GJ_LAB_KEY": s3.ACCESS_KEY,
           "GJ_LAB_SECRET": s3.SECRET_KEY}  # fmt: skip
    try:
        code, err = Command(env, "submit", spec, "--up", "a100", "--allow-cpu").finish()
    finally:
        closed.close()
    assert code == 1, err
    assert "sync target lab:runs/t: bucket" in err, err  # reachable from here, before the rent
    assert "the job was not started" in err.strip().splitlines()[-1], err
    assert "after the failed submit --up" in err, err
    nothing_left(clouds["lambda"], "lambda", backend, err)


def test_a_failed_bootstrap_of_submit_up_terminates_the_host(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any, tmp_path: Path
) -> None:
    submit = Command(env, "submit", job_spec(tmp_path, base_image_ref()), "--up", "a100")
    code, err = submit.finish()  # no --allow-cpu: the gpu step stops it
    assert code == 1, err
    assert "no NVIDIA GPU" in err.strip().splitlines()[-1], err
    nothing_left(clouds["lambda"], "lambda", backend, err)


def test_a_second_sigterm_during_the_cleanup_ends_only_its_wait(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any
) -> None:
    fake = clouds["lambda"]
    hold(fake, "lambda", "launch")
    up = Command(env, "up", "a100", "--yes", "--allow-cpu")
    up.wait_for("launching on lambda")
    up.proc.send_signal(signal.SIGTERM)
    up.wait_for("waiting for the launch of")  # the cleanup waits for the launch's answer
    up.proc.send_signal(signal.SIGTERM)
    code, err = up.finish()
    assert code == 128 + signal.SIGTERM, err
    assert err.count("cleanup in progress") == 1, err
    assert "not waiting for the launch of" in err, err
    # The launch answered after the wait was given up: its worker terminated what it made.
    nothing_left(fake, "lambda", backend, err)


def test_a_signal_while_following_leaves_the_started_job_and_its_host_running(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any, tmp_path: Path
) -> None:
    """Once the job has started the hosts are its own: stopping the follow says how to
    reattach and how to remove them, and terminates nothing."""
    from infra.lab import job_image

    image = job_image.build(report=lambda line: print(f"lab: {line}"))
    waits = "import threading\nprint('job started', flush=True)\nthreading.Event().wait()\n"
    submit = Command(env, "submit", job_spec(tmp_path, image, waits), "--up", "a100",
                     "--allow-cpu", "--job-id", "follow-1")  # fmt: skip
    try:
        submit.wait_for("job started", timeout=600, stdout=True)
        submit.proc.send_signal(signal.SIGTERM)
        code, err = submit.finish()
        assert code == 128 + signal.SIGTERM, err  # a stopped follow ends 128+signal
        assert "gpujob logs follow-1 -f" in err and "keep running" in err, err
        assert re.search(r"`gpujob down gpujob-\S+` removes", err), err
        assert "terminated" not in err, err
        fake = clouds["lambda"]
        assert len(live(fake, "lambda")) == 1
        assert "terminate" not in [r["op"] for r in fake.control.requests()]
    finally:
        down = subprocess.run([GPUJOB, "down", "--all"], env=env, capture_output=True, text=True,
                              timeout=300)  # fmt: skip
    assert down.returncode == 0, down.stderr
    assert live(clouds["lambda"], "lambda") == []
