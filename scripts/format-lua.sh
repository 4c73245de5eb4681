#!/usr/bin/env bash
# Formats every Lua file of the plugin with the pinned StyLua (scripts/ensure-stylua.sh) and
# .stylua.toml. With --check (as scripts/test.sh runs it), changes nothing and fails, showing the
# diff, when a file is not formatted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
stylua="$(scripts/ensure-stylua.sh)"
shopt -s nullglob
files=(lua plugin tests/lua ./*.lua)
if [ "${1:-}" = "--check" ]; then
  if ! "$stylua" --check "${files[@]}"; then
    echo "agent: these Lua files are not formatted as .stylua.toml says; run scripts/format-lua.sh" >&2
    exit 1
  fi
else
  "$stylua" "${files[@]}"
fi
