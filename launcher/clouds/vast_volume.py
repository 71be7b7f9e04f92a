"""Vast volumes as a job's `resources.volume` (spec/volume.py): found, or made, and attached.

Shapes from vast-ai/vast-cli `vastai/cli/commands/storage.py`: `GET /volumes?owner=me`
answers `{"volumes": [...]}`; `POST /volumes/search/` answers volume offers `{"offers":
[...]}` (fields include `machine_id`); `PUT /volumes/ {"id": <volume offer>, "size", "name"}`
creates one; `DELETE /volumes/?id=N` deletes one ("all instances using the volume must be
destroyed" first). An instance takes a volume at creation with `volume_info: {"volume_id",
"mount_path", "create_new", "size"}` (vast-api.md §3.1). A volume is local to one machine
(§7), so a volume you have narrows the offers to its machine, and a new one is made on the
machine of the offer being rented, just before the create.

Deletion, the rule the docs state: only a volume gpujob created, and only with `delete:
true`; such a volume is recorded in the hosts db (as account keys are) and deleted at the
job's release or at `down` once no instance uses it. A volume you made is never recorded.
"""

from __future__ import annotations

import builtins
import dataclasses
from typing import TYPE_CHECKING, Any

from launcher.clouds.base import ProviderError

if TYPE_CHECKING:
    from launcher.clouds.base import Offer
    from launcher.spec.volume import VolumeSpec

MADE = "vast-volume"
"""The hosts db's cloud-key namespace for volumes gpujob made and may delete."""


@dataclasses.dataclass
class VolumeUse:
    spec: VolumeSpec
    volume_id: int | None = None
    machine_id: int | None = None


class VastVolumes:
    """The volume half of the Vast provider (launcher.clouds.vast)."""

    name: str
    volume: VolumeUse | None = None
    machines: dict[str, int]
    """Offer id -> machine id, from the last searches (a new volume goes on the offer's)."""

    def _call(self, method: str, path: str, expected_key: str | None, **kwargs: Any) -> Any:
        raise NotImplementedError

    def volumes(self) -> builtins.list[dict[str, Any]]:
        found = self._call("GET", "/volumes/", "volumes", params={"owner": "me"})
        return [v for v in found if isinstance(v, dict)] if isinstance(found, list) else []

    def use_volume(self, spec: VolumeSpec) -> str:
        """The spec's volume: yours by that name (the offers narrow to its machine), or one
        to make at launch. A line saying which."""
        mine = next((v for v in self.volumes() if v.get("name") == spec.name), None)
        if mine is None:
            self.volume = VolumeUse(spec)
            return (f"vast volume {spec.name} ({spec.size_gb} GB) will be created on the "
                    f"rented host's machine, mounted at {spec.mount}")  # fmt: skip
        self.volume = VolumeUse(spec, int(mine["id"]), int(mine["machine_id"]))
        return (f"vast volume {spec.name} (id {mine['id']}) is yours: offers narrowed to its "
                f"machine {mine['machine_id']}, mounted at {spec.mount}")  # fmt: skip

    def volume_query(self) -> dict[str, Any]:
        """The offers' filter: the machine that holds the volume, if it exists."""
        if self.volume is None or self.volume.machine_id is None:
            return {}
        return {"machine_id": {"eq": self.volume.machine_id}}

    def volume_info(self, offer: Offer) -> dict[str, Any] | None:
        """`volume_info` for the create on `offer`: the volume, made first on the offer's
        machine when it does not exist yet (recorded for deletion only with `delete`)."""
        use = self.volume
        if use is None:
            return None
        if use.volume_id is None:
            machine = self.machines.get(offer.raw_id)
            query = {"machine_id": {"eq": machine}, "disk_space": {"gte": use.spec.size_gb}}
            found = self._call("POST", "/volumes/search/", "offers", json=query)
            if not isinstance(found, list) or not found:
                raise ProviderError(f"{self.name}: machine {machine} sells no volume of "
                                    f"{use.spec.size_gb} GB for {use.spec.name}")  # fmt: skip
            body = {"id": int(found[0]["id"]), "size": use.spec.size_gb, "name": use.spec.name}
            made = self._call("PUT", "/volumes/", None, json=body)
            volume_id = made.get("volume_id") if isinstance(made, dict) else None
            if volume_id is None:  # the answer's shape is not documented: find it by name
                listed = [v for v in self.volumes() if v.get("name") == use.spec.name]
                volume_id = listed[0]["id"] if listed else None
            if volume_id is None:
                raise ProviderError(f"{self.name}: volume {use.spec.name} was not created")
            use.volume_id, use.machine_id = int(volume_id), machine
            if use.spec.delete:
                from launcher.state.hosts import HostsDB

                HostsDB().add_cloud_key(MADE, str(use.volume_id))
            from launcher.say import say

            then = "deleted when its job's hosts go" if use.spec.delete else "kept"
            say(f"created vast volume {use.spec.name} (id {use.volume_id}, "
                f"{use.spec.size_gb} GB) on machine {machine}; {then}")  # fmt: skip
        return {"volume_id": use.volume_id, "mount_path": use.spec.mount,
                "create_new": False, "size": use.spec.size_gb}  # fmt: skip

    def sweep_volumes(self, dry_run: bool) -> builtins.list[str]:
        """The volumes gpujob made with `delete: true`, deleted once no instance uses them
        (the API refuses while one does, and that answer leaves it for the next `down`)."""
        from launcher.state.hosts import HostsDB
        from launcher.state.readonly import HostsView

        db, lines = (HostsView() if dry_run else HostsDB()), []  # a dry run creates nothing
        recorded = db.cloud_keys(MADE)
        if not recorded:
            return []
        listed = {str(v.get("id")): v for v in self.volumes()}
        for volume_id in recorded:
            found = listed.get(volume_id)
            if found is None:  # deleted elsewhere: forgotten here
                if not dry_run:
                    db.forget_cloud_key(MADE, volume_id)
                continue
            if found.get("instances"):
                continue
            if dry_run:
                lines.append(f"would delete vast volume {found.get('name')} (id {volume_id})")
                continue
            try:
                self._call("DELETE", "/volumes/", None, params={"id": volume_id})
            except ProviderError as error:
                lines.append(f"could not delete vast volume {volume_id}: {error.one_line()}")
                continue
            db.forget_cloud_key(MADE, volume_id)
            lines.append(f"deleted vast volume {found.get('name')} (id {volume_id}): gpujob "
                         "made it, with delete: true")  # fmt: skip
        return lines
