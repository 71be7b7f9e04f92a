"""Multi-node on Vast: one physical cluster, one overlay network, every node joined to it.

Vast instances on different machines sit on separate NATed bridges; NCCL needs them on one
network. Vast's answer (its guide "Multi-Node training using Torch + NCCL",
docs.vast.ai/multi-node-training-using-torch-nccl, and vast-ai/vast-cli
`vastai/cli/commands/clusters.py`) is a physical cluster (offers with `cluster_id`) and an
overlay network on it: `POST /overlay/ {cluster_id, name}`, then `PUT /overlay/ {name,
instance_id}` per instance, `GET /overlay/` (`{overlay_id, name, internal_subnet,
cluster_id, instances}`), `DELETE /overlay/ {overlay_id}`. SkyPilot and dstack refuse
multi-node on Vast (dstackai/dstack#2122, skypilot `sky/clouds/vast.py`).

So `submit --up` of an N-node job (and `up --count N --one-network`) first picks the cluster whose N
cheapest offers cost least together, creates an overlay named with gpujob's tag, searches
only that cluster, and joins each instance as it is created. All or nothing: the rent
terminates every instance on a failure and `drop_overlay` deletes the overlay; `down`
deletes every overlay of ours that no instance of ours is in any more (`sweep_overlays`),
so one left by a killed command goes too. The nodes reach each other on the overlay's
subnet: the address of each there is read on the host (targets.cloud.overlay_address), as
the guide does, since no API answer names it.
"""

from __future__ import annotations

import builtins
import dataclasses
import secrets
from typing import TYPE_CHECKING, Any

from launcher.clouds.base import TAG, ProviderError

if TYPE_CHECKING:
    from launcher.clouds.base import GpuRequest, Instance


@dataclasses.dataclass
class OverlayNet:
    """The overlay one command made: its name, cluster, id and subnet as Vast answered."""

    name: str
    cluster_id: int
    overlay_id: int | None = None
    subnet: str | None = None


class VastOverlays:
    """The cluster-and-overlay half of the Vast provider (launcher.clouds.vast)."""

    name: str
    overlay: OverlayNet | None = None

    def _call(self, method: str, path: str, expected_key: str | None, **kwargs: Any) -> Any:
        raise NotImplementedError

    def query(self, request: GpuRequest) -> dict[str, Any]:
        raise NotImplementedError

    def list(self) -> list[Instance]:
        raise NotImplementedError

    def group(self, request: GpuRequest, count: int) -> GpuRequest:
        """Nodes that must share a network: the cheapest cluster with `count` offers, an
        overlay made on it, and the request narrowed to it (`cluster`). One node: as it was."""
        if count < 2:
            return request
        query = {**self.query(request), "cluster_id": {"neq": None}, "limit": 256}
        raw = self._call("POST", "/bundles/", "offers", json=query)
        clusters: dict[int, list[float]] = {}
        for offer in raw if isinstance(raw, list) else []:
            cid = offer.get("cluster_id") if isinstance(offer, dict) else None
            if isinstance(cid, int):
                clusters.setdefault(cid, []).append(float(offer.get("dph_total") or 0))
        fits = {cid: sum(sorted(prices)[:count]) for cid, prices in clusters.items()
                if len(prices) >= count}  # fmt: skip
        if not fits:
            raise ProviderError(
                f"{self.name}: no physical cluster has {count} offers of {request.label}; a "
                "multi-node job on Vast needs one cluster (its overlay network joins the nodes)",
                "ask for fewer nodes, another GPU, or try later; `vastai search offers "
                "cluster_id!=None` lists what clusters sell",
            )
        cluster = min(fits, key=lambda cid: (fits[cid], cid))
        from launcher.state.owner import owner

        net = OverlayNet(f"{TAG}{owner().short}-net-{secrets.token_hex(3)}", cluster)
        self._call("POST", "/overlay/", None, json={"cluster_id": cluster, "name": net.name})
        self.overlay = net
        for listed in self.overlays():  # its id and subnet, as Vast lists them
            if listed.get("name") == net.name:
                net.overlay_id, net.subnet = listed.get("overlay_id"), listed.get("internal_subnet")
        return dataclasses.replace(request, cluster=cluster)

    def join(self, instance_id: str) -> None:
        """The instance joins the command's overlay (none made: nothing to join)."""
        if self.overlay is not None:
            body = {"name": self.overlay.name, "instance_id": int(instance_id)}
            self._call("PUT", "/overlay/", None, json=body)

    def drop_overlay(self) -> str | None:
        """The command's overlay deleted (after its instances are terminated); a line."""
        net, self.overlay = self.overlay, None
        if net is None:
            return None
        self._delete(net.overlay_id, net.name)
        return f"deleted {self.name} overlay network {net.name} (cluster {net.cluster_id})"

    def _delete(self, overlay_id: int | None, name: str) -> None:
        body = {"overlay_id": overlay_id} if overlay_id is not None else {"overlay_name": name}
        self._call("DELETE", "/overlay/", None, json=body)

    def overlays(self) -> builtins.list[dict[str, Any]]:
        listed = self._call("GET", "/overlay/", None)
        if isinstance(listed, dict):  # an object holding the list, should Vast wrap it
            listed = listed.get("overlays") or listed.get("results") or []
        return [o for o in listed if isinstance(o, dict)] if isinstance(listed, list) else []

    def sweep_overlays(
        self, dry_run: bool, going: set[str] | frozenset[str] = frozenset()
    ) -> builtins.list[str]:
        """`down`: delete every overlay gpujob named that none of our live instances is in
        (a command killed before its own cleanup left it); another's are never touched.
        `going`: instances a dry run would terminate, counted as gone."""
        from launcher.state.owner import owner

        ours = [o for o in self.overlays()
                if str(o.get("name") or "").startswith(f"{TAG}{owner().short}-net-")]  # fmt: skip
        if not ours:
            return []
        live = {i.id for i in self.list() if i.status not in ("terminated", "terminating")}
        live -= set(going)
        lines = []
        for o in ours:
            members = {str(m.get("id") if isinstance(m, dict) else m)
                       for m in o.get("instances") or []}  # fmt: skip
            if members & live:
                continue
            verb = "would delete" if dry_run else "deleted"
            if not dry_run:
                self._delete(o.get("overlay_id"), str(o["name"]))
            lines.append(
                f"{verb} {self.name} overlay network {o['name']} (no host of ours left in it)"
            )
        return lines
