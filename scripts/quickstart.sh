#!/usr/bin/env bash
# quickstart.sh takes a machine with Go and a Docker engine to sandpit's main job running:
# it builds the binaries, a base image (pulled from a registry, or built from Debian packages
# when no registry answers), the sandbox image, and runs a first program. Every step shows
# its progress. Re-running it skips what is done.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\n==> %s\n' "$*" >&2; }

say "checking the Docker engine"
docker version --format 'engine {{.Server.Version}} (API {{.Server.APIVersion}})' ||
  { echo "no Docker engine answers: start it (sudo systemctl start docker, or sudo dockerd &)" >&2; exit 1; }

say "building bin/sandpit and bin/sandpit-executor"
make build

base=${SANDPIT_BASE_IMAGE:-}
if [ -z "$base" ]; then
  if docker image inspect python:3.11-slim >/dev/null 2>&1 || timeout 60 docker pull python:3.11-slim >/dev/null 2>&1; then
    base=python:3.11-slim
  else
    say "no container registry answers: building the base image from Debian packages (a few minutes, once)"
    sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd=sudo
    $sudo_cmd scripts/offline-base-image.sh
    base=sandpit-base:bookworm-2
  fi
fi

say "building the sandbox image on $base"
bin/sandpit image build --base-image "$base"

say "running a first program"
SANDPIT_BASE_IMAGE=$base bin/sandpit run --local \
  -c 'import pandas as pd; print(pd.DataFrame({"a": INPUT}).a.sum())' --input '[1,2,3]'

# The closing line says what `sandpit serve` will use under the settings in effect here (config
# file, SANDPIT_* variables), not the defaults: the daemon chooses its own base image.
settings=$(bin/sandpit serve --dry-run)
setting() { printf '%s\n' "$settings" | sed -n "s/^$1: //p"; }
cat >&2 <<TXT

sandpit works. Next:
  export PATH="\$PWD/bin:\$PATH"
  sandpit serve &                      # the daemon on $(setting url), base image $(setting base_image)
  sandpit run -c 'print(1)'
The warm container stays up between runs; sandpit sandbox rm removes it.
TXT
