#!/usr/bin/env bash
# Wheels of the lock's packages that PyPI ships as sources only (pyspark, pyspark-client): built once into
# TIDEMARK_WHEELS (default: ~/.cache/tidemark/wheels, shared by every checkout of the user) so that the venv
# installs them from there. uv builds a source package on install (about 30 s of CPU for these two) and, with an
# index that asks it to revalidate each time, built them again for every fresh clone (`make test` in CI).
# Prints the folder. A wheel already there is kept: its name holds the version the lock pins.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
source "$root/scripts/lib/user_cache.sh"
dir=${TIDEMARK_WHEELS:-$user_cache_root/wheels}
mkdir -p "$dir"
missing=()
for name in pyspark pyspark-client; do
  pin=$(grep -m1 "^$name==" "$root/requirements.lock" | cut -d= -f3)
  [ -n "$pin" ] || continue
  wheel=${name//-/_}-$pin-py2.py3-none-any.whl
  [ -f "$dir/$wheel" ] || missing+=("$name==$pin")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "tidemark: building wheels for ${missing[*]} into $dir (once)" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  "$root/.venv/bin/uv" pip download --help >/dev/null 2>&1 || true
  "${PY:-$root/.venv/bin/python}" -m pip wheel -q --disable-pip-version-check --no-deps -w "$tmp" "${missing[@]}" >&2
  mv "$tmp"/*.whl "$dir"/
fi
echo "$dir"
