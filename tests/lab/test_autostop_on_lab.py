"""Autostop through the real CLI, against the provider fakes backed by real lab hosts: a host
that nobody uses ends itself from the host, with nothing of gpujob running on this machine;
a host waiting for the other hosts of its command is held past its window until the command
hands them over; a running job or an open SSH session keeps it up past its window; the
Lambda key an opted-in host holds, and a Vast host's own instance key, are each found in
their one 0600 file and nowhere else of gpujob's.

The hosts reach the fakes (on this machine's loopback) through socat forwards on the lab
bridge (infra.lab.forwards), as they reach the lab's S3. Nothing here waits on a clock: each
step polls what the user would look at (the fake's instance, the watcher's own state file on
the host) with a deadline that only guards against a hang. What is read while a host must
still be up uses a window far longer than the reading (10m), or the watcher's own record of
its looks.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import test_up_hosts as up_hosts
from labtools import GPUJOB, wait_until

from infra.fakes import LAMBDA_API_KEY, VAST_API_KEY, RunningFake

pytestmark = pytest.mark.lab
backend, clouds, lab_env = up_hosts.backend, up_hosts.clouds, up_hosts.env
ENDS = {"lambda": "terminate", "vast": "destroy_instance"}
IDLE_S = 12
IDLE = f"{IDLE_S}s"
"""The window of the hosts that must end idle: the test waits it out, so it is short, yet
longer than what the test reads while the host must still be up (status, this machine's
processes), a few seconds under a loaded suite."""


@pytest.fixture
def env(lab_env: dict[str, str], clouds: dict[str, RunningFake]) -> Iterator[dict[str, str]]:
    """The user's environment, plus where the hosts reach each fake."""
    from infra.lab.forwards import forwarded

    with forwarded(clouds["lambda"].url) as lam, forwarded(clouds["vast"].url) as vast:
        yield {**lab_env, "GPUJOB_LAMBDA_HOST_API_URL": lam, "GPUJOB_VAST_HOST_API_URL": vast,
               "GPUJOB_RETRY_BASE_S": "0.05"}  # fmt: skip


def gpujob(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([GPUJOB, *args], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done


def up(env: dict[str, str], provider: str, *flags: str) -> tuple[str, str, str]:
    """`gpujob up` with autostop: the host's name, its instance id, and what up said."""
    done = gpujob(env, "up", "a100" if provider == "lambda" else "rtx4090", "--provider",
                  provider, "--yes", "--allow-cpu", "--timeout", "300", *flags)  # fmt: skip
    name, _, instance, *_ = done.stdout.splitlines()[-1].split("\t")
    assert f"{name}: fixed   autostop" in done.stderr, done.stderr
    return name, instance, done.stderr


def instance(fake: RunningFake, provider: str, instance_id: str) -> dict[str, Any] | None:
    """The instance as the cloud's own API shows it; None once the cloud no longer knows it."""
    if provider == "lambda":
        reply = requests.get(f"{fake.url}/instances/{instance_id}", timeout=10,
                             headers={"Authorization": f"Bearer {LAMBDA_API_KEY}"})  # fmt: skip
        found = reply.json().get("data") if reply.ok else None
        return None if found is None or found["status"] == "terminated" else found
    reply = requests.get(f"{fake.url}/instances/{instance_id}/", timeout=10,
                         headers={"Authorization": f"Bearer {VAST_API_KEY}"})  # fmt: skip
    return reply.json()["instances"]


def ended(fake: RunningFake, provider: str, instance_id: str) -> bool:
    found = instance(fake, provider, instance_id)
    return found is None or found.get("status") == "terminating"


def alive(fake: RunningFake, provider: str, instance_id: str) -> bool:
    found = instance(fake, provider, instance_id) or {}
    return found.get("status" if provider == "lambda" else "actual_status") in ("active", "running")


def host_root(backend: Any, instance_id: str) -> Path:
    """A Lambda instance's lab host's /root, as this machine sees it."""
    from infra.lab import boot

    return boot.host_dir(backend.records[instance_id]["host"]) / "root"


def watcher(backend: Any, instance_id: str) -> dict[str, Any]:
    """The watcher's state file on the host (Lambda), as it wrote it last."""
    path = host_root(backend, instance_id) / ".gpujob" / "autostop" / "state.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def nothing_of_gpujob_here(env: dict[str, str]) -> None:
    """End the SSH masters gpujob keeps for its next command, then check that no process on
    this machine is gpujob's: none carries this state dir in its environment or its argv."""
    from launcher.paths import run_dir_path
    from launcher.remote.openssh import close_state

    state = Path(env["GPUJOB_STATE_DIR"])
    close_state(state)
    marks = [f"GPUJOB_STATE_DIR={state}".encode(), str(run_dir_path(state)).encode()]
    ours = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            seen = b"".join(Path(f"/proc/{pid}/{part}").read_bytes()
                            for part in ("environ", "cmdline"))  # fmt: skip
        except OSError:
            continue
        if int(pid) != os.getpid() and any(mark in seen for mark in marks):
            ours.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")[:120])
    assert ours == [], ours


def the_end_came_from_the_host(fake: RunningFake, provider: str, instance_id: str,
                               caller: str) -> dict[str, Any]:  # fmt: skip
    """The call that ended the instance: the watcher's, with the key it should carry."""

    def aims(r: dict[str, Any]) -> bool:
        if provider == "lambda":
            return r["body"] == {"instance_ids": [instance_id]}
        return r["path"].rstrip("/").endswith(f"/instances/{instance_id}")

    made = [r for r in fake.control.requests()
            if r["op"] in (ENDS[provider], "manage_instance") and aims(r)]  # fmt: skip
    assert len(made) == 1, made
    assert (made[0]["caller"], made[0]["user_agent"], made[0]["status"]) == (
        caller, "gpujob-autostop/1", 200)  # fmt: skip
    return made[0]


def test_an_idle_lambda_host_terminates_itself_with_no_gpujob_running_here(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any
) -> None:
    fake = clouds["lambda"]
    name, instance_id, said = up(env, "lambda", "--autostop", IDLE, "--autostop-key-on-host")
    assert "your LAMBDA_API_KEY is written to ~/.gpujob/autostop/api-key" in said, said
    shown = json.loads(gpujob(env, "status", "--json").stdout)["hosts"]
    (row,) = [h for h in shown if h["name"] == name]
    assert (row["autostop"]["idle_s"], row["autostop"]["action"]) == (IDLE_S, "terminate")

    nothing_of_gpujob_here(env)
    wait_until(lambda: ended(fake, "lambda", instance_id), "the idle host ends itself", 180)
    call = the_end_came_from_the_host(fake, "lambda", instance_id, "account")
    assert call["body"] == {"instance_ids": [instance_id]}
    wait_until(lambda: not backend.records, "the lab host of the instance goes")


def test_status_shows_the_deadline_of_a_host_up_handed_over(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any
) -> None:
    """`up` released its hold as it handed the host over: the watcher counts the window
    from then, and `status` shows when the host will end."""
    name, instance_id, _ = up(env, "lambda", "--autostop", "10m", "--autostop-key-on-host")
    row = next(h for h in json.loads(gpujob(env, "status", "--json").stdout)["hosts"]
               if h["name"] == name)  # fmt: skip
    assert row["autostop"]["deadline"] is not None, (row, watcher(backend, instance_id))
    assert "10m idle -> terminate; ends at" in gpujob(env, "status").stdout
    assert not (host_root(backend, instance_id) / ".gpujob" / "autostop" / "hold").exists()
    assert alive(clouds["lambda"], "lambda", instance_id)
    assert f"terminated {name}" in gpujob(env, "down", name).stdout


def listed(fake: RunningFake) -> list[str]:
    reply = requests.get(f"{fake.url}/instances", timeout=10,
                         headers={"Authorization": f"Bearer {LAMBDA_API_KEY}"})  # fmt: skip
    return [i["id"] for i in reply.json()["data"]]


def test_a_host_waiting_for_the_other_hosts_of_its_up_is_held_past_its_window(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any
) -> None:
    """`up --count 2 --autostop 5s` with the second host slow to boot: the first one's
    watcher runs, and is held busy past its window (its own looks say so) until `up` hands
    both over; then each ends itself."""
    fake = clouds["lambda"]
    fake.control.knobs(boot_forever=True)  # each new instance boots until let go
    running = subprocess.Popen([GPUJOB, "up", "a100", "--count", "2", "--provider", "lambda",
                                "--yes", "--allow-cpu", "--timeout", "300", "--autostop", "5s",
                                "--autostop-key-on-host"], env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        wait_until(lambda: len(listed(fake)) == 2, "both hosts launched")
        first, second = listed(fake)
        fake.control.instance(first, stuck=False)
        wait_until(lambda: "loaded_at" in watcher(backend, first), "the first host's watcher")
        since = watcher(backend, first)["loaded_at"]
        wait_until(lambda: busy_past_its_window(backend, first, "held by gpujob up", since),
                   "the first host held past its window", 120)  # fmt: skip
        assert alive(fake, "lambda", first)
        fake.control.instance(second, stuck=False)
        out, err = running.communicate(timeout=300)
    finally:
        if running.poll() is None:
            running.kill()
            running.communicate()
    assert running.returncode == 0, err
    printed = [line for line in out.splitlines() if "\tlambda\t" in line]
    assert len(printed) == 2 and "could not release" not in err, (out, err)
    for instance_id in (first, second):
        wait_until(lambda i=instance_id: ended(fake, "lambda", i), "each host ends itself", 180)
        the_end_came_from_the_host(fake, "lambda", instance_id, "account")


@pytest.mark.parametrize("flags", [(), ("--autostop-stop",)], ids=["destroy", "stop"])
def test_an_idle_vast_host_ends_itself_with_its_own_instance_key(
    env: dict[str, str], clouds: dict[str, RunningFake], flags: tuple[str, ...]
) -> None:
    fake = clouds["vast"]
    _, instance_id, said = up(env, "vast", "--autostop", IDLE, *flags)
    assert "LAMBDA_API_KEY" not in said and "api-key" not in said  # the user's key stays here
    nothing_of_gpujob_here(env)
    assert alive(fake, "vast", instance_id)
    if not flags:
        wait_until(lambda: ended(fake, "vast", instance_id), "the idle host destroys itself", 180)
        call = the_end_came_from_the_host(fake, "vast", instance_id, f"instance {instance_id}")
        assert call["method"] == "DELETE"
        return
    stopped = lambda: (instance(fake, "vast", instance_id) or {}).get("actual_status") == "stopped"  # noqa: E731
    wait_until(stopped, "the idle host stops itself", 180)
    call = the_end_came_from_the_host(fake, "vast", instance_id, f"instance {instance_id}")
    assert (call["method"], call["body"]) == ("PUT", {"state": "stopped"})


def test_a_vast_host_without_its_own_key_is_refused_and_destroyed_before_it_is_handed_over(
    env: dict[str, str], clouds: dict[str, RunningFake]
) -> None:
    """Issue 30: a container without CONTAINER_API_KEY got "fixed ... with its own instance
    key", and its watcher retried "no API key" for ever while the host billed. The dry call
    before the start refuses it: `up` fails in one line and destroys what it rented."""
    fake = clouds["vast"]
    fake.control.knobs(instance_key=False)
    done = subprocess.run([GPUJOB, "up", "rtx4090", "--provider", "vast", "--yes",
                           "--allow-cpu", "--timeout", "300", "--autostop", "20s"],
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "autostop: not started: the host cannot end itself: no API key" in done.stderr, (
        done.stderr)  # fmt: skip
    assert "the instance has no CONTAINER_API_KEY" in done.stderr
    assert "fixed   autostop" not in done.stderr and "its own instance key" not in done.stderr
    (created,) = [r for r in fake.control.requests() if r["op"] == "create_instance"]
    assert created["status"] == 200
    destroyed = [r for r in fake.control.requests() if r["op"] == "destroy_instance"]
    assert [r["caller"] for r in destroyed] == ["account"]  # by up, not by the host
    reply = requests.get(f"{fake.url.rsplit('/api/v0', 1)[0]}/api/v1/instances/", timeout=10,
                         headers={"Authorization": f"Bearer {VAST_API_KEY}"})  # fmt: skip
    assert reply.json()["instances"] == []  # nothing left billing
    assert "\t" not in done.stdout  # no host line: nothing handed over


WAITS_FOR_RELEASE = """
import os, time
print("job started", flush=True)
while not os.path.exists("release-job"):
    time.sleep(0.2)
print("released", flush=True)
"""


def busy_past_its_window(backend: Any, instance_id: str, why: str, since: float) -> bool:
    """The watcher has looked, past a whole window after `since`, and found `why` busy."""
    state = watcher(backend, instance_id)
    return str(state.get("busy")).startswith(why) and state["checked_at"] > since + state["idle_s"]


def test_a_running_job_then_an_open_ssh_session_keep_the_host_up_past_its_window(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any, tmp_path: Path
) -> None:
    """`submit --up` with resources.autostop: the job keeps the host up past the window;
    an SSH session opened while it runs keeps it up past the window after the job ends;
    once that ends too, the host terminates itself."""
    from infra.lab import job_image

    fake = clouds["lambda"]
    image = job_image.build(report=lambda line: print(f"lab: {line}"))
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "prog.py").write_text(WAITS_FOR_RELEASE)
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: held\nimage: {image}\nworkdir: work\nrun: {{entrypoint: prog.py}}\n"
                    "resources: {autostop: {idle_minutes: 0.1}}\n")  # fmt: skip
    job_id = gpujob(env, "submit", str(spec), "--up", "a100", "--allow-cpu",
                    "--autostop-key-on-host", "--detach").stdout.split()[-1]  # fmt: skip
    (instance_id,) = [i["id"] for i in requests.get(
        f"{fake.url}/instances", headers={"Authorization": f"Bearer {LAMBDA_API_KEY}"},
        timeout=10).json()["data"]]  # fmt: skip
    root = host_root(backend, instance_id)
    assert not (root / ".gpujob" / "autostop" / "hold").exists()  # released once it started
    started = watcher(backend, instance_id)["loaded_at"]
    wait_until(lambda: busy_past_its_window(backend, instance_id, f"job {job_id}", started),
               "the watcher sees the job past its window", 300)  # fmt: skip
    assert alive(fake, "lambda", instance_id)

    (name,) = [h["name"] for h in json.loads(gpujob(env, "status", "--json").stdout)["hosts"]]
    session = subprocess.Popen([GPUJOB, "ssh", name, "--",
                                "while [ ! -e release-ssh ]; do sleep 0.2; done"],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        wait_until(lambda: session_on_host(backend, instance_id), "the SSH session runs there")
        (root / ".gpujob" / "jobs" / job_id / "workdir" / "release-job").touch()
        wait_until(lambda: str(watcher(backend, instance_id).get("busy")).startswith("SSH"),
                   "the job ends; the session keeps the host busy", 120)  # fmt: skip
        ssh_since = watcher(backend, instance_id)["checked_at"]
        wait_until(lambda: busy_past_its_window(backend, instance_id, "SSH session", ssh_since),
                   "the watcher sees the session past its window", 120)  # fmt: skip
        assert alive(fake, "lambda", instance_id)
        (root / "release-ssh").touch()
        assert session.wait(timeout=60) == 0, session.stderr.read() if session.stderr else ""
    finally:
        if session.poll() is None:
            session.kill()
            session.wait()
    nothing_of_gpujob_here(env)
    wait_until(lambda: ended(fake, "lambda", instance_id), "the host ends itself", 180)
    the_end_came_from_the_host(fake, "lambda", instance_id, "account")


def session_on_host(backend: Any, instance_id: str) -> bool:
    from infra.lab import network

    host = backend.records[instance_id]["host"]
    return any(b"release-ssh" in Path(f"/proc/{pid}/cmdline").read_bytes()
               for pid in network.pids_in_netns(host) if Path(f"/proc/{pid}").exists())  # fmt: skip


def test_the_lambda_key_is_only_in_its_0600_file_on_an_opted_in_host(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any
) -> None:
    """Every file of the host's /root and /tmp, every process of the host (command line and
    environment), and this machine's gpujob state, cache and config: the key is in one
    place, the file `up` said, mode 0600."""
    from infra.lab import boot, network

    name, instance_id, _ = up(env, "lambda", "--autostop", "10m", "--autostop-key-on-host")
    key = LAMBDA_API_KEY.encode()
    host = backend.records[instance_id]["host"]
    found = []
    for top in (boot.host_dir(host) / "root", boot.host_dir(host) / "tmp"):
        for folder, _, files in os.walk(top):
            for file in files:
                path = Path(folder, file)
                if path.is_file() and not path.is_symlink() and key in path.read_bytes():
                    found.append(path)
    assert found == [boot.host_dir(host) / "root" / ".gpujob" / "autostop" / "api-key"]
    assert oct(found[0].stat().st_mode & 0o777) == "0o600"
    pids = network.pids_in_netns(host)
    assert pids  # sshd, dockerd, the watcher
    for pid in pids:
        for part in ("cmdline", "environ"):
            try:
                assert key not in Path(f"/proc/{pid}/{part}").read_bytes(), (pid, part)
            except OSError:
                continue  # ended since the listing
    config = Path(env.get("GPUJOB_CONFIG_DIR") or Path.home() / ".config" / "gpujob")
    for top in (Path(env["GPUJOB_STATE_DIR"]), Path(env["GPUJOB_CACHE_DIR"]), config):
        for folder, _, files in os.walk(top):
            for file in files:
                path = Path(folder, file)
                if path.is_file() and not path.is_socket():
                    assert key not in path.read_bytes(), path
    assert f"terminated {name}" in gpujob(env, "down", name).stdout


def test_the_vast_instance_key_is_only_in_its_0600_file_on_the_host(
    env: dict[str, str], clouds: dict[str, RunningFake], backend: Any
) -> None:
    """The instance's own key, in the container: every file of /root, /etc, /tmp, /var,
    /home, /run and /workspace, and every process of the container (command line and
    environment). The file is the one the onstart wrote, mode 0600; /etc/environment, which
    every login reads, has it no more.

    Processes: the key is in the environment Vast gives the container (here Docker's
    `Config.Env`, checked below), so PID 1 starts with it. In the lab the emulated entrypoint
    execs its init without it (`env -u`), after the onstart took it into its file, so /proc
    shows the key in no process of the container: not PID 1, not sshd nor the sessions it
    starts (with an environment of their own), not the autostop watcher.
    On Vast, PID 1's environment is Vast's own and may still show it; no process of
    gpujob's may."""
    name, instance_id, _ = up(env, "vast", "--autostop", "10m")
    key = clouds["vast"].api.books.instances[int(instance_id)].api_key.encode()
    record = backend.records[instance_id]
    pid1 = int(backend._docker(record["docker_host"], ["inspect", "-f", "{{.State.Pid}}",
                                                       record["container"]]))  # fmt: skip
    root = Path(f"/proc/{pid1}/root")
    key_file = root / "root" / ".gpujob" / "autostop" / "instance-key"
    wait_until(key_file.exists, "the onstart writes the key file")
    found = []
    for top in ("root", "etc", "tmp", "var", "home", "run", "workspace"):
        for folder, _, files in os.walk(root / top):
            for file in files:
                path = Path(folder, file)
                if path.is_file() and not path.is_symlink() and key in path.read_bytes():
                    found.append(path)
    assert found == [key_file]
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"
    assert key not in (root / "etc" / "environment").read_bytes()

    space = os.readlink(f"/proc/{pid1}/ns/pid")
    carriers, watchers = {}, []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/ns/pid") != space:
                continue  # not the container's
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue  # ended since the listing
        watchers += [int(pid)] if b"gpujob-autostop.py\0run" in cmdline else []
        if key in cmdline + environ:
            carriers[int(pid)] = comm
    assert len(watchers) == 1 and carriers == {}, (watchers, carriers)
    given = backend._docker(record["docker_host"], ["inspect", "-f", "{{json .Config.Env}}",
                                                    record["container"]])  # fmt: skip
    assert f"CONTAINER_API_KEY={key.decode()}" in json.loads(given)  # the container's own
    assert f"terminated {name}" in gpujob(env, "down", name).stdout
