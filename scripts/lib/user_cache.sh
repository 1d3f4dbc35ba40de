# shellcheck shell=bash
# What a user's checkouts share (sourced by fetch_jars.sh, registry.sh, source_wheels.sh): one folder per user for
# downloads and builds that do not depend on the checkout, and a cheap copy out of it.
user_cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/tidemark

link_copy() {  # link_copy SRC DST: DST a copy of the folder SRC with hard links (a full copy across file systems)
  cp -al "$1" "$2" 2>/dev/null || { rm -rf "$2"; cp -a "$1" "$2"; }
}
