"""The script that makes a job environment (bare runtime with an image): with uv where the host
has it, with venv and pip where it has not, from the same pins and the same package sources.

uv reads no pip.conf, so the script translates the host's pip configuration (its files and
PIP_* variables: index, extra indexes, find-links, constraints, certificate) into uv's
variables first, and asks pip's own strategy (`unsafe-best-match`: the best version over all
indexes, not the first index that has the name). An index that does not answer from the
host (an offline host whose pip keeps PyPI as its default) is left out and said, as pip
skips it after its retries; uv would stop at it. A host without uv gets one line saying pip
is used and how to get uv there. Output goes to stderr, streamed as it comes, so the user
sees what is installed and how many packages are left.
"""

from __future__ import annotations

import shlex
from pathlib import PurePosixPath

UV_HOME_PATH = ".local/bin/uv"
"""Where `gpujob up` puts this machine's uv on a host that has none (as it does rclone)."""

PIP_TO_UV = """import configparser, os, shlex, socket, sys
from urllib.parse import unquote, urlparse
home = os.path.expanduser("~")
xdg = os.environ.get("XDG_CONFIG_DIRS", "/etc/xdg").split(":")
files = [os.path.join(d, "pip", "pip.conf") for d in xdg] + ["/etc/pip.conf",
         os.path.join(home, ".pip", "pip.conf"), os.path.join(home, ".config", "pip", "pip.conf")]
files += [os.environ["PIP_CONFIG_FILE"]] if os.environ.get("PIP_CONFIG_FILE") else []
conf = configparser.RawConfigParser()
conf.read(files)
def pip(key):
    env = os.environ.get("PIP_" + key.upper().replace("-", "_"))
    if env:
        return env
    for section in ("install", "global"):
        if conf.has_option(section, key):
            return conf.get(section, key)
    return None
PROXIES = ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")
def answers(url):
    parts = urlparse(url)
    if parts.scheme == "file":
        return os.path.isdir(unquote(parts.path))
    if any(os.environ.get(name) for name in PROXIES):
        return True  # reached through a proxy: not for us to dial
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=3).close()
        return True
    except OSError:
        return False
out = {}
for key, name, sep in (("find-links", "UV_FIND_LINKS", ","), ("constraint", "UV_CONSTRAINT", " "),
                       ("cert", "SSL_CERT_FILE", " ")):
    if pip(key):
        out[name] = sep.join(pip(key).split())
indexes = (pip("index-url") or "https://pypi.org/simple").split()[:1]
indexes += (pip("extra-index-url") or "").split()
if (pip("no-index") or "").lower() in ("1", "true", "yes", "on"):
    indexes = []
kept = [url for url in indexes if answers(url)]
for url in indexes:
    if url not in kept:
        where = urlparse(url)
        print("[gpujob] package index %s://%s%s does not answer here: left out, as pip skips it"
              % (where.scheme, where.hostname or "", where.path), file=sys.stderr)
if kept:
    out["UV_INDEX_URL"] = kept[0]
    if kept[1:]:
        out["UV_EXTRA_INDEX_URL"] = " ".join(kept[1:])
for name, value in out.items():
    print("export %s=%s" % (name, shlex.quote(value)))
print("uv_no_index=%s" % ("" if kept else "1"))  # a flag only: uv reads no UV_NO_INDEX"""


HEARTBEAT = """# every 5 s until the install ends: how many packages are ready, of how many.
# The sleep holds none of the script's output: the loop's kill leaves it running, and the
# SSH command would wait for it (up to 5 s after the environment is ready).
heartbeat() {
  local base
  base=$(ready)
  ( exec 9>&-  # not the environment's lock: it ends with the build
    while sleep 5 >/dev/null 2>&1; do
      echo "[gpujob] job environment: $(( $(ready) - base )) of $2 packages $1 (${SECONDS} s)" >&2
    done ) &
  beat=$!
  trap 'kill "$beat" 2>/dev/null || true' EXIT
}"""


def env_script(env_dir: str, python: str, requirements: str, packages: int) -> str:
    """`packages`: how many pins requirements.txt holds, said before the install starts."""
    env = shlex.quote(env_dir)
    py = shlex.quote(python)
    near_python = shlex.quote(str(PurePosixPath(python).parent / "uv"))
    reqs = shlex.quote(requirements)
    return "\n".join(
        [
            "set -euo pipefail",
            f"env={env}",
            'if [ -f "$env/.gpujob-ready" ]; then exit 0; fi',
            'mkdir -p "$(dirname "$env")"',
            'exec 9>"$env.lock"',
            "flock 9",
            'if [ -f "$env/.gpujob-ready" ]; then exit 0; fi',
            'rm -rf "$env"',
            HEARTBEAT,
            "uv=",
            f'for u in "${{GPUJOB_UV:-}}" "$(command -v uv || true)" "$HOME/{UV_HOME_PATH}" '
            f"{near_python}; do",
            '  if [ -n "$u" ] && [ -x "$u" ] && "$u" --version >/dev/null 2>&1; then',
            "    uv=$u; break",
            "  fi",
            "done",
            'if [ -n "$uv" ]; then',
            f'  echo "[gpujob] creating the job environment $env with uv: {packages} packages '
            '(first use of these pins)" >&2',
            f"  eval \"$({py} - <<'PIP_TO_UV'",
            PIP_TO_UV,
            "PIP_TO_UV",
            ')"',
            "  export UV_INDEX_STRATEGY=unsafe-best-match UV_NO_PROGRESS=1",
            f'  "$uv" venv --quiet --python {py} "$env" >&2',
            '  cache=$("$uv" cache dir 2>/dev/null || echo /nonexistent)',
            '  ready() { { find "$cache/archive-v0" -mindepth 1 -maxdepth 1 -newer "$env.lock" '
            "2>/dev/null || true; } | wc -l; }",
            f"  heartbeat unpacked {packages}",
            '  "$uv" pip install ${uv_no_index:+--no-index} --python "$env/bin/python" '
            f"-r {reqs} >&2",
            "else",
            "  echo '[gpujob] no uv on this host: making the job environment with pip (slower;"
            ' "pip install uv" there, or uv in ~/.local/bin, makes it fast)\' >&2',
            f'  echo "[gpujob] creating the job environment $env with pip: {packages} packages '
            '(first use of these pins)" >&2',
            f'  {py} -m venv "$env" >&2',
            "  ready() { { find \"$env\"/lib/python*/site-packages -maxdepth 1 -name '*.dist-info' "
            "2>/dev/null || true; } | wc -l; }",
            f"  heartbeat installed {packages}",
            '  "$env/bin/python" -m pip install --progress-bar off --disable-pip-version-check '
            f"--no-input -r {reqs} >&2",
            "fi",
            'touch "$env/.gpujob-ready"',
        ]
    )


if __name__ == "__main__":  # the Makefile's venv: `eval "$(python3 launcher/plan/env_build.py)"`
    exec(PIP_TO_UV)
