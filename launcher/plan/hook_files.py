"""The job's lifecycle hooks (`hooks`, SkyPilot's `config.hooks`) as the agent of node 0
runs them (agent/lifecycle_hooks.py): one script each, beside run.sh, with the job's
variables (as run.sh exports them, never its secrets) and its workdir as the current
folder, and their events and timeouts in job.json.

Node 0 only: SkyPilot's hooks run on the cluster's head, and a `git push` or an upload
run once, not once per node.
"""

from __future__ import annotations

import shlex

from launcher.plan.model import WriteFile
from launcher.spec.job import JobSpec

HOOKS_DIR = "hooks"


def hook_config(spec: JobSpec, rank: int) -> list[dict[str, object]] | None:
    """job.json's `lifecycle_hooks`: each hook's script (in the node's folder), events and
    timeout."""
    if not spec.hooks or rank != 0:
        return None
    return [{"script": f"{HOOKS_DIR}/{index}.sh", "events": list(hook.events),
             "timeout": hook.timeout} for index, hook in enumerate(spec.hooks)]  # fmt: skip


def hook_files(spec: JobSpec, node_dir: str, workdir: str, env: dict[str, str], rank: int
               ) -> list[WriteFile]:  # fmt: skip
    if not spec.hooks or rank != 0:
        return []
    head = ["#!/usr/bin/env bash", "# gpujob lifecycle hook: run by the agent at the event in $1"]
    head += [f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())]
    head += [f"cd {shlex.quote(workdir)}", ""]
    return [WriteFile(path=f"{node_dir}/{HOOKS_DIR}/{index}.sh",
                      content="\n".join(head) + hook.run.rstrip() + "\n", mode=0o700)
            for index, hook in enumerate(spec.hooks)]  # fmt: skip
