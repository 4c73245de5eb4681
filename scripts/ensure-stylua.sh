#!/usr/bin/env bash
# Prints the path of StyLua 2.6.0, the version whose output .stylua.toml and the Lua files are
# checked against (another version may format differently). Uses the one on PATH when it is that
# version; otherwise builds it from crates.io into .deps/stylua inside the checkout, once (a few
# minutes with cargo, then cached), and prints that. Messages go to stderr.
set -euo pipefail
version=2.6.0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
local_stylua="$here/.deps/stylua/bin/stylua"

is_pinned() {
  [ "$("$1" --version 2>/dev/null)" = "stylua $version" ]
}

if [ -x "$local_stylua" ] && is_pinned "$local_stylua"; then
  echo "$local_stylua"; exit 0
fi
if command -v stylua >/dev/null 2>&1 && is_pinned "$(command -v stylua)"; then
  command -v stylua; exit 0
fi
echo "agent: no StyLua $version found; building it into .deps/stylua (once)" >&2
# Only the LuaJIT syntax Neovim runs (and none of the editor integrations) keeps the build short.
if ! cargo install --quiet --locked --force stylua --version "$version" \
  --no-default-features --features luajit --root "$here/.deps/stylua" >&2 ||
  ! is_pinned "$local_stylua"; then
  echo "agent: installing StyLua $version failed; install it yourself" \
    "(cargo install stylua --locked --version $version --features luajit) and put it on PATH" >&2
  exit 1
fi
echo "$local_stylua"
