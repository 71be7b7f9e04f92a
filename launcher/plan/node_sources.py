"""What a node fetches itself, not shipped from this machine: a git workdir (`workdir_git`,
SkyPilot's `workdir: {url, ref}`) cloned into the job's workdir in the place of the shipped
one, and Hugging Face repositories (`hf_mounts`, SkyPilot's `hf://` sources) downloaded
before `setup` by the node's own `hf` CLI.

The downloads run at the head of the node's setup script, so they have the job's
environment: HF_TOKEN, from `envs` or a secret, reaches the CLI that way (the CLI reads it),
never on a command line. Each failure is one line naming the field and what to do.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from launcher.plan.model import NodeLayout, RunCommand, SecretInput
from launcher.plan.sandbox import placed_at
from launcher.spec.job import JobSpec
from launcher.spec.lifecycle import hf_source

# $1 url, $2 ref ("" for the default branch), $3 the job's workdir (the clone makes it);
# $4 `token`: GIT_TOKEN on stdin, given to git by a credential helper that reads it from
# the environment (SkyPilot's GIT_TOKEN for a private https repository)
CLONE = """\
set -u
url=$1 ref=$2 dst=$3
auth=
if [ "${4:-}" = token ]; then
  GIT_TOKEN=$(cat) && export GIT_TOKEN
  auth='!f() { echo username=x-access-token; echo "password=$GIT_TOKEN"; }; f'
fi
if ! command -v git >/dev/null 2>&1; then
  echo "gpujob: workdir_git: git is not on this node; install git, or give a local workdir" >&2
  exit 1
fi
if ! git -c credential.helper= -c "credential.helper=$auth" clone --quiet -- "$url" "$dst"; then
  echo "gpujob: workdir_git: cloning $url failed (git's reason above); check the URL" \\
    "and that this node may read it" >&2
  exit 1
fi
if [ -n "$ref" ] && ! git -C "$dst" -c advice.detachedHead=false checkout --quiet "$ref" --; then
  echo "gpujob: workdir_git: $url has no ref $ref; give a branch, tag or commit it has" >&2
  exit 1
fi
echo "gpujob: workdir_git: $url at ${ref:-its default branch}: $(git -C "$dst" rev-parse HEAD)"
"""

HF_FETCH = """\
# gpujob: hf_mounts, fetched before the setup below by the node's Hugging Face CLI (HF_TOKEN,
# if the job has it, from its environment)
gpujob_hf() {  # $1 destination, $2 hf:// source, then `hf download`'s arguments
  local dst=$1 src=$2 cli
  shift 2
  if command -v hf >/dev/null 2>&1; then cli=hf
  elif command -v huggingface-cli >/dev/null 2>&1; then cli=huggingface-cli
  else
    echo "[gpujob] hf_mounts.$dst: $src: the Hugging Face CLI (hf or huggingface-cli) is not" \\
      "on this node; install it in the image or on the host (pip install -U huggingface_hub)" >&2
    exit 1
  fi
  mkdir -p "$dst"
  echo "[gpujob] hf_mounts.$dst: fetching $src with $cli"
  if ! "$cli" download "$@" --local-dir "$dst" >/dev/null; then
    echo "[gpujob] hf_mounts.$dst: fetching $src failed (its reason above); check the" \\
      "repository and revision, and HF_TOKEN (envs or --secret) for a gated or private one" >&2
    exit 1
  fi
}
"""


def clone_steps(spec: JobSpec, path: str, secrets: Mapping[str, str]) -> list[RunCommand]:
    """The clone that makes the job's workdir (none without `workdir_git`); GIT_TOKEN, a
    secret or an env of the job, goes on the clone's stdin."""
    git = spec.workdir_git
    if git is None:
        return []
    token = secrets.get("GIT_TOKEN") or spec.envs.get("GIT_TOKEN")
    given = SecretInput(content=str(token), names=("GIT_TOKEN",)) if token else None
    return [
        RunCommand(
            argv=("sh", "-c", CLONE, "sh", git.url, git.ref or "", path, *["token"] * bool(given)),
            why=f"clone {git.url}" + (f" at {git.ref}" if git.ref else "") + " as the workdir",
            hint="the node needs git and read access to the repository (GIT_TOKEN for a "
            "private https one)",
            input=given,
        )
    ]


def setup_script(
    spec: JobSpec, job_dir: str, target: NodeLayout, where: Mapping[str, str]
) -> str | None:
    """The node's setup.sh: the Hugging Face downloads, then the spec's `setup`. A relative
    destination is in the workdir (setup runs there), `~/...` in the job's HOME; on this
    machine an absolute one is inside the job's folder (plan/sandbox.py), `where` naming
    the line of one that cannot be (its key `hf:DST`)."""
    if not spec.hf_mounts:
        return spec.setup.rstrip() + "\n" if spec.setup else None
    lines = [HF_FETCH]
    for dst, src in sorted(spec.hf_mounts.items()):
        if target.sandbox and dst.startswith("/") and target.runtime != "docker":
            dst = placed_at(dst, job_dir, False, where.get(f"hf:{dst}", "the job spec"))
        lines.append(_fetch_line(dst, src))
    if spec.setup:
        lines.append("\n" + spec.setup.rstrip())
    return "\n".join(lines) + "\n"


def _fetch_line(dst: str, src: str) -> str:
    source = hf_source(src)
    args = [source.repo, "--repo-type", source.kind]
    if source.revision:
        args += ["--revision", source.revision]
    if source.path:  # a file or a folder inside the repository, kept at its path
        args += ["--include", source.path, "--include", f"{source.path}/*"]
    here = f'"$HOME"/{shlex.quote(dst[2:])}' if dst.startswith("~/") else shlex.quote(dst)
    return f"gpujob_hf {here} {shlex.quote(src)} {shlex.join(args)}"
