"""S3 remotes and checkpoints in them: the typed remote model resolved from the user config or
the job spec, rclone config rendered from it (env vars, or a 0600 file), boto3 checks and the
bucket tree, and the client side of `gpujob sync-ckpt`.

May import spec/, remote/ (Connection), errors, and the agent's stdlib checkpoint modules
(one rule for what a complete checkpoint is, on the host and here). boto3 is imported inside
the functions that need it, never at import time.
"""
