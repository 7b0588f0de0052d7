#!/usr/bin/env bash
# Installs the system libraries Shoal links against (Debian/Ubuntu): SQLite and zlib.
# Safe to run again; does nothing when they are present.
set -euo pipefail
missing=()
for pkg in libsqlite3-dev zlib1g-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v swift >/dev/null || { echo "swift is not on PATH: install Swift 6.1 or newer (swift.org)" >&2; exit 1; }
