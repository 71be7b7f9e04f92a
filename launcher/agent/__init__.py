"""The agent copied to every host: runs a job detached, owns its log, reports its exit code.

Standard library only (hosts may have nothing else). Its files are shipped as they are, so
nothing here may import from the rest of `launcher`.
"""

from pathlib import Path

AGENT_SOURCE = Path(__file__).with_name("agent.py")
AGENT_FILE = "gpujob-agent.py"
"""The agent's name on a host, in each job's folder."""
INIT_LOCK_SOURCE = Path(__file__).with_name("init_lock.py")
AGENT_OS_SOURCE = Path(__file__).with_name("agent_os.py")
"""The agent's OS helpers: shipped beside it wherever it goes."""
STATES_SOURCE = Path(__file__).with_name("states.py")
"""The job states, shipped beside the agent."""
CHECKPOINT_SOURCES = tuple(
    str(Path(__file__).with_name(name))
    for name in ("ckpt_store.py", "ckpt_sync.py", "ckpt_watch.py")
)
"""Shipped beside the agent under the same names: it imports them as sibling modules."""
AGENT_MODULES = (str(AGENT_OS_SOURCE), str(STATES_SOURCE), *CHECKPOINT_SOURCES)
