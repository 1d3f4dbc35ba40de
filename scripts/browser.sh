#!/usr/bin/env bash
# The browser of the browser tests: Debian's chromium and its chromedriver, installed with apt-get when
# missing (no browser download). Run by `make test` (the `browser` target).
set -euo pipefail
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
  exit 0
fi
echo "browser: installing Debian's chromium and chromium-driver with apt-get"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
  || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q chromium chromium-driver >/dev/null; } \
  || { echo "browser: could not install chromium and chromium-driver; install them and run again" >&2; exit 1; }
echo "browser: $(chromium --version 2>/dev/null), $(chromedriver --version 2>/dev/null | cut -d' ' -f1-2)"
