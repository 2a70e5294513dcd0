#!/usr/bin/env bash
# Install Debian's SLURM and MUNGE packages for the one-node cluster that the `slurm`
# tests bring up (tests/cluster.py). The packages' own services are not started: the
# tests run their daemons from a temporary directory and stop them afterwards.
set -euo pipefail
packages=(slurmctld slurmd slurm-client munge)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ ${#missing[@]} -eq 0 ]] && exit 0
sudo=()
[[ $(id -u) -eq 0 ]] || sudo=(sudo)
echo "installing ${missing[*]} from Debian's packages" >&2
# policy-rc.d exit 101 tells the packages' scripts not to start their services.
policy=/usr/sbin/policy-rc.d
had_policy=0; [[ -e $policy ]] && had_policy=1
[[ $had_policy -eq 1 ]] || { printf '#!/bin/sh\nexit 101\n' | "${sudo[@]}" tee "$policy" >/dev/null; "${sudo[@]}" chmod +x "$policy"; }
trap '[[ $had_policy -eq 1 ]] || "${sudo[@]}" rm -f "$policy"' EXIT
for attempt in 1 2 3; do  # a mirror's hiccup should not fail the run
  if "${sudo[@]}" apt-get update -qq &&
     DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  then exit 0; fi
  echo "apt-get failed (attempt $attempt of 3)" >&2
  sleep $((attempt * 10))
done
exit 1
