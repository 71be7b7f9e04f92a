"""Real lab hosts behind the fakes (needs root and `infra.lab`).

- A Lambda instance is a lab host of its own, `gjlab-l<n>`, with sshd and a dockerd, like
  Lambda's VM with Docker. Login is root (Lambda's is `ubuntu`). The lab's own key opens
  every lab host; a different key named at launch is written to /root/.ssh/authorized_keys
  and sshd is told to read that file too (the lab's sshd_config names only the lab key).
  As clouds do, a new instance gets the address a terminated one had (the last freed one
  that no host holds), with a host key of its own: what a client pinned for the old machine
  must not be trusted, nor refused, for the new one.
- A Vast instance is a container on a lab "machine" host, `gjlab-v<machine_id>`, started
  from the requested image through that host's dockerd. Vast's entrypoint is emulated: it
  writes root's authorized_keys from the registered keys (on every start, as Vast rewrites
  them), starts `onstart` (every start), and runs sshd. The host's dockerd has no bridge, so
  the container shares the machine's network and its sshd listens on the instance's own
  port (40000+) instead of Docker publishing 22 there. No Docker socket goes inside.

What was made is recorded in a JSON file (instance -> host, container, port, keys) so that
`stop_fakes` can remove it even when the fake that made it was killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from infra.lab import boot, hosts, state

CONTAINER_LABEL = "gpujob-lab=1"
FIRST_PORT = 40000
FAKE_DIR = "/etc/vast-fake"
ENTRYPOINT = f"""\
set -e
mkdir -p /root/.ssh /run/sshd && chmod 700 /root/.ssh
cp {FAKE_DIR}/authorized_keys /root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys
ssh-keygen -A >/dev/null 2>&1 || true
if [ -s {FAKE_DIR}/onstart.sh ]; then
  cp {FAKE_DIR}/onstart.sh /root/onstart.sh
  if command -v bash >/dev/null; then run=bash; else run=sh; fi
  ($run /root/onstart.sh >>/var/log/onstart.log 2>&1 &)
fi
touch /root/hasbooted
exec env -u CONTAINER_API_KEY /bin/sh -c '
trap "kill -TERM -1 2>/dev/null; sleep 3600" TERM
/usr/sbin/sshd -D -e -p "$1" -o PermitRootLogin=prohibit-password \
  -o PasswordAuthentication=no -o UsePAM=no &
wait $!' init "$1"
"""
"""The container's start as Vast's ssh runtype makes it (keys, onstart in the background,
sshd). Its PID 1 is an init that passes a stop's SIGTERM to every process and then waits
for the stop's SIGKILL, as a machine's shutdown does: a job on a stopped instance (an
outbid one among them) has the grace to act on it, rather than dying with sshd at once
[U: what Vast's own init does with a stop is not documented]. PID 1 runs without the
instance's key in its environment (the onstart, before it, took it into its 0600 file)."""


def _volume_dir(volume: str) -> Path:
    """A Vast volume's disk: a folder of the lab's (its machine's lab host goes with the
    machine's last instance; the volume must not)."""
    from infra.lab import naming

    folder = naming.lab_dir() / "vast-volumes" / volume
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class LabBackend:
    @property
    def overlay_subnet(self) -> str:
        """A Vast overlay's subnet here: the lab's own /24, where the machines (and so their
        containers, on the host network) reach each other (vast_clusters)."""
        from infra.lab import naming

        return str(naming.subnet() or naming.DEFAULT_SUBNET)

    def __init__(self, records: Path) -> None:
        self.path = records
        self._lock = threading.RLock()
        self.records: dict[str, dict[str, Any]] = (
            json.loads(records.read_text()) if records.exists() else {}
        )
        self.freed: list[str] = []  # addresses of terminated VMs, the last freed last

    def _save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.records, indent=2, sort_keys=True))
        tmp.replace(self.path)

    def _record(self, instance_id: str, **fields: Any) -> None:
        with self._lock:
            self.records.setdefault(instance_id, {}).update(fields)
            self._save()

    # --- Lambda: a VM-like host -------------------------------------------------------------
    def launch_vm(self, instance_id: str, ssh_public_key: str) -> tuple[str, int]:
        with self._lock:
            taken = set(state.read_state()["hosts"]) | {r["host"] for r in self.records.values()}
            name = next(hosts.host_name(f"l{n}") for n in range(1, 10000)
                        if hosts.host_name(f"l{n}") not in taken)  # fmt: skip
            self._record(instance_id, kind="vm", host=name, keys=ssh_public_key)
            self._reuse_address(name)
        host = hosts.create_host(name, docker=True)
        self._install_vm_keys(name, host.address, ssh_public_key.splitlines(), replace=True)
        return host.address, host.ssh_port

    def _reuse_address(self, name: str) -> None:
        """Give host `name` the last freed address no host holds, by recording it for the
        host before `create_host` reads the record (which otherwise hands out the next
        address round the /24). The host was destroyed with its neighbour entry flushed, so
        this machine meets the new one at once."""
        with state.locked_state() as lab:
            used = {rec["address"] for rec in lab["hosts"].values()}
            while self.freed:
                address = self.freed.pop()
                if address not in used:
                    lab["hosts"][hosts.host_name(name)] = {"address": address, "docker": True}
                    return

    def _install_vm_keys(self, name: str, address: str, keys: list[str], *, replace: bool) -> None:
        ssh_dir = boot.host_dir(name) / "root" / ".ssh"
        ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        authorized = ssh_dir / "authorized_keys"
        old = [] if replace or not authorized.exists() else authorized.read_text().splitlines()
        authorized.write_text("".join(f"{k.strip()}\n" for k in [*old, *keys] if k.strip()))
        authorized.chmod(0o600)
        lab_key = Path(f"{hosts.user_key()}.pub").read_text().split()[:2]
        if all(k.split()[:2] == lab_key for k in keys if k.strip()):
            return  # the lab key already opens every lab host
        config = boot.host_dir(name) / "sshd_config"
        lines = config.read_text().splitlines()
        wanted = [ln if not ln.startswith("AuthorizedKeysFile") or ".ssh/authorized_keys" in ln
                  else f"{ln} .ssh/authorized_keys" for ln in lines]  # fmt: skip
        if wanted != lines:
            config.write_text("\n".join(wanted) + "\n")
            sshd = state.read_state()["hosts"][name]["sshd"]
            os.kill(sshd["pid"], signal.SIGHUP)  # sshd re-execs itself with the new config
            time.sleep(0.2)
            _wait_for_ssh(address, 22, f"sshd of {name} after SIGHUP")

    # --- Vast: a container on a machine -------------------------------------------------------
    def launch_container(
        self,
        instance_id: str,
        image: str,
        ssh_public_key: str,
        onstart: str | None,
        env: dict[str, str],
        *,
        machine_id: int = 1,
        args: list[str] | None = None,
        volumes: dict[str, str] | None = None,
    ) -> tuple[str, int]:
        name, container = hosts.host_name(f"v{machine_id}"), f"gjvast-{instance_id}"
        with self._lock:
            used = {r.get("port") for r in self.records.values() if r["host"] == name}
            port = next(p for p in range(FIRST_PORT, FIRST_PORT + 100) if p not in used)
            self._record(instance_id, kind="container", host=name, container=container,
                         port=port)  # fmt: skip
        host = hosts.create_host(name, docker=True)
        assert host.docker_host is not None
        self._record(instance_id, docker_host=host.docker_host)
        env = {**env, "PUBLIC_IPADDR": host.address, "VAST_TCP_PORT_22": str(port)}
        with tempfile.TemporaryDirectory() as tmp:
            env_file = Path(tmp) / "env"  # secrets (CONTAINER_API_KEY) stay off argv
            env_file.write_text("".join(f"{k}={v}\n" for k, v in env.items() if "\n" not in v))
            env_file.chmod(0o600)
            create = ["create", "--name", container, "--label", CONTAINER_LABEL,
                      "--label", f"gpujob-lab.instance={instance_id}", "--network", "host",
                      "--restart", "unless-stopped", "--env-file", str(env_file)]  # fmt: skip
            for volume, mount in (volumes or {}).items():  # outlives the machine's host,
                create += ["--volume", f"{_volume_dir(volume)}:{mount}"]  # as Vast's does
            if args is None:
                create += ["--entrypoint", "/bin/sh", image, "-c", ENTRYPOINT, "vast", str(port)]
            else:  # `args` runtype: the image's own start, no Vast sshd
                create += [*(["--entrypoint", onstart] if onstart else []), image, *args]
            self._docker(host.docker_host, create, timeout=600)
            files = Path(tmp) / "vast-fake"
            files.mkdir()
            (files / "authorized_keys").write_text(_keys_text(ssh_public_key.splitlines()))
            (files / "onstart.sh").write_text((onstart or "") if args is None else "")
            self._docker(host.docker_host, ["cp", str(files), f"{container}:{FAKE_DIR}"])
        self._docker(host.docker_host, ["start", container])
        if args is not None:
            return host.address, 0
        _wait_for_ssh(host.address, port, f"sshd of {container}",
                      why=lambda: self._logs(host.docker_host, container))  # fmt: skip
        return host.address, port

    # --- both -------------------------------------------------------------------------------------
    def terminate(self, instance_id: str) -> None:
        with self._lock:
            rec = self.records.get(instance_id)
            if rec is None:
                return
            if rec["kind"] == "vm":
                held = state.read_state()["hosts"].get(hosts.host_name(rec["host"]), {})
                hosts.destroy_host(rec["host"])
                if held.get("address"):
                    self.freed.append(held["address"])
            else:
                if rec.get("docker_host") and Path(rec["docker_host"][7:]).exists():
                    self._docker(rec["docker_host"], ["rm", "-f", rec["container"]], check=False)
                if not any(r["host"] == rec["host"] for i, r in self.records.items()
                           if i != instance_id):  # fmt: skip
                    hosts.destroy_host(rec["host"])  # the machine's last instance is gone
            del self.records[instance_id]
            self._save()

    def reboot(self, instance_id: str) -> None:
        rec = self.records[instance_id]
        if rec["kind"] == "vm":
            hosts.kill_host_processes(rec["host"])
            host = hosts.create_host(rec["host"], docker=True)
            self._install_vm_keys(rec["host"], host.address, rec["keys"].splitlines(),
                                  replace=True)  # fmt: skip
        else:
            self._docker(rec["docker_host"], ["restart", "-t", "2", rec["container"]])
            address = self._address(rec["host"])
            _wait_for_ssh(address, rec["port"], f"sshd of {rec['container']}")

    def drop_ssh(self, instance_id: str) -> None:
        rec = self.records[instance_id]
        if rec["kind"] == "vm":
            listener = state.read_state()["hosts"][rec["host"]]["sshd"]["pid"]
        else:
            listener = int(self._docker(rec["docker_host"], ["inspect", "-f", "{{.State.Pid}}",
                                                             rec["container"]]))  # fmt: skip
            if not comm(listener).startswith("sshd"):  # the container's init: sshd is its child
                listener = next(p for p in children(listener) if comm(p).startswith("sshd"))
        for pid in children(listener):
            if comm(pid).startswith("sshd"):  # one per connection; onstart's jobs live on
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    def set_authorized_keys(self, instance_id: str, keys: list[str], *, replace: bool) -> None:
        rec = self.records[instance_id]
        if rec["kind"] == "vm":
            all_keys = keys if replace else [*rec["keys"].splitlines(), *keys]
            self._record(instance_id, keys="\n".join(all_keys))
            self._install_vm_keys(rec["host"], self._address(rec["host"]), keys, replace=replace)
            return
        mode = ">" if replace else ">>"
        script = (f"cat {mode} {FAKE_DIR}/authorized_keys && "
                  f"cp {FAKE_DIR}/authorized_keys /root/.ssh/authorized_keys")  # fmt: skip
        self._docker(rec["docker_host"], ["exec", "-i", rec["container"], "sh", "-c", script],
                     stdin=_keys_text(keys))  # fmt: skip

    def stop(self, instance_id: str, grace_s: int = 2) -> None:
        rec = self.records[instance_id]
        self._docker(rec["docker_host"], ["stop", "-t", str(grace_s), rec["container"]],
                     timeout=grace_s + 60)  # fmt: skip

    def start(self, instance_id: str) -> None:
        rec = self.records[instance_id]
        self._docker(rec["docker_host"], ["start", rec["container"]])
        _wait_for_ssh(self._address(rec["host"]), rec["port"], f"sshd of {rec['container']}")

    def close(self) -> None:
        for instance_id in list(self.records):
            try:
                self.terminate(instance_id)
            except state.LabError as error:
                print(f"lab backend: terminating {instance_id}: {error}")

    # --- helpers ----------------------------------------------------------------------------------
    @staticmethod
    def _address(name: str) -> str:
        return state.read_state()["hosts"][name]["address"]

    @staticmethod
    def _docker(docker_host: str, argv: list[str], *, check: bool = True, timeout: float = 120,
                stdin: str | None = None) -> str:  # fmt: skip
        done = subprocess.run(["docker", "-H", docker_host, *argv], capture_output=True,
                              text=True, timeout=timeout, input=stdin)  # fmt: skip
        if check and done.returncode != 0:
            raise state.LabError(f"lab backend: docker {shlex.join(argv[:3])} failed: "
                                 f"{done.stderr.strip()}")  # fmt: skip
        return done.stdout.strip()

    def _logs(self, docker_host: str, container: str) -> str:
        return self._docker(docker_host, ["logs", "--tail", "20", container], check=False)


def _keys_text(keys: list[str]) -> str:
    return "".join(f"{k.strip()}\n" for k in keys if k.strip())


def _wait_for_ssh(address: str, port: int, what: str, why: Any = None,
                  timeout: float = 60) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((address, port), timeout=1) as conn:
                if conn.recv(4).startswith(b"SSH-"):
                    return
        except OSError:
            pass
        time.sleep(0.2)
    detail = f": {why()}" if why else ""
    raise state.LabError(f"lab backend: {what} is not answering on {address}:{port}{detail}")


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
