"""The API keys the fakes accept. Not secrets: they unlock nothing but the local fakes, and
tests and docs quote them. Shaped like the real ones (Lambda: `secret_<name>_<hex>.<hex>`;
Vast: 64 hex digits) so that a client's key validation, if any, sees a plausible value.
"""

LAMBDA_API_KEY = "secret_gpujob-lab_0f1e2d3c4b5a69788796a5b4c3d2e1f0.9a8b7c6d5e4f3021"
# Every call with this key gets 403 `global/account-inactive` (§7.1 of the Lambda reference).
LAMBDA_INACTIVE_KEY = "secret_gpujob-lab-inactive_00000000000000000000000000000000.0000"

VAST_API_KEY = "6a7b1c0d9e8f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3"
# A scoped key with read permissions only: writes get 403 (docs: authentication.mdx).
VAST_READONLY_KEY = "0000000000000000000000000000000000000000000000000000000000000001"
