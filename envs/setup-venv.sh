#!/usr/bin/env bash
# Make .venv for this clone, installing from envs/requirements.lock.
#
# The pinned packages (about 6 GB with torch) are installed once into a cache
# directory keyed by the lock's hash and the Python version, and shared by every
# clone on the machine; .venv is a small per-clone venv that sees them through a
# .pth file and holds this clone's editable `taskgeom` plus `snakemake`, `dvc`,
# `pytest` and `ruff` launchers. On a fresh machine the same command builds everything.
set -euo pipefail
cd "$(dirname "$0")/.."
# the base interpreter, never .venv's own (under make, .venv/bin leads PATH, and .venv is
# rebuilt below when the lock changes)
python=$("${PYTHON:-python3}" -c 'import sys; print(sys._base_executable)')
lock=envs/requirements.lock
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
key=$( (cat "$lock"; echo "$pyver") | sha256sum | cut -c1-16)
cache=${TASKGEOM_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/taskgeom/venvs}
shared="$cache/$key"

# whole: marked complete (the last step of its build) and its interpreter runs
whole() { [[ -f "$shared/.complete" ]] && "$shared/bin/python" -c '' 2>/dev/null; }

if ! whole; then
  # One build at a time per machine: every setup takes this lock (held until the script exits,
  # released by the kernel if it is killed) and looks again once it has it, so a setup started
  # while another builds waits for it and uses its result. A venv's scripts hold its absolute
  # path, so the build happens in place, under the lock; .complete is written last, and anything
  # there without it (a build that was killed or failed) is removed and built again.
  mkdir -p "$cache"
  exec 9>>"$cache/$key.lock"
  "$python" -c 'import fcntl, sys
try:
    fcntl.flock(9, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    print(f"waiting for the setup that is building {sys.argv[1]}", file=sys.stderr, flush=True)
    fcntl.flock(9, fcntl.LOCK_EX)' "$shared"
  if ! whole; then
    echo "installing $lock into $shared (once per machine)" >&2
    rm -rf "$shared"
    "$python" -m venv "$shared"
    # every file checked against the lock's sha256 (envs/lock.sh); the venv's own pip does it
    "$shared/bin/python" -m pip install -qq --require-hashes -r "$lock"
    touch "$shared/.complete"
  fi
  exec 9>&-
fi

site=$("$shared/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [[ ! -x .venv/bin/python || "$(cat .venv/.shared 2>/dev/null)" != "$shared" ]]; then
  rm -rf .venv
  "$python" -m venv --without-pip .venv
  local_site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "import site; site.addsitedir('$site')" > "$local_site/00-taskgeom-shared.pth"
  ln -s "$shared/bin/ruff" .venv/bin/ruff  # a binary; `python -m ruff` would look for it here
  echo "$shared" > .venv/.shared
fi
if ! .venv/bin/python -c 'import taskgeom' 2>/dev/null; then
  .venv/bin/python -m pip install -qq --no-deps --no-build-isolation -e .
fi
# the launchers, rewritten each time; `dvc` writes its YAML files atomically (pipeline/dvc_atomic.py),
# `taskgeom` hands its command to a stage server when TASKGEOM_SERVER names one (pipeline/entry.py)
for tool in snakemake:snakemake dvc:taskgeom.pipeline.dvc_atomic pytest:pytest taskgeom:taskgeom; do
  printf '#!/bin/sh\nexec "$(dirname "$0")/python" -m %s "$@"\n' "${tool#*:}" > ".venv/bin/${tool%%:*}"
  chmod +x ".venv/bin/${tool%%:*}"
done
