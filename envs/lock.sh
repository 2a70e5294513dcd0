#!/usr/bin/env bash
# Write envs/requirements.lock: resolve envs/requirements.in in a fresh venv (or take the pins
# of the file given as $1, e.g. the current lock, to re-hash without resolving), then let pip
# report the exact file it would install for each pin and record its sha256 (envs/hash_lock.py).
# Works in its own temporary directory, removed on exit. Needs the package index. setuptools
# stays pinned (freeze --all): `pip install -e .` builds without isolation.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$python" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --quiet --upgrade pip
pip=("$tmp/venv/bin/python" -m pip)
if [[ $# -ge 1 ]]; then
  pins=$1
else
  "${pip[@]}" install --quiet -r envs/requirements.in
  "${pip[@]}" freeze --all --exclude pip > "$tmp/pins.txt"
  pins=$tmp/pins.txt
fi
"${pip[@]}" install --quiet --dry-run --ignore-installed --no-deps --report "$tmp/report.json" -r "$pins"
"$python" envs/hash_lock.py "$tmp/report.json" "$tmp/requirements.lock"
mv "$tmp/requirements.lock" envs/requirements.lock
