"""TensorBoard beside a running job, on its head node: started once in the job's own
environment (the exports of the node's `run.sh`, or inside its container), listening on the
node's loopback only, and stopped when the job ends, however it ends (finished, failed,
cancelled, timed out: its supervisor is gone). Nothing is left on the host after the job.

The host side is one `python3 -c` (the Python the agent already runs with), which prints one
JSON line: the port TensorBoard answers on, or why it does not.
"""

from __future__ import annotations

NOT_INSTALLED = 3
ENDED = 4
RECORD = "tensorboard.json"

IN_ENV = r"""
eval "$(grep -E '^export [A-Za-z_][A-Za-z0-9_]*=' "$1" | grep -v -e '^export BASH_ENV=' \
  -e '^export PATH=[$]path$')"
eval "$(grep -E '^cd ' "$1" | head -n 1)"
command -v tensorboard >/dev/null 2>&1 || exit 3
[ "$4" = check ] && exit 0
exec tensorboard --logdir "$2" --host 127.0.0.1 --port "$3"
"""
"""The job's environment (run.sh's exports but its PATH filter and BASH_ENV wrapper, which
need the lines around them), then TensorBoard: $1 run.sh, $2 the folder, $3 the port, $4
`check` (is it installed?) or `run`."""

ON_HOST = r"""
import json, os, socket, subprocess, sys, time
node_dir, logdir, in_env = sys.argv[1:4]
record = os.path.join(node_dir, "tensorboard.json")

def alive(pid):
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, TypeError, ValueError):
        return pid is not None
    return True

def answers(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False

def read(name):
    try:
        with open(os.path.join(node_dir, name)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}

old = read("tensorboard.json")
if old.get("port") and answers(old["port"]) and alive(old.get("watcher")):
    print(json.dumps(dict(old, started=False)))
    sys.exit(0)
status, config = read("status.json"), read("job.json")
supervisor = status.get("supervisor_pid")
if status.get("state") not in ("starting", "running") or not alive(supervisor):
    print(json.dumps({"state": status.get("state") or "unknown"}))
    sys.exit(4)
sock = socket.socket()
sock.bind(("127.0.0.1", 0))
port = sock.getsockname()[1]
sock.close()
run_sh = os.path.join(node_dir, "run.sh")
container = config.get("container") if config.get("runtime") == "docker" else None
wrap = ["docker", "exec", container] if container else []
args = ["bash", "-c", in_env, "tb", run_sh, logdir, str(port)]
checked = subprocess.run(wrap + args + ["check"], stdin=subprocess.DEVNULL, capture_output=True)
if checked.returncode == 3:
    sys.exit(3)
if checked.returncode != 0:  # no container any more, no bash in it: said at once
    said = (checked.stderr + checked.stdout).decode(errors="replace")[-600:]
    print(json.dumps({"failed": said or "exit %d" % checked.returncode}))
    sys.exit(1)
log = open(os.path.join(node_dir, "tensorboard.log"), "ab")
if container:  # lives in the container, so ends with it
    server = subprocess.Popen(["docker", "exec", "-d", container] + args + ["run"],
                              stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    server.wait()
    stop = "docker exec %s pkill -f 'tensorboard --logdir' || true" % container
else:
    server = subprocess.Popen(args + ["run"], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                              start_new_session=True)
    stop = "kill -TERM -- -%d 2>/dev/null || true" % server.pid
watch = ("while kill -0 %d 2>/dev/null && { [ -n \"$2\" ] || kill -0 %d 2>/dev/null; }; "
         "do sleep 2; done; %s; rm -f \"$1\"") % (int(supervisor), server.pid, stop)
watcher = subprocess.Popen(["bash", "-c", watch, "watch", record, container or ""],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, start_new_session=True)
done = {"port": port, "watcher": watcher.pid, "logdir": logdir, "started": True}
tmp = record + ".tmp"
with open(tmp, "w") as f:
    json.dump(done, f)
os.replace(tmp, record)
deadline = time.monotonic() + 90
while not answers(port):
    if (not container and server.poll() is not None) or time.monotonic() > deadline:
        with open(os.path.join(node_dir, "tensorboard.log"), "rb") as f:
            tail = f.read()[-600:].decode(errors="replace")
        print(json.dumps({"failed": tail}))
        sys.exit(1)
    time.sleep(0.3)
print(json.dumps(done))
"""


def start_argv(python: str, node_dir: str, logdir: str) -> list[str]:
    """The host's command: TensorBoard over `logdir` (relative to the job's workdir) beside
    the job of `node_dir`, started unless it answers already."""
    return [python, "-c", ON_HOST, node_dir, logdir, IN_ENV]
