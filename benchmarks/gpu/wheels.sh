#!/usr/bin/env bash
# Fetch, on a machine with network, the wheels the GPU check needs on the device machine
# (Python 3.12, x86-64, no registry): benchmarks/gpu/wheels.txt, into benchmarks/gpu/wheels/
# (git-ignored). Then name benchmarks/gpu/wheels in the device call's `carry`.
# About 40 MiB (44 wheels, `du` 2026-12-02); a device call carries 64 MiB
# with the working tree. Idempotent: pip skips wheels already there.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
  -d "$here/wheels" -r "$here/wheels.txt"
# one version of each (two stop the install on the device)
names=$(ls "$here"/wheels/*.whl | xargs -n1 basename | cut -d- -f1 | tr 'A-Z-' 'a-z_' | sort)
dups=$(echo "$names" | uniq -d)
if [ -n "$dups" ]; then echo "error: several versions of: $dups (remove the stale ones from $here/wheels)" >&2; exit 1; fi
echo "$(echo "$names" | wc -l) wheels, $(du -sh "$here/wheels" | cut -f1) in $here/wheels"
