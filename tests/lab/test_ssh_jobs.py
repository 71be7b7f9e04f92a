"""Jobs on an SSH host through the real CLI, OpenSSH's client and a lab host's real sshd.

The host runs the job bare, in an environment gpujob itself builds there from
images/lab-cpu.yaml with the host's python3 (`python3 -m venv` + `pip install -r`), as on any
SSH host. The only help the host gets is a pip.conf on its own disk pointing pip at the lab's
wheelhouse (`pip download` of the same pins, made once on this machine), the way a real
host is pointed at a mirror, with no byte-compiling (labtools.point_pip_at); the first job of
a session builds the environment (about 15 s), the later ones find it ready.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from labtools import LONG_JOB, SSHHost, follow_through_cuts, point_pip_at, with_lab_s3

from launcher.agent.agent_os import alive, descendants

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[2]
GPUJOB = str(Path(sys.executable).with_name("gpujob"))
IMAGE = str(REPO / "launcher" / "images" / "definitions" / "lab-cpu.yaml")
HOST = "ssh"  # with the lab's prefix: gjlab-ssh in the default lab
TOOLS = ("ip", "sshd", "nsenter", "unshare", "ssh-keygen")


def _missing() -> str | None:
    import shutil

    if os.geteuid() != 0:
        return "the lab needs root (network namespaces, sshd)"
    search = f"{os.environ.get('PATH', '')}:/usr/sbin:/sbin"
    absent = [tool for tool in TOOLS if shutil.which(tool, path=search) is None]
    return f"missing {', '.join(absent)}: run `bash infra/install-deps.sh`" if absent else None


@pytest.fixture(scope="session")
def ssh_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHHost]:
    """One lab host with sshd only (no dockerd), removed at the end with the bridge if this
    session made it."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    import infra.lab
    from infra.lab import job_image, naming, network, state

    bridge_was_up = network.link_exists(naming.bridge())
    house = _wheelhouse(job_image, state.lab_dir() / "wheelhouse" / "lab-cpu")
    try:
        host = infra.lab.create_host(HOST)
        point_pip_at(SSHHost(host, Path()).root, house / "wheels")
        hosts_file = tmp_path_factory.mktemp("hosts") / "hosts.yaml"
        hosts_file.write_text(
            f"hosts:\n  - {{name: lab, address: {host.address}, user: root,"
            f" key: {infra.lab.user_key()}}}\n"
        )
        yield SSHHost(host, hosts_file)
    finally:
        infra.lab.destroy_host(HOST)
        if not bridge_was_up and not state.read_state()["hosts"]:
            network.remove_bridge()


def _wheelhouse(job_image, folder: Path) -> Path:
    """The lab's wheelhouse of the image's pins; `pip download` only when it is incomplete
    (it costs about 25 s even when every wheel is there)."""
    pins = job_image.pins()
    listed = folder / "requirements.txt"
    wheels = list((folder / "wheels").glob("*.whl")) if (folder / "wheels").is_dir() else []
    if (
        listed.is_file()
        and listed.read_text() == "\n".join(pins) + "\n"
        and len(wheels) >= len(pins)
    ):
        return folder
    return job_image.wheelhouse(pins, folder)


@pytest.fixture
def env(tmp_path: Path, ssh_host: SSHHost) -> dict[str, str]:
    """A private state dir (so a private known_hosts: every test pins on first contact)."""
    return dict(
        os.environ,
        GPUJOB_STATE_DIR=str(tmp_path / "state"),
        GPUJOB_HOSTS_FILE=str(ssh_host.hosts_file),
    )


def gpujob(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([GPUJOB, *args], env=env, capture_output=True, timeout=timeout)


def write_job(folder: Path, program: str) -> Path:
    work = folder / "work"
    work.mkdir(parents=True, exist_ok=True)
    (work / "prog.py").write_text(program)
    spec = folder / "job.yaml"
    spec.write_text(
        f"name: tiny\nimage: {IMAGE}\nworkdir: work\nrun:\n  entrypoint: prog.py\n"
        "  nproc_per_node: 1\n"
    )
    return spec


def status_of(env: dict[str, str], job_id: str) -> dict:
    done = gpujob(env, "status", "--json")
    assert done.returncode == 0, done.stderr
    return next(row for row in json.loads(done.stdout)["jobs"] if row["id"] == job_id)


def test_a_job_on_a_host_exits_with_its_code_and_streams_its_log_byte_for_byte(
    tmp_path: Path, env: dict[str, str], ssh_host: SSHHost
) -> None:
    program = (
        "import sys\nfor i in range(2000):\n    print(f'line {i} \\u00e9\\t', flush=i % 7 == 0)\n"
        "sys.stdout.write('no newline at the end')\n"
    )
    spec = write_job(tmp_path / "ok", program)
    done = gpujob(env, "submit", str(spec), "--on", "lab", "--job-id", "remote-ok", timeout=600)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert done.stdout == ssh_host.job_log("remote-ok")
    assert b"line 1999 \xc3\xa9\t\n" in done.stdout
    assert status_of(env, "remote-ok")["state"] == "succeeded"
    again = gpujob(env, "logs", "remote-ok")
    assert again.returncode == 0 and again.stdout == done.stdout
    tail = gpujob(env, "logs", "remote-ok", "--tail", "2")
    assert tail.stdout.decode().splitlines() == done.stdout.decode().splitlines()[-2:]

    failing = write_job(
        tmp_path / "bad", "print('about to fail', flush=True)\nraise SystemExit(3)\n"
    )
    failed = gpujob(env, "submit", str(failing), "--on", "lab", "--job-id", "remote-bad")
    assert failed.returncode == 1  # torchrun's own exit status for a failed worker
    assert failed.stdout == ssh_host.job_log("remote-bad")
    assert b"about to fail" in failed.stdout
    assert status_of(env, "remote-bad")["state"] == "failed"


def test_the_log_survives_ten_dropped_connections_byte_for_byte(
    tmp_path: Path, env: dict[str, str], ssh_host: SSHHost
) -> None:
    """sshd's processes for gpujob's connection are killed on the host, 10 times, while
    `logs -f` streams a 100,000-line job: the stream still equals the host's file."""
    spec = write_job(tmp_path, LONG_JOB)
    started = gpujob(env, "submit", str(spec), "--on", "lab", "--detach", "--job-id", "long")
    assert started.returncode == 0, started.stderr.decode()[-2000:]
    out = follow_through_cuts(env, "long", ssh_host.lab.name)
    host_log = ssh_host.job_log("long")
    assert host_log.count(b"\nline ") == 100_000 and host_log.endswith(b"end\n")
    assert out == host_log


def test_a_changed_host_key_is_refused_with_both_fingerprints(
    tmp_path: Path, env: dict[str, str], ssh_host: SSHHost
) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    key_type, key = Path(f"{other}.pub").read_text().split()[:2]
    pins = Path(env["GPUJOB_STATE_DIR"]) / "known_hosts"
    pins.parent.mkdir(parents=True)
    pins.write_text(f"{ssh_host.lab.address} {key_type} {key}\n")

    done = gpujob(env, "ssh", "lab", "--", "touch", "/root/reached")
    assert done.returncode == 255  # as ssh itself exits for a host key it refuses
    stderr = done.stderr.decode()
    assert len(stderr.strip().splitlines()) == 1, stderr
    for pub in (f"{other}.pub", ssh_host.lab.host_key_path):
        assert _fingerprint(pub) in stderr
    assert f"remove line 1 of {pins}" in stderr
    assert not (ssh_host.root / "reached").exists()
    assert pins.read_text() == f"{ssh_host.lab.address} {key_type} {key}\n"


def _fingerprint(pub: str) -> str:
    printed = subprocess.run(["ssh-keygen", "-lf", pub], capture_output=True, text=True)
    return printed.stdout.split()[1]


def test_commands_share_one_connection_to_the_host_until_it_is_ended(
    tmp_path: Path, env: dict[str, str], ssh_host: SSHHost
) -> None:
    """Three gpujob commands, one SSH connection (one sshd session process on the host); it
    outlives them for the next command, and ending it leaves no process behind."""
    from infra.fakes.lab_backend import children, comm
    from infra.lab import state
    from launcher.remote.openssh import stop_masters

    listener = state.read_state()["hosts"][ssh_host.lab.name]["sshd"]["pid"]
    before = set(children(listener))
    for word in ("one", "two", "three"):
        done = gpujob(env, "ssh", "lab", "--", "echo", word)
        assert (done.returncode, done.stdout) == (0, f"{word}\n".encode()), done.stderr
    sessions = [p for p in children(listener) if p not in before and comm(p).startswith("sshd")]
    assert len(sessions) == 1, sessions
    masters = _masters(tmp_path / "state")
    assert len(masters) == 1

    assert stop_masters(tmp_path / "state") == 1
    wait_for(lambda: not any(alive(pid) for pid in (*masters, *sessions)), timeout=10)


def _masters(state: Path) -> list[int]:
    """This machine's `ssh` processes whose control socket is in the state dir's folder (a
    master's title is `ssh: SOCKET [mux]`)."""
    from launcher.paths import run_dir

    folder = str(run_dir(state)).encode()
    found = []
    for entry in Path("/proc").iterdir():
        try:
            named = (entry / "comm").read_text().strip()
            argv = (entry / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, NotADirectoryError, PermissionError):
            continue
        if named == "ssh" and folder in argv:
            found.append(int(entry.name))
    return found


def test_a_refused_connection_is_retried_until_sshd_starts(
    tmp_path: Path, env: dict[str, str], ssh_host: SSHHost
) -> None:
    import infra.lab

    try:
        late = infra.lab.create_host("late")
        infra.lab.kill_host_processes(late.name)  # the address answers, nothing listens
        refused_before = _resets_sent(late.name)
        client = subprocess.Popen(
            [GPUJOB, "ssh", f"root@{late.address}", "--", "echo", "up"],
            env=dict(env, GPUJOB_SSH_CONFIG=str(_ssh_config(tmp_path))),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        # two refusals on the host's side: the client was turned away and came back
        wait_for(lambda: _resets_sent(late.name) >= refused_before + 2 or client.poll() is not None,
                 timeout=60, what="two connections refused by the host with no sshd")  # fmt: skip
        assert client.poll() is None, client.communicate()  # still trying, not given up
        infra.lab.create_host(late.name)
        out, err = client.communicate(timeout=120)  # a hang guard: it ends once sshd answers
        assert client.returncode == 0, err
        assert out == b"up\n"
    finally:
        infra.lab.destroy_host("late")


def _resets_sent(host_name: str) -> int:
    """TCP resets sent from the host's network namespace (the kernel's own counter there):
    with nothing listening, each one is a connection attempt refused."""
    from infra.lab.network import NETNS_DIR

    argv = ["nsenter", f"--net={NETNS_DIR / host_name}", "--", "cat", "/proc/net/snmp"]
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    names, values = [line.split() for line in done.stdout.splitlines() if line.startswith("Tcp:")]
    return int(dict(zip(names, values, strict=True))["OutRsts"])


def _ssh_config(folder: Path) -> Path:
    """`--on user@addr` takes its key from ~/.ssh/config, as a user's would."""
    import infra.lab

    config = folder / "ssh_config"
    net = infra.lab.naming.subnet()  # the lab's /24: 10.77.0.* for the default lab
    assert net is not None
    pattern = str(net.network_address).rsplit(".", 1)[0] + ".*"
    config.write_text(f"Host {pattern}\n  IdentityFile {infra.lab.user_key()}\n")
    return config


def test_a_sparse_gigabyte_in_gpujobignore_is_not_shipped(
    tmp_path: Path, env: dict[str, str], ssh_host: SSHHost
) -> None:
    spec = write_job(tmp_path, "import os\nprint(sorted(os.listdir('.')), flush=True)\n")
    work = tmp_path / "work"
    with open(work / "big.bin", "wb") as big:
        big.truncate(1 << 30)
    (work / ".gpujobignore").write_text("big.bin\n")
    (work / "data").mkdir()
    (work / "data" / "small.txt").write_text("kept\n")
    done = gpujob(env, "submit", str(spec), "--on", "lab", "--job-id", "sparse")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert b"shipped the workdir (3 file(s) changed)" in done.stderr
    assert b"['.gpujobignore', 'data', 'prog.py']" in done.stdout
    workdir = ssh_host.root / ".gpujob" / "jobs" / "sparse" / "workdir"
    assert not (workdir / "big.bin").exists()
    assert (workdir / "data" / "small.txt").read_text() == "kept\n"
    assert int((workdir / "prog.py").stat().st_mtime) == int((work / "prog.py").stat().st_mtime)


def test_a_second_submit_ships_only_what_changed_and_each_job_keeps_its_own_files(
    tmp_path: Path, env: dict[str, str], ssh_host: SSHHost
) -> None:
    spec = write_job(tmp_path, "import os\nprint(sorted(os.listdir('.')), flush=True)\n")
    work = tmp_path / "work"
    (work / "old.txt").write_text("old\n")
    first = gpujob(env, "submit", str(spec), "--on", "lab", "--job-id", "ship-1")
    assert first.returncode == 0, first.stderr.decode()[-2000:]
    assert b"shipped the workdir (2 file(s) changed)" in first.stderr
    again = gpujob(env, "submit", str(spec), "--on", "lab", "--job-id", "ship-2")
    assert b"shipped the workdir (0 file(s) changed)" in again.stderr
    (work / "old.txt").unlink()
    (work / "new.txt").write_text("new\n")
    third = gpujob(env, "submit", str(spec), "--on", "lab", "--job-id", "ship-3")
    assert third.returncode == 0, third.stderr.decode()[-2000:]
    assert b"shipped the workdir (1 file(s) changed)" in third.stderr
    assert b"['new.txt', 'prog.py']" in third.stdout  # a file removed here is gone there
    jobs = ssh_host.root / ".gpujob" / "jobs"
    assert (jobs / "ship-1" / "workdir" / "old.txt").read_text() == "old\n"
    assert not (jobs / "ship-1" / "workdir" / "new.txt").exists()


def test_cancel_stops_a_remote_job(tmp_path: Path, env: dict[str, str], ssh_host: SSHHost) -> None:
    spec = write_job(tmp_path, "import time\nprint('working', flush=True)\ntime.sleep(600)\n")
    started = gpujob(env, "submit", str(spec), "--on", "lab", "--detach", "--job-id", "sleeper")
    assert started.returncode == 0, started.stderr.decode()[-2000:]
    node_dir = ssh_host.root / ".gpujob" / "jobs" / "sleeper" / "node-0"
    wait_for(lambda: b"working" in (node_dir / "job.log").read_bytes())
    assert status_of(env, "sleeper")["state"] == "running"
    pid = json.loads((node_dir / "status.json").read_text())["pid"]
    tree = [pid, *descendants(pid)]
    assert len(tree) >= 2  # run.sh exec-s torchrun, which starts the worker

    cancelled = gpujob(env, "cancel", "sleeper", "--grace", "5")
    assert cancelled.returncode == 0, cancelled.stderr
    assert status_of(env, "sleeper")["state"] == "cancelled"
    assert not [p for p in tree if alive(p)]


def test_a_submit_killed_at_any_point_leaves_no_secret_on_the_host(
    tmp_path: Path, env: dict[str, str], ssh_host: SSHHost, lab: None
) -> None:
    """`kill -9` of `submit --on HOST` at 20 random points of its first seconds (the S3
    probe, the preparation, the start): the job's secret and the S3 keys travel only on
    stdin, so no file on the host holds either, whenever the client died."""
    import random
    import signal

    from infra.lab import boot, s3

    secret = "gj-token-value-never-in-a-file-5e1"
    env = dict(with_lab_s3(env, tmp_path), GJ_KILL_TOKEN=secret)
    (tmp_path / "work").mkdir()
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: killed\nimage: host\nworkdir: work\nsecrets: [GJ_KILL_TOKEN]\n"
        "checkpoints: {sync_to: 'lab:runs/killed'}\n"
        'run:\n  shell: |\n    echo "token length ${#GJ_KILL_TOKEN}"\n    sleep 1\n'
    )

    def submit(job_id: str) -> subprocess.Popen:
        return subprocess.Popen([GPUJOB, "submit", str(spec), "--on", "lab", "--detach",
                                 "--job-id", job_id], env=env, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE)  # fmt: skip

    began = time.monotonic()
    whole = submit("killed-whole")
    said_whole = whole.communicate(timeout=120)[1]
    assert whole.returncode == 0, said_whole.decode()[-2000:]
    assert b"reachable from lab, write probe ok" in said_whole  # the keys went on stdin
    took = time.monotonic() - began
    said = f"token length {len(secret)}".encode()
    wait_for(lambda: said in ssh_host.job_log("killed-whole"), 60)
    rng = random.Random(25)
    for attempt in range(20):
        proc = submit(f"killed-{attempt}")
        time.sleep(rng.uniform(0, took))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    time.sleep(2)  # the jobs that started end (sleep 1); their agents' last writes are done

    holders = []
    for folder in (ssh_host.root / ".gpujob", boot.host_dir(ssh_host.lab.name) / "tmp"):
        for path in folder.rglob("*"):
            if path.is_file() and not path.is_symlink():
                data = path.read_bytes()
                if secret.encode() in data or s3.SECRET_KEY.encode() in data:
                    holders.append(str(path))
    assert holders == []
    started = [p for p in (ssh_host.root / ".gpujob" / "jobs").glob("killed-*/node-0/job.log")]
    print(f"a whole submit took {took:.1f} s; {len(started)} of 21 jobs started")


def test_down_first_cancels_the_jobs_still_running_on_its_hosts(
    tmp_path: Path, env: dict[str, str], ssh_host: SSHHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`down`'s step before it terminates anything (its provider half is tested against the
    cloud fakes): a job on the host is ended by its agent, so the end is recorded (and, with
    a sync target, the log and last checkpoints shipped) before the host goes."""
    from launcher.jobs.cancel import stop_jobs_on

    spec = write_job(tmp_path, "import time\nprint('working', flush=True)\ntime.sleep(600)\n")
    started = gpujob(env, "submit", str(spec), "--on", "lab", "--detach", "--job-id", "doomed")
    assert started.returncode == 0, started.stderr.decode()[-2000:]
    node_dir = ssh_host.root / ".gpujob" / "jobs" / "doomed" / "node-0"
    wait_for(lambda: b"working" in (node_dir / "job.log").read_bytes())
    for key in ("GPUJOB_STATE_DIR", "GPUJOB_HOSTS_FILE"):
        monkeypatch.setenv(key, env[key])
    stop_jobs_on({"some-other-host"})
    assert status_of(env, "doomed")["state"] == "running"  # not on the hosts going
    stop_jobs_on({"lab"})
    assert status_of(env, "doomed")["state"] == "cancelled"
    assert b"[gpujob-agent] cancel: SIGTERM" in (node_dir / "job.log").read_bytes()


def test_down_runs_the_down_hooks_on_the_host_before_its_cancel(
    tmp_path: Path, env: dict[str, str], ssh_host: SSHHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SkyPilot's `down` lifecycle hooks (a gpujob spec's `hooks:`): node 0's agent runs them
    over the job's SSH connection before `down` cancels the job, their output in its log;
    the cancel that follows runs no stop hook (the host goes down, the job is not stopped)."""
    from launcher.jobs.cancel import stop_jobs_on

    spec = write_job(tmp_path, "import time\nprint('working', flush=True)\ntime.sleep(600)\n")
    with spec.open("a") as out:
        out.write(
            "hooks:\n  - run: echo down hook saw $GPUJOB_LIFECYCLE_EVENT\n"
            "    events: [down]\n  - run: echo stop hook ran\n    events: [stop]\n"
        )
    started = gpujob(env, "submit", str(spec), "--on", "lab", "--detach", "--job-id", "hooked")
    assert started.returncode == 0, started.stderr.decode()[-2000:]
    log = ssh_host.root / ".gpujob" / "jobs" / "hooked" / "node-0" / "job.log"
    wait_for(lambda: b"working" in log.read_bytes())
    for key in ("GPUJOB_STATE_DIR", "GPUJOB_HOSTS_FILE"):
        monkeypatch.setenv(key, env[key])
    stop_jobs_on({"lab"})
    assert status_of(env, "hooked")["state"] == "cancelled"
    text = log.read_text()
    assert "down hook saw down\n" in text and "stop hook ran" not in text
    assert text.index("lifecycle hook 1/1 (down): done") < text.index("cancel: SIGTERM")


def wait_for(
    condition: Callable[[], bool], timeout: float = 120, what: str = "the awaited state"
) -> None:
    """Poll for an observable state (a file not there yet counts as not yet); the deadline is
    only a hang guard, and its failure says what never happened."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except FileNotFoundError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{what}: still not so after {timeout:.0f} s")


def test_quickstart_on_a_host_syncs_to_s3_and_the_latest_pulls_back_byte_for_byte(
    tmp_path: Path, env: dict[str, str], ssh_host: SSHHost, lab: None
) -> None:
    """Issue 7's must-show: rclone runs on the host (S3 at the bridge address), the bucket
    holds only complete checkpoints, and a pull into a fresh folder here, and onto the host
    with --on, reproduces the host's latest checkpoint."""
    from infra.lab import s3

    bucket = s3.create_bucket()
    config = tmp_path / "config"
    config.mkdir()
    (config / "config.yaml").write_text(
        f"remotes:\n  lab:\n    provider: Other\n    endpoint: {s3.endpoint()}\n"
        f"    host_endpoint: {s3.endpoint(for_hosts=True)}\n    bucket: {bucket}\n"
        "    access_key_env: GJ_LAB_KEY\n    secret_key_env: GJ_LAB_SECRET\n"
    )
    env = dict(
        env, GPUJOB_CONFIG_DIR=str(config), GJ_LAB_KEY=s3.ACCESS_KEY, GJ_LAB_SECRET=s3.SECRET_KEY
    )
    run = subprocess.run(
        [
            GPUJOB,
            "submit",
            "jobs/quickstart.yaml",
            "--on",
            "lab",
            "--job-id",
            "qs-s3",
            "--set",
            "checkpoints.sync_to=lab:runs/qs",
        ],
        env=env,
        capture_output=True,
        timeout=900,
        cwd=REPO,
    )
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    assert b"reachable from lab, write probe ok" in run.stderr
    assert b"[gpujob-agent] synced" in run.stdout
    host_ckpts = ssh_host.root / ".gpujob" / "jobs" / "qs-s3" / "checkpoints"
    assert sorted(p.name for p in host_ckpts.iterdir()) == ["checkpoint-40", "checkpoint-60"]

    tree = gpujob(env, "storage", "tree", "lab:runs/qs/qs-s3", "--depth", "1")  # the job's run
    listed = tree.stdout.decode().splitlines()[1:]
    checkpoints = [line for line in listed if line.startswith("checkpoint-")]
    assert checkpoints and all(line.endswith("  complete") for line in checkpoints), listed
    # the host's agent shipped the job log beside them, whole, once the job had ended
    shipped = s3.client().get_object(Bucket=bucket, Key="runs/qs/qs-s3/logs/qs-s3/node-0.log")
    host_log = ssh_host.root / ".gpujob" / "jobs" / "qs-s3" / "node-0" / "job.log"
    assert shipped["Body"].read() == host_log.read_bytes()

    def files(path: Path) -> dict[str, bytes]:
        return {
            p.relative_to(path).as_posix(): p.read_bytes() for p in path.rglob("*") if p.is_file()
        }

    fresh = tmp_path / "fresh"
    pulled = gpujob(env, "sync-ckpt", "--from", "lab:runs/qs/qs-s3", "--latest", "--dest",
                    str(fresh))  # fmt: skip
    assert pulled.returncode == 0, pulled.stderr.decode()[-2000:]
    assert files(fresh / "checkpoint-60") == files(host_ckpts / "checkpoint-60")

    onto = gpujob(
        env,
        "sync-ckpt",
        "--from",
        "lab:runs/qs/qs-s3",
        "--latest",
        "--dest",
        "/root/restored",
        "--on",
        "lab",
    )
    assert onto.returncode == 0, onto.stderr.decode()[-2000:]
    restored = ssh_host.root / "restored" / "checkpoint-60"
    assert files(restored) == files(host_ckpts / "checkpoint-60")

    pushed = gpujob(env, "sync-ckpt", "qs-s3", "--json")
    assert pushed.returncode == 0, pushed.stderr.decode()[-2000:]
    assert all(c["skipped"] for c in json.loads(pushed.stdout)["checkpoints"])


def test_submit_killed_at_random_points_leaves_no_ghost_on_a_host(
    tmp_path: Path, env: dict[str, str], ssh_host: SSHHost
) -> None:
    """`kill -9` of `submit --on HOST` at 20 random points (issue 25): a host that answers
    but has no node folder is not `unreachable`, its job ends `failed to start`; every job
    is resolved by status, cancel and logs, and none leaves a process on the host."""
    from launcher.remote.openssh import close_state
    from tests.e2e.test_interrupted_submit import SLEEPER, kill_at_random_points

    spec = write_job(tmp_path, SLEEPER)
    warm = gpujob(env, "submit", str(spec), "--on", "lab", "--detach", "--job-id", "warm")
    assert warm.returncode == 0, warm.stderr.decode()[-2000:]  # the environment is built
    assert gpujob(env, "cancel", "warm").returncode == 0
    kill_at_random_points(env, spec, 2.5, 0.3, "--on", "lab")
    jobs = str(ssh_host.root / ".gpujob" / "jobs")

    def left() -> list[str]:
        found = []
        for entry in Path("/proc").iterdir():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "/.gpujob/jobs/kill-" in cmdline or jobs in cmdline:
                found.append(f"{entry.name}: {cmdline[:200]}")
        return found

    # gpujob's own SSH masters stay for their next command, and one opened by a command
    # that named a job folder carries that path in its argv: ended first, as a user's
    # machine would end them, so what is left is what a job left
    close_state(Path(env["GPUJOB_STATE_DIR"]))
    deadline = time.monotonic() + 20
    while left() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left()


def test_a_step_captured_on_a_host_replays_there_with_on(
    tmp_path: Path, env: dict[str, str], ssh_host: SSHHost, lab: None
) -> None:
    """The capture job of tests/storage on the lab host, its captures synced to the lab's S3;
    `gpujob replay --on lab` pulls the capture and the checkpoint onto the host (not through
    this machine) and runs the step there, in the job's workdir, with the job's Python."""
    import re
    import shutil

    env = with_lab_s3(env, tmp_path)
    shutil.copytree(REPO / "tests" / "storage" / "capture_job", tmp_path / "work")
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"name: capture\nimage: {IMAGE}\nworkdir: work\n"
        "run:\n  entrypoint: train.py\n  nproc_per_node: 2\n"
        "envs:\n  FAST_PATH: 1\n  OMP_NUM_THREADS: 1\n"
        "checkpoints:\n  dir: checkpoints\n  sync_to: lab:runs/cap\n"
    )
    run = gpujob(env, "submit", str(spec), "--on", "lab", "--job-id", "cap-lab", timeout=900)
    assert run.returncode != 0 and b"fast path: value out of range" in run.stdout
    script = (ssh_host.root / ".gpujob/jobs/cap-lab/node-0/run.sh").read_text()
    python = re.search(r"^export PATH=(\S+):", script, re.M).group(1) + "/python"

    again = gpujob(env, "replay", "cap-lab", "--on", "lab", "--", python, "replay.py")
    assert again.returncode == 1, again.stderr.decode()[-3000:]
    said = again.stderr.decode()
    assert "capture: rank 1, step 7" in said and "checkpoint-5" in said
    assert "RuntimeError: fast path: value out of range" in said
    pulled = ssh_host.root / ".gpujob/replay/cap-lab"
    assert (pulled / "rank-1-step-7.pt").is_file()
    assert (pulled / "checkpoints/checkpoint-5/model.pt").is_file()

    fixed = gpujob(env, "replay", "cap-lab", "--on", "lab", "--set", "FAST_PATH=0", "--",
                   python, "replay.py")  # fmt: skip
    assert fixed.returncode == 0, fixed.stderr.decode()[-3000:]
    assert "replayed step 7 rank 1 from checkpoint-5" in fixed.stderr.decode()
    assert "finite: True" in fixed.stderr.decode()
