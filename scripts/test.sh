#!/usr/bin/env bash
# The whole test suite: installs what the tests need when the machine lacks it, then runs every
# Rust unit and integration test (the integration tests drive a real Neovim).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v cargo >/dev/null 2>&1; then
  echo "agent: cargo not found; install Rust from https://rustup.rs and run this again" >&2
  exit 1
fi
AGENT_NVIM_TEST_NVIM="$(scripts/ensure-nvim.sh)"
export AGENT_NVIM_TEST_NVIM
cargo test --locked "$@"
