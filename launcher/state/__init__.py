"""The local state: one sqlite file under the state dir holding jobs (db.py) and rented hosts
(hosts.py), and what they cost (costs.py). A cache of what the agents and the clouds say,
never the truth over them. Imports only `launcher.paths`, `launcher.errors` and the agent's
job states."""
