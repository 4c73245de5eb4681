#!/usr/bin/env bash
# The whole test suite: installs what the tests need when the machine lacks it, checks the Lua
# files' formatting (StyLua), then runs every Rust unit and integration test (the integration
# tests drive a real Neovim).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v cargo >/dev/null 2>&1; then
  echo "agent: cargo not found; install Rust from https://rustup.rs and run this again" >&2
  exit 1
fi
# The process-tree tests start each escape the issue lists with its own tool. A missing one is
# installed when this machine can (root with apt-get, as on CI); otherwise its escape is skipped
# (its test says so only when it fails, so say it here).
missing=()
for tool in setsid timeout python3 tmux start-stop-daemon; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "agent: installing ${missing[*]} for the process-tree tests" >&2
  packages=()
  for tool in "${missing[@]}"; do
    case "$tool" in
      setsid) packages+=(util-linux) ;;
      timeout) packages+=(coreutils) ;;
      start-stop-daemon) packages+=(dpkg) ;;
      *) packages+=("$tool") ;;
    esac
  done
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${packages[@]}"; } >&2 ||
    echo "agent: could not install ${packages[*]}; their escapes are skipped" >&2
fi
for tool in "${missing[@]}"; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "agent: $tool not found; the process-tree tests skip the escape that needs it" >&2
  fi
done
# The download tests (tests/suite/install.rs) fetch from a local server with curl, as the plugin
# does; without curl they fail, so get it where this machine can.
if ! command -v curl >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "agent: installing curl for the download tests" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq curl; } >&2 ||
    echo "agent: could not install curl; the download tests will fail" >&2
fi
# The checkpoint tests drive the git binary (checkpoints need nothing else); get it the same way.
if ! command -v git >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "agent: installing git for the checkpoint tests" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq git; } >&2 ||
    echo "agent: could not install git; the checkpoint tests will fail" >&2
fi
# Lua style first: it is quick, and a formatting slip should not wait for the whole build.
scripts/format-lua.sh --check
AGENT_NVIM_TEST_NVIM="$(scripts/ensure-nvim.sh)"
export AGENT_NVIM_TEST_NVIM
# A temp directory of the tests' own: the sandbox lets commands write in $TMPDIR, and the
# sandbox tests put what commands must not write in cargo's scratch directory, which is under
# /tmp when the checkout is (a clean clone there, as on CI).
TMPDIR="$(mktemp -d "${TMPDIR:-/tmp}/agent-nvim-tests.XXXXXX")"
# Open to every user, as /tmp is: some tests run the backend as another user in a tempdir.
chmod 1777 "$TMPDIR"
export TMPDIR
trap 'rm -rf "$TMPDIR"' EXIT
cargo test --locked --workspace "$@"
