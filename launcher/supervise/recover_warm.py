"""The recovery controller's modules loaded while it only watches, not once a host is lost.

gpujob imports its heavy modules where they are used (the CLI starts fast), so the first
recovery of a controller used to import the launch, the rent, the plan, the S3 client,
the progress display and the provider right after the loss: about a second of a 2-core
host's CPU (more under load) between "loss seen" and the rent, paid by every recovery.
A controller lives as long as its job, so it pays that once at its start instead (in its
own thread, before its first look at the job: two threads importing the same modules
could meet in a cycle of import locks).
"""

from __future__ import annotations

import contextlib
import importlib

RECOVERY_MODULES = (
    "launcher.supervise.recover_partial",
    "launcher.supervise.recover_steps",
    "launcher.supervise.recover_notify",
    "launcher.jobs.launch",
    "launcher.spec.load",
    "launcher.targets.cloud.target",
    "launcher.targets.cloud.hosts",
    "launcher.targets.cloud.before_rent",
    "launcher.targets.cloud.rent",
    "launcher.targets.cloud.firewall",
    "launcher.targets.placement",
    "launcher.storage.s3",
    "launcher.storage.sync",
    "launcher.storage.preflight",
    "launcher.storage.probes",
    "launcher.plan.build",
    "launcher.runtime.apply",
    "launcher.clouds.registry",
    "launcher.remote.hosts",
    "boto3",
    "rich.progress",
    "rich.table",
)
"""What a recovery imports between the loss and the restart (its own imports inside
functions, as the CLI's rule asks); one that is missing is left to the recovery to say."""


def warm() -> None:
    """Import RECOVERY_MODULES (under a second, once per controller)."""
    for name in RECOVERY_MODULES:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
