"""A SkyPilot job group on two lab hosts through the real CLI (`--on ta,tb`: one host per
task, in task order), each task in its container: the client task is given the server task's
host address as SKYPILOT_JOBGROUP_HOST_SERVER and fetches a message from it over the lab
network."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import test_remote_jobs as remote
from labtools import GPUJOB

pytestmark = pytest.mark.lab
docker_lab, env = remote.docker_lab, remote.env  # the two docker hosts as `ta`, `tb`

GROUP = """\
name: lab-pair
execution: parallel
---
name: server
resources:
  image_id: docker:{image}
run: |
  echo "hello over the lab" > msg.txt
  python3 -c "import http.server as h; \\
    h.HTTPServer(('0.0.0.0', 18931), h.SimpleHTTPRequestHandler).handle_request()"
---
name: client
resources:
  image_id: docker:{image}
run: |
  echo "server at $SKYPILOT_JOBGROUP_HOST_SERVER"
  for i in $(seq 150); do
    python3 -c "import urllib.request as u; \\
      url = 'http://$SKYPILOT_JOBGROUP_HOST_SERVER:18931/msg.txt'; \\
      print('got:', u.urlopen(url).read().decode().strip())" 2>/dev/null && exit 0
    sleep 0.2
  done
  exit 1
"""


def test_a_group_on_two_hosts_reaches_its_server_task_by_the_address_it_is_given(
    tmp_path: Path, env: dict[str, str], docker_lab: remote.DockerLab
) -> None:
    from infra.lab import job_image, registry

    (tmp_path / "group.yaml").write_text(
        GROUP.format(image=f"{registry.address()}/{job_image.TAG}"))  # fmt: skip
    done = subprocess.run([GPUJOB, "submit", "group.yaml", "--on", "ta,tb"], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-3000:]
    server = docker_lab.hosts[0].address
    assert f"[client] server at {server}" in done.stdout.splitlines()
    assert "[client] got: hello over the lab" in done.stdout.splitlines()
