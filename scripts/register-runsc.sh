#!/usr/bin/env bash
# register-runsc.sh registers gVisor's runsc with the local Docker engine as the runtime
# "runsc" (platform ptrace, no network of its own: its netstack cannot attach inside every
# engine), then makes a running engine reload its configuration. Safe to run again.
#
# Usage: scripts/register-runsc.sh [DAEMON_JSON]   (default /etc/docker/daemon.json)
# Needs root, python3 (to edit the JSON) and runsc on the PATH (Debian: apt-get install runsc).
set -euo pipefail
conf=${1:-/etc/docker/daemon.json}
runsc=$(command -v runsc) || { echo "register-runsc: runsc is not installed (apt-get install runsc)" >&2; exit 1; }
mkdir -p "$(dirname "$conf")"
[ -s "$conf" ] || echo '{}' > "$conf"
python3 - "$conf" "$runsc" <<'PY'
import json, sys
path, runsc = sys.argv[1], sys.argv[2]
with open(path) as f:
    conf = json.load(f)
want = {"path": runsc, "runtimeArgs": ["--platform=ptrace", "--network=none"]}
if conf.setdefault("runtimes", {}).get("runsc") != want:
    conf["runtimes"]["runsc"] = want
    with open(path, "w") as f:
        json.dump(conf, f, indent=2)
    print("register-runsc: registered runsc in " + path, file=sys.stderr)
PY
if pid=$(pidof dockerd); then
  kill -HUP $pid # dockerd reloads its runtimes on SIGHUP
  for _ in $(seq 1 20); do
    docker info --format '{{json .Runtimes}}' 2>/dev/null | grep -q '"runsc"' && exit 0
    sleep 0.5
  done
  echo "register-runsc: the engine did not pick up runsc after SIGHUP; restart it" >&2
  exit 1
fi
