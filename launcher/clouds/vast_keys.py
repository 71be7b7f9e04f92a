"""Vast's account SSH keys: registered once, removed by `down` when gpujob added them.

Vast copies account keys only into instances created after they were added (vast-api.md
§5), so the key is registered before a create; it is looked for first, by its text in
whichever field the answer names it (KEY_FIELDS), under a lock (`up --count N` creates
from N threads). A key gpujob added is recorded in the hosts db; `down` removes it once no
host of ours is left on Vast. A key the user registered before is never touched.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from launcher.clouds.base import ProviderError

if TYPE_CHECKING:
    from launcher.clouds.http import ApiClient
    from launcher.state.hosts import HostsDB

KEY_FIELDS = ("public_key", "ssh_key", "key")
"""Where a listed account key's text is: `public_key` in Vast's OpenAPI (`GET /api/v0/ssh/`,
"id, user_id, public_key"), `ssh_key` in vast-cli's test of `show ssh-keys`, `key` in an
answer issue 30 saw: reading only one field registered the key again on every create."""
_KEYS_LOCK = threading.Lock()


class VastKeys:
    """The account-key half of the Vast provider (launcher.clouds.vast)."""

    name: str
    api: ApiClient
    keys_seen: set[str]
    """Public keys known to be registered, asked once per provider."""

    def _call(self, method: str, path: str, expected_key: str | None, **kwargs: Any) -> Any:
        raise NotImplementedError

    def ensure_ssh_key(self, public_key: str) -> None:
        """Registered once: the account's keys are listed and the key added only if none
        holds it, under a lock, since `up --count N` launches from N threads. What gpujob
        added is recorded, for `down` to remove (`remove_added_keys`)."""
        wanted = _key_words(public_key)
        with _KEYS_LOCK:
            if wanted in self.keys_seen:
                return
            if not any(_key_words(text) == wanted for _, text in self._account_keys()):
                answer = self._call("POST", "/ssh/", None, json={"ssh_key": public_key.strip()})
                key_id = _added_id(answer) or next(
                    (i for i, text in self._account_keys() if _key_words(text) == wanted), None
                )
                if key_id:
                    from launcher.state.hosts import HostsDB

                    HostsDB().add_cloud_key(self.name, key_id)
            self.keys_seen.add(wanted)

    def _account_keys(self) -> list[tuple[str, str]]:
        """(id, text) of each account key: a list of records, or one under `ssh_keys`
        (vast-cli reads both); the text under any of KEY_FIELDS."""
        body = self._call("GET", "/ssh/", None)
        records = body.get("ssh_keys", body.get("keys", [])) if isinstance(body, dict) else body
        if not isinstance(records, list):
            from launcher.clouds.http import shape_error

            raise shape_error(self.name, "GET /ssh/", "a list of keys")
        return [(str(r.get("id") or ""), _key_text(r)) for r in records if isinstance(r, dict)]

    def remove_added_keys(self, db: HostsDB, dry_run: bool = False) -> list[str]:
        """The account keys gpujob registered, removed (`down`, once no host of ours is left
        here): a key the user had before is never one of them. One line each."""
        said = []
        for key_id in db.cloud_keys(self.name):
            if dry_run:
                said.append(f"would remove the SSH key gpujob registered with vast (id {key_id})")
                continue
            try:
                self.api.call("DELETE", f"/ssh/{key_id}/")
            except ProviderError as error:
                if "no_such_ssh_key" not in error.message and "not_found" not in error.message:
                    said.append(f"could not remove the SSH key gpujob registered with vast "
                                f"(id {key_id}): {error.one_line()}")  # fmt: skip
                    continue
            db.forget_cloud_key(self.name, key_id)
            said.append(f"removed the SSH key gpujob registered with vast (id {key_id})")
        return said


def _key_words(text: str) -> str:
    """A public key's type and body: its comment may differ between copies."""
    return " ".join(text.split()[:2])


def _key_text(record: dict[str, Any]) -> str:
    for field in KEY_FIELDS:
        if isinstance(record.get(field), str):
            return str(record[field])
    return ""


def _added_id(answer: Any) -> str | None:
    """The new key's id: `{"success": true, "key": {"id": ...}}` (vast-cli's live test), or a
    bare `{"id": ...}` (its mocked one)."""
    if not isinstance(answer, dict):
        return None
    record = answer.get("key")
    found = (record if isinstance(record, dict) else answer).get("id")
    return str(found) if found not in (None, "") else None
