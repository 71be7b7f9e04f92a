"""Setup on every node before any run (skypilot-task.md §4.4): with `nodes: N` and `setup:`,
each node reports its setup's exit code to node 0, and no node starts its run until node 0
has heard every node succeed. A failed setup ends every node, naming the node that failed.

The barrier runs the node's setup itself (`setup-barrier.py ... bash setup.sh`), so node 0
listens before its own setup starts: from then on a refused connection means node 0 has
ended (or not started yet: the nodes start one after another), and a node gives up after
GRACE_S of them (`bound_s` if shorter), naming node 0. Node 0 waits for the others at most
`bound_s` (the run's rdzv_timeout_s) after its own setup ends, then stops every node naming
the ones it did not hear: a host gone mid-setup ends the job (and its billing, with
autostop) instead of hanging it. TCP keepalive tells a waiting node that node 0's host
has gone.

Node 0 listens on the rendezvous port, which the reach check proved every host can dial,
and closes it before its run starts: the clients hang up first, so node 0's side leaves no
TIME_WAIT behind and torchrun (or the job's own) can bind the port again at once.
Stdlib only: it runs with the job's Python (inside the container under Docker).
"""

from __future__ import annotations

from launcher.plan.model import WriteFile

BARRIER_FILE = "setup-barrier.py"
GRACE_S = 60
"""How long a node tries to reach node 0 after its setup: the nodes' start skew."""

BARRIER = f"""\
import socket, subprocess, sys, time
rank, nodes, head = sys.argv[1], int(sys.argv[2]), sys.argv[3]
port, bound, setup = int(sys.argv[4]), float(sys.argv[5]), sys.argv[6:]
family = socket.AF_INET6 if ":" in head else socket.AF_INET
def say(text):
    print(f"[gpujob] setup: {{text}}", flush=True)
if rank != "0":
    code = subprocess.call(setup)
    grace = min({GRACE_S}, bound)
    said, deadline = False, time.monotonic() + grace
    while True:
        try:
            conn = socket.create_connection((head, port), timeout=5)
            break
        except OSError as err:
            if time.monotonic() > deadline:
                say(f"node {{rank}}: node 0 did not answer at {{head}}:{{port}} in {{grace:g}} s "
                    f"({{err.strerror or err}}): it has ended or cannot be reached; see node "
                    "0's log. No run starts")
                sys.exit(code or 1)
            if not said:
                say(f"node {{rank}} done (exit {{code}}); waiting for node 0 at {{head}}:{{port}}")
                said = True
            time.sleep(0.5)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 3)):
        if hasattr(socket, name):
            conn.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)
    conn.settimeout(None)
    try:
        conn.sendall(f"{{rank}} {{code}}\\n".encode())
        answer = conn.makefile().readline().strip()
    except OSError:
        answer = ""
    conn.close()
    if answer == "go":
        sys.exit(0)
    say(answer.removeprefix("stop ") or f"node {{rank}}: node 0 ended (or its host went away) "
        "before every node's setup was done; see node 0's log. No run starts")
    sys.exit(code or 1)
server = socket.socket(family)
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    server.bind((head, port))
except OSError as err:
    sys.exit(f"[gpujob] setup: node 0 cannot listen on {{head}}:{{port}} ({{err.strerror}})")
server.listen(nodes)
code = subprocess.call(setup)
codes, conns, deadline = {{0: code}}, [], time.monotonic() + bound
while len(codes) < nodes and time.monotonic() < deadline:
    server.settimeout(max(0.1, min(60, deadline - time.monotonic())))
    try:
        conn = server.accept()[0]
    except socket.timeout:
        waiting = [str(r) for r in range(nodes) if r not in codes]
        if time.monotonic() < deadline:
            say(f"waiting for setup on node(s) {{', '.join(waiting)}}")
        continue
    conn.settimeout(30)
    try:
        line = conn.makefile().readline().split()
        codes[int(line[0])] = int(line[1])
        conns.append(conn)
    except (OSError, ValueError, IndexError):
        conn.close()
server.close()
failed = [(r, c) for r, c in sorted(codes.items()) if c != 0]
missing = [str(r) for r in range(nodes) if r not in codes]
if failed:
    named = ", ".join(f"node {{r}} (exit {{c}})" for r, c in failed)
    answer = f"stop failed on {{named}}: no node starts its run"
elif missing:
    answer = (f"stop node 0 did not hear node(s) {{', '.join(missing)}} finish setup within "
              f"{{bound:g}} s of its own (their host may be gone; see their logs; run."
              "rdzv_timeout_s sets the bound): no node starts its run")
else:
    answer = "go"
say(answer.removeprefix("stop ") if answer != "go" else
    f"done on all {{nodes}} nodes; starting the run")
for conn in conns:
    try:
        conn.sendall(f"{{answer}}\\n".encode())
        conn.recv(1)
    except OSError:
        pass
    conn.close()
sys.exit(0 if answer == "go" else (code or 1))
"""


def barrier_file(node_dir: str) -> WriteFile:
    return WriteFile(path=f"{node_dir}/{BARRIER_FILE}", content=BARRIER)


def barrier_argv(
    python: str, node_dir: str, rank: int, nodes: int, head: str, port: int, bound_s: int
) -> list[str]:
    """The words before the setup's own command, which run.sh appends: the barrier runs it."""
    return [python, f"{node_dir}/{BARRIER_FILE}", str(rank), str(nodes), head, str(port),
            str(bound_s)]  # fmt: skip
