"""Booting a lab host: its sshd, and optionally its dockerd, inside the host's namespaces.

A host is a network namespace, but the filesystem is shared with the machine. To keep two
hosts from silently sharing files a real pair of machines would not share, sshd starts in a
private mount and UTS namespace of its own where the host's folder is bound over `/root` and
`/tmp` (the lab folder stays visible at its usual path), `/etc/hosts` names the host, the
netns mounts of the other hosts are detached, and /run/docker.sock is the host's own engine
(or nothing), never the machine's. dockerd joins sshd's namespaces with
`nsenter` (not `ip netns exec`, which remounts /sys and hides the cgroup mounts), so a
`docker run -v /root/x:/x` from an SSH session mounts the host's /root, not the machine's.
When every process of the host dies its mount namespace goes, with every mount in it.
"""

from __future__ import annotations

import contextlib
import shlex
import shutil
import socket
from pathlib import Path
from typing import Any

from infra.lab import image_store, naming, network, state
from infra.lab.network import NETNS_DIR

SSHD_CONFIG = """\
Port 22
HostKey {host_key}
AuthorizedKeysFile {authorized_keys}
PidFile {pidfile}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
MaxStartups 100:30:200
MaxSessions 100
Subsystem sftp internal-sftp
"""


def host_dir(name: str) -> Path:
    return state.lab_dir() / "hosts" / name


def docker_socket(name: str) -> Path:
    return host_dir(name) / "docker.sock"


def prepare(name: str, address: str, user_public_key: Path, docker: bool) -> None:
    """Write the host's files once: host key, sshd config, private /root and /tmp, hosts file."""
    root = host_dir(name)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation folder
    for sub in ("root", "tmp", "docker", "exec"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "root").chmod(0o700)
    (root / "tmp").chmod(0o1777)
    key = root / "ssh_host_ed25519_key"
    if not key.exists():
        state.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)])
    config = SSHD_CONFIG.format(
        host_key=key, authorized_keys=user_public_key, pidfile=root / "sshd.pid"
    )
    if docker:
        config += f"SetEnv DOCKER_HOST=unix://{docker_socket(name)}\n"
    (root / "sshd_config").write_text(config)
    (root / "etc_hosts").write_text(
        f"127.0.0.1\tlocalhost\n{address}\t{name}\n::1\tlocalhost ip6-localhost ip6-loopback\n"
    )
    (root / "daemon.json").write_text("{}\n")


def sshd_argv(name: str) -> list[str]:
    """nsenter (network) -> unshare (mount, UTS) -> sh (binds) -> exec sshd, all one pid."""
    root = host_dir(name)
    lab = state.lab_dir()
    steps = [
        "set -e",
        "umount -l /run/netns 2>/dev/null || true",
        f"hostname {shlex.quote(name)}",
        f"mount --bind {shlex.quote(str(root / 'etc_hosts'))} /etc/hosts",
        f"mount --bind {shlex.quote(str(root / 'root'))} /root",
        "if [ -S /run/docker.sock ]; then mount --bind /dev/null /run/docker.sock; fi",
    ]
    if lab.is_relative_to("/tmp"):
        inner = root / "tmp" / lab.relative_to("/tmp")
        steps += [
            f"mkdir -p {shlex.quote(str(inner))}",
            f"mount --bind {shlex.quote(str(lab))} {shlex.quote(str(inner))}",
            f"mount --rbind {shlex.quote(str(root / 'tmp'))} /tmp",
        ]
    else:
        steps.append(f"mount --bind {shlex.quote(str(root / 'tmp'))} /tmp")
    steps.append(f"exec /usr/sbin/sshd -D -e -f {shlex.quote(str(root / 'sshd_config'))}")
    return [
        "nsenter", f"--net={NETNS_DIR / name}", "--",
        "unshare", "--mount", "--uts", "--propagation", "private", "--",
        "sh", "-c", "; ".join(steps),
    ]  # fmt: skip


def dockerd_argv(name: str, sshd_pid: int | str) -> list[str]:
    root = host_dir(name)
    return [
        "nsenter", f"--net={NETNS_DIR / name}", f"--mount=/proc/{sshd_pid}/ns/mnt",
        f"--uts=/proc/{sshd_pid}/ns/uts", "--",
        "dockerd", "--config-file", str(root / "daemon.json"),
        "--data-root", str(root / "docker"), "--exec-root", str(root / "exec"),
        "--pidfile", str(root / "dockerd.pid"), "-H", f"unix://{docker_socket(name)}",
        "--bridge=none", "--iptables=false", "--ip-forward=false", "--ip-masq=false",
        "--insecure-registry", f"{naming.bridge_address()}:5000",
        "--cgroup-parent", name,
    ]  # fmt: skip


def start_sshd(name: str, address: str) -> dict[str, Any]:
    log = host_dir(name) / "sshd.log"
    rec = state.spawn(sshd_argv(name), log)
    try:
        state.wait_until(
            lambda: _accepts(address, 22), f"sshd of {name}", timeout=30, log=log, daemon=rec
        )
    except state.LabError as error:
        raise state.LabError(f"{error}\n{_wire_report(name, address)}") from None
    return rec


def _wire_report(name: str, address: str) -> str:
    """What the wire looked like when a host's sshd could not be reached: enough to tell a
    missing address, a port off the bridge, a firewall rule or a starved machine apart."""
    probes = [
        ["ip", "-n", name, "-br", "addr"],
        ["ip", "-br", "link", "show", "master", naming.bridge()],
        ["ip", "-br", "addr", "show", naming.bridge()],
        ["ip", "netns", "exec", name, "ss", "-ltn"],
        ["iptables", "-S", "FORWARD"],
        ["ip", "neigh", "show", address],
        ["cat", "/proc/loadavg"],
    ]
    lines = []
    for argv in probes:
        try:
            done = state.run(argv, check=False)
        except OSError as error:
            lines.append(f"$ {' '.join(argv)}\n{error}")
            continue
        lines.append(f"$ {' '.join(argv)}\n{(done.stdout + done.stderr).strip()}")
    others = [n for n in network.lab_namespaces() if n != name]
    for other in others:  # a second namespace holding the same address steals the packets
        done = state.run(["ip", "-n", other, "-br", "addr"], check=False)
        if address in done.stdout:
            lines.append(f"!! {other} holds {address} too")
    return "\n".join(lines)


def start_dockerd(name: str, sshd_pid: int) -> dict[str, Any]:
    log = host_dir(name) / "dockerd.log"
    sock = docker_socket(name)
    sock.unlink(missing_ok=True)
    # Left by a crash (SIGKILL): dockerd balks at its own pid file, and times out waiting for
    # a containerd whose pid file and socket belong to a dead process. Every process of the
    # host is gone by now, so containerd's runtime state is only debris.
    (host_dir(name) / "dockerd.pid").unlink(missing_ok=True)
    shutil.rmtree(host_dir(name) / "exec" / "containerd", ignore_errors=True)
    image_store.seed(host_dir(name) / "docker", sshd_pid)  # the lab's images, at every boot
    rec = state.spawn(dockerd_argv(name, sshd_pid), log)
    state.wait_until(
        lambda: docker_answers(sock), f"dockerd of {name}", timeout=60, log=log, daemon=rec
    )
    # Plain `docker` on the host, without DOCKER_HOST, finds this engine too (where the
    # machine has a /run/docker.sock to bind over; /run itself is shared, so none is made).
    bind = f"mount --bind {shlex.quote(str(sock))} /run/docker.sock"
    state.run(["nsenter", f"--mount=/proc/{sshd_pid}/ns/mnt", "--", "sh", "-c",
               f"if [ -e /run/docker.sock ]; then {bind}; fi"])  # fmt: skip
    return rec


def _accepts(address: str, port: int) -> bool:
    """sshd sends its banner only after re-executing itself for the connection, which on a
    loaded machine (two cores, a job training beside the tests) takes seconds: a short
    banner timeout would fail every attempt for ever, so only the connect is quick."""
    try:
        with socket.create_connection((address, port), timeout=1) as conn:
            conn.settimeout(15)
            return conn.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def docker_answers(sock: Path) -> bool:
    """GET /_ping on the daemon's unix socket: cheaper than starting a docker client."""
    if not sock.exists():
        return False
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(2)
            conn.connect(str(sock))
            conn.sendall(b"GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
            return b" 200 " in conn.recv(64)
    except OSError:
        return False


def cgroup_dirs(name: str) -> list[Path]:
    """The cgroup folders dockerd made for the host's containers (`--cgroup-parent`)."""
    base = Path("/sys/fs/cgroup")
    return [p for p in base.glob(f"*/{name}") if p.is_dir()]


def cgroup_pids(name: str) -> set[int]:
    pids: set[int] = set()
    for top in cgroup_dirs(name):
        for procs in top.rglob("cgroup.procs"):
            try:
                pids.update(int(p) for p in procs.read_text().split())
            except OSError:
                continue
    return pids


def remove_cgroups(name: str) -> None:
    """Empty cgroup folders are removed with rmdir, deepest first."""
    for top in cgroup_dirs(name):
        subs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for folder in [*subs, top]:
            with contextlib.suppress(OSError):
                folder.rmdir()
