#!/usr/bin/env bash
# ci-time.sh: the test binary runner of .ci/run (go test -exec). It runs the binary with a
# TMPDIR of its package's own, so that the Docker containers its tests start (labelled with
# their data directory, under TMPDIR) are known as the package's, and appends to $CI_PACKAGES
# "package wall-seconds binary-cpu-seconds containers-cpu-seconds". go test runs a package's
# binary in the package's directory, which names it; another command is named by CI_TIME_NAME.
# The binary's CPU includes testtime's and test2json's (a second or two).
set -u
top=$(git rev-parse --show-toplevel 2>/dev/null || pwd)
pkg=${CI_TIME_NAME:-$(realpath --relative-to="$top" "$PWD")}
export TMPDIR="${CI_TMP:-/tmp}/${pkg//\//_}"
mkdir -p "$TMPDIR"

# containers_cpu prints the CPU seconds of the running containers labelled with a data
# directory under $TMPDIR, one "id nanoseconds" line each (cgroup v1's cpuacct or v2's cpu.stat).
containers_cpu() {
	docker ps --no-trunc --format '{{.ID}} {{.Label "dev.sandpit.data-dir"}}' 2>/dev/null |
		while read -r id dir; do
			case "$dir" in "$TMPDIR"/*) ;; *) continue ;; esac
			if [ -r "/sys/fs/cgroup/cpuacct/docker/$id/cpuacct.usage" ]; then
				echo "$id $(cat "/sys/fs/cgroup/cpuacct/docker/$id/cpuacct.usage")"
			elif [ -r "/sys/fs/cgroup/system.slice/docker-$id.scope/cpu.stat" ]; then
				echo "$id $(awk '$1 == "usage_usec" { print $2 * 1000 }' "/sys/fs/cgroup/system.slice/docker-$id.scope/cpu.stat")"
			fi
		done
}
# A package that needs the test cluster (CI_KUBE_PACKAGES) waits for it: .ci/run starts the
# tests while the cluster builds, and writes CI_KUBE_READY ("ok", or why not) once it is up,
# with the environment that reaches it in CI_KUBE_ENV. The wait is not the package's time (it
# is, for go test's own kill timer: -timeout plus a minute from the binary's start).
if [ -n "${CI_KUBE_READY:-}" ] && [[ " ${CI_KUBE_PACKAGES:-} " == *" $pkg "* ]]; then
	waited=0
	until [ -s "$CI_KUBE_READY" ]; do sleep 2; waited=$((waited + 2)); done
	# go test shows a passing package's output to no one: the wait goes to CI_WAITS too.
	[ $waited = 0 ] || echo "ci-time: $pkg waited ${waited}s for the test cluster" | tee -a "${CI_WAITS:-/dev/null}" >&2
	ready=$(cat "$CI_KUBE_READY")
	[ "$ready" = ok ] || { echo "ci-time: $pkg needs the test cluster, which is not up: $ready" >&2; exit 1; }
	# shellcheck disable=SC1090
	. "$CI_KUBE_ENV"
fi
samples=$TMPDIR.cpu
: >"$samples"
(while :; do containers_cpu >>"$samples"; sleep 2; done) &
sampler=$!

# A test binary runs under testtime when .ci/run built it (CI_TESTTIME): its output is what
# it prints without -v, and each test over 20 s is appended to $CI_TESTS.
run=("$@")
if [ -n "${CI_TESTTIME:-}" ] && [[ $1 == *.test ]]; then
	run=("$CI_TESTTIME" -p "$pkg" -o "$CI_TESTS" -min 20 "$@")
fi
# .ci/run compiles with a GOGC of its own; a test binary (and the daemons it starts) runs
# with the one the run was given (CI_TEST_GOGC; unset: Go's default), as users run them.
if [[ $1 == *.test ]] && [ -n "${CI_TEST_GOGC+set}" ]; then
	if [ -n "$CI_TEST_GOGC" ]; then export GOGC=$CI_TEST_GOGC; else unset GOGC; fi
fi
start=$(date +%s.%N)
/usr/bin/time -f "%U %S" -o "$TMPDIR.time" "${run[@]}"
status=$?
kill "$sampler" 2>/dev/null
wait "$sampler" 2>/dev/null
containers_cpu >>"$samples"
# Each container's last reading is its CPU time (one removed between samples loses its last
# two seconds).
ctr=$(awk '{ last[$1] = $2 } END { s = 0; for (k in last) s += last[k]; printf "%.0f", s / 1e9 }' "$samples")
bin=$(tail -1 "$TMPDIR.time" 2>/dev/null | awk '{ printf "%.0f", $1 + $2 }')
echo "$pkg $(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.0f", b - a }') ${bin:-?} ${ctr:-0}" >>"$CI_PACKAGES"
rm -rf "$TMPDIR" "$TMPDIR.time" "$samples"
exit $status
