"""`resources.volume:` in a job spec: a Vast volume attached to the host `submit --up` rents.

A Vast volume is disk on one machine that outlives the instance (vast-api.md §7; vast-cli
`volume create|delete|list`). Named here, it is found among your volumes (then the offers
narrow to its machine) or, when you have none of that name, created on the cheapest
offer's machine, `size_gb` large, and mounted at `mount`. It is deleted only when gpujob
created it AND `delete: true`: at the job's end (its hosts released) or at `gpujob down`,
once no instance uses it. A volume you made yourself is never deleted. One machine holds
it, so it is for a job of one node.
"""

from __future__ import annotations

from pydantic import Field

from launcher.spec.limits import StrictModel

VOLUME_NAME = r"^[A-Za-z][A-Za-z0-9_-]{0,63}$"


class VolumeSpec(StrictModel):
    name: str = Field(pattern=VOLUME_NAME, description="The Vast volume's name (yours, or made).")
    size_gb: int = Field(default=50, ge=1, le=65536, description="GB, when gpujob creates it.")
    mount: str = Field(
        default="/data", pattern=r"^/[^\s:]*$", description="Where the host sees it."
    )
    delete: bool = Field(
        default=False,
        description="Delete it when the job's hosts go (and at `gpujob down`), only if "
        "gpujob created it; a volume you had is never deleted.",
    )
