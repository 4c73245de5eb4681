#!/usr/bin/env bash
# How long `agent-nvim tool run_bash` takes to return after the command's shell ends, for each way
# a process can leave the command's process group, and how many of those processes survive it.
# usage: benches/escapes.sh [AGENT_NVIM_BINARY [exit|timeout]]
#   (default: target/release/agent-nvim, exit). `timeout` keeps the shell running after the escape
#   and ends it with `--timeout 1`: the figure is then the time past that second.
set -uo pipefail
bin=$(realpath "${1:-target/release/agent-nvim}")
mode=${2:-exit}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cd "$dir" || exit 1
m=escbench$$
sleeper="exec -a $m sleep 1000"
names=("setsid &" "setsid -f" "python double fork" "set -m" "setpgid(0,0)" "timeout &"
  "tmux new -d" "start-stop-daemon" "env -i + setsid -f")
cases=(
  "setsid bash -c '$sleeper' &"
  "setsid -f bash -c '$sleeper'"
  "python3 -c 'import os, time
if os.fork(): os._exit(0)
os.setsid()
if os.fork(): os._exit(0)
time.sleep(1000)' $m"
  "set -m; bash -c '$sleeper' &"
  "python3 -c 'import os, time; os.setpgid(0, 0); time.sleep(1000)' $m &"
  "timeout 999 bash -c '$sleeper' &"
  "tmux -S $dir/tmux.sock -f /dev/null new -d '$sleeper'"
  "start-stop-daemon --start --background --pidfile $dir/pid --make-pidfile --startas /bin/bash -- -c '$sleeper'"
  "env -i setsid -f /bin/bash -c '$sleeper'"
)
for i in "${!cases[@]}"; do
  if [ "$mode" = timeout ]; then
    args=$(python3 -c 'import json, sys; print(json.dumps({"command": sys.argv[1] + "\nsleep 1000"}))' "${cases[$i]}")
    start=$(date +%s%N)
    "$bin" tool run_bash "$args" --auto-approve --timeout 1 >/dev/null
    back=$(date +%s%N)
    end=$((start + 1000000000))
    what="the timeout"
  else
    args=$(python3 -c 'import json, sys; print(json.dumps({"command": sys.argv[1] + "\nsleep 0.3; date +%s%N"}))' "${cases[$i]}")
    out=$("$bin" tool run_bash "$args" --auto-approve)
    back=$(date +%s%N)
    end=$(python3 -c 'import json, sys; print(json.loads(sys.argv[1])["text"].split()[0])' "$out")
    what="the shell ended"
  fi
  survivors=$(pgrep -f "$m")
  left=$(printf '%s' "$survivors" | grep -c .)
  # Survivors (the old binary leaves them) are killed by pid.
  [ -n "$survivors" ] && kill -9 $survivors
  rm -f "$dir/pid"
  printf '%-22s %5d ms after %s, %d left\n' "${names[$i]}" $(((back - end) / 1000000)) "$what" "$left"
done
