"""The Lambda fake's firewall rulesets (OpenAPI 1.10 `/firewall-rulesets`), a mixin of LambdaApi.

Per-region rulesets, attached to instances only at launch (`firewall_rulesets: [{id}]`, the
same region), their `instance_ids` the instances still attached (a terminated one until it
is gone); deleting one still attached answers 400 `firewall-rulesets/firewall-ruleset-in-use`.
The global ruleset is the account-wide rules `/firewall-rules` also serves (one list here;
the document calls both the rules "across all regions" [U: whether they are one list]).
The lab has no packet filter: rules are recorded and echoed, never enforced.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from infra.fakes import lambda_catalog as catalog
from infra.fakes.lambda_checks import bad, body_of, check_firewall_rule, check_id, data
from infra.fakes.lambda_state import fail, new_id

if TYPE_CHECKING:
    from infra.fakes.lambda_api import LambdaApi
    from infra.fakes.server import Reply, Request

GLOBAL_NAME = "Global Firewall Rules"


class LambdaRulesets:
    def route_rulesets(self: LambdaApi, base: str) -> None:
        """Registered in this order: `global` before `{ruleset_id}` (the first match wins)."""
        for method, path, op, handler in [
            ("GET", "/firewall-rulesets", "list_firewall_rulesets", self.list_rulesets),
            ("POST", "/firewall-rulesets", "create_firewall_ruleset", self.create_ruleset),
            ("GET", "/firewall-rulesets/global", "get_global_ruleset", self.get_global),
            ("PATCH", "/firewall-rulesets/global", "update_global_ruleset", self.patch_global),
            ("GET", "/firewall-rulesets/{ruleset_id}", "get_firewall_ruleset", self.get_ruleset),
            ("PATCH", "/firewall-rulesets/{ruleset_id}", "update_firewall_ruleset",
             self.patch_ruleset),
            ("DELETE", "/firewall-rulesets/{ruleset_id}", "delete_firewall_ruleset",
             self.delete_ruleset),
        ]:  # fmt: skip
            self.route(method, base + path, op, handler)

    def ruleset_json(self: LambdaApi, ruleset: dict[str, Any]) -> dict[str, Any]:
        entry = {"id": ruleset["id"]}
        attached = [i.id for i in self.books.instances.values()
                    if entry in i.firewall_rulesets and not i.host_gone]  # fmt: skip
        return {**ruleset, "region": catalog.region_json(ruleset["region"]),
                "instance_ids": attached}  # fmt: skip

    def check_launch_rulesets(self: LambdaApi, entries: Any, region: str) -> None:
        """Launch's `firewall_rulesets`: each an existing ruleset of the launch's region."""
        if not isinstance(entries, list):
            raise bad("firewall_rulesets must be a list of {id}.")
        for entry in entries:
            named = str(entry.get("id")) if isinstance(entry, dict) else ""
            found = self.books.rulesets.get(named)
            if found is None:
                raise fail("global/object-does-not-exist", f"Firewall ruleset {entry!r} not found.")
            if found["region"] != region:
                raise bad(f"Firewall ruleset {found['id']} is in {found['region']}, not {region}.")

    def _rules(self: LambdaApi, rules: Any) -> list[dict[str, Any]]:
        if not isinstance(rules, list):
            raise bad("rules must be a list of firewall rules.")
        for rule in rules:
            check_firewall_rule(rule)
        return rules

    def _ruleset(self: LambdaApi, ruleset_id: str) -> dict[str, Any]:
        found = self.books.rulesets.get(check_id(ruleset_id))
        if found is None:
            raise fail("global/object-does-not-exist",
                       "Firewall ruleset does not exist or you do not have permission to "
                       "access it.")  # fmt: skip
        return found

    def list_rulesets(self: LambdaApi, request: Request) -> Reply:
        with self.lock:
            return data([self.ruleset_json(r) for r in self.books.rulesets.values()])

    def create_ruleset(self: LambdaApi, request: Request) -> Reply:
        body = body_of(request)
        name, region = body.get("name"), body.get("region")
        if not isinstance(name, str) or not 1 <= len(name) <= 64:
            raise bad("name must be 1 to 64 characters.")
        if region not in catalog.REGIONS:
            raise bad(f"Unknown region: {region!r}.")
        rules = self._rules(body.get("rules"))
        with self.lock:
            ruleset = {"id": new_id(), "name": name, "region": region, "rules": rules,
                       "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")}  # fmt: skip
            self.books.rulesets[ruleset["id"]] = ruleset
            return data(self.ruleset_json(ruleset))

    def get_ruleset(self: LambdaApi, request: Request, ruleset_id: str) -> Reply:
        with self.lock:
            return data(self.ruleset_json(self._ruleset(ruleset_id)))

    def patch_ruleset(self: LambdaApi, request: Request, ruleset_id: str) -> Reply:
        body = body_of(request)
        with self.lock:
            ruleset = self._ruleset(ruleset_id)
            if "name" in body:
                if not isinstance(body["name"], str) or not 1 <= len(body["name"]) <= 64:
                    raise bad("name must be 1 to 64 characters.")
                ruleset["name"] = body["name"]
            if "rules" in body:
                ruleset["rules"] = self._rules(body["rules"])
            return data(self.ruleset_json(ruleset))

    def delete_ruleset(self: LambdaApi, request: Request, ruleset_id: str) -> Reply:
        with self.lock:
            ruleset = self._ruleset(ruleset_id)
            if self.ruleset_json(ruleset)["instance_ids"]:
                raise fail("firewall-rulesets/firewall-ruleset-in-use")
            del self.books.rulesets[ruleset["id"]]
            return data({})

    def get_global(self: LambdaApi, request: Request) -> Reply:
        with self.lock:
            return data({"id": "global", "name": GLOBAL_NAME, "rules": self.books.firewall_rules})

    def patch_global(self: LambdaApi, request: Request) -> Reply:
        body = body_of(request)
        with self.lock:
            if "rules" in body:
                self.books.firewall_rules = self._rules(body["rules"])
            return data({"id": "global", "name": GLOBAL_NAME, "rules": self.books.firewall_rules})
