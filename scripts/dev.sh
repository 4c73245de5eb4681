#!/usr/bin/env bash
# Builds the backend and opens Neovim with the plugin loaded from this checkout.
# Extra arguments go to nvim (files to open, for example).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
(cd "$here" && cargo build --release --locked)
nvim="$("$here/scripts/ensure-nvim.sh")"
exec "$nvim" --cmd "set runtimepath^=$here" "$@"
