#!/usr/bin/env bash
# Debian packages gpujob's tests and lab need, and a running Docker engine. Idempotent:
# installs only what is missing and starts dockerd only if none answers.
set -euo pipefail

# slurm*/munge: the lab's SLURM cluster (infra/lab/slurm.py); their services are not started
# here (no systemd), the lab runs the daemons itself with its own config and munge key.
PACKAGES=(docker.io openssh-server openssh-client iproute2 rclone debootstrap docker-registry
          shellcheck util-linux procps rsync socat iptables
          slurmctld slurmd slurm-client munge)
missing=()
for pkg in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
    echo "infra: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "${1:-}" = "--docker" ] && ! docker info >/dev/null 2>&1; then
    echo "infra: starting the Docker engine"
    mkdir -p /var/log
    # A lab's registry (infra/lab/registry.py) is plain http on its bridge; labs take /24s of
    # 10.77.0.0/16 (infra/lab/naming.py), so the whole range is trusted. A dockerd started
    # otherwise still works: the lab pushes through a loopback forward.
    setsid dockerd --host unix:///var/run/docker.sock --insecure-registry 10.77.0.0/16 >/var/log/gpujob-dockerd.log 2>&1 < /dev/null &
    for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
    docker info >/dev/null 2>&1 || { echo "infra: dockerd did not start; see /var/log/gpujob-dockerd.log" >&2; exit 1; }
fi
