#!/usr/bin/env bash
# kube-cluster.sh: a Kubernetes for sandpit's tests, built from the Go module proxy, run from a
# state directory, and stopped leaving nothing behind on the host: one node, and more on demand.
#
#   scripts/kube-cluster.sh build [PART...]    build and cache (packages debs pause kube gvisor; all)
#   scripts/kube-cluster.sh up                 start etcd, the control plane, containerd, kubelet
#   scripts/kube-cluster.sh import-image REF   docker save REF | ctr import, on every node (skipped
#                                              where it is already)
#   scripts/kube-cluster.sh node add N [--taint KEY=VALUE:EFFECT]
#                                              start node N (2-254) in a network namespace of its own
#                                              (import-image then brings images to it); prints its name
#   scripts/kube-cluster.sh node kill|start N  SIGKILL node N's kubelet (its pods run on) | start it
#   scripts/kube-cluster.sh node cut|mend N    take node N's link down (cut off both ways) | up
#   scripts/kube-cluster.sh node tasks N       the containers running on node N: NAMESPACE/POD CONTAINER
#   scripts/kube-cluster.sh node rm N          remove node N: its pods, processes and state
#   scripts/kube-cluster.sh env                export lines for tests (eval "$(... env)")
#   scripts/kube-cluster.sh status             what runs
#   scripts/kube-cluster.sh down               stop everything, then check the host is clean
#   scripts/kube-cluster.sh purge              down, then remove the state directory
#
# Each node runs in a private mount namespace (private /run, /var overlaid, kernel sysctls the
# kubelet insists on writing shadowed); pods get no network but loopback (CNI: loopback and
# sandpit-nonet), so their one way out is the exec stream. Node 1 shares the host's network;
# node N (2 and up) has a network namespace of its own, linked by a veth to the cluster's
# bridge, at address NET.N (the apiserver and node 1's kubelet listen on NET.1, the bridge's).
# The RuntimeClass "gvisor" runs pods under gVisor when SANDPIT_KUBE_GVISOR=1 (runsc built
# from the Go module proxy).
# Everything is configurable through SANDPIT_KUBE_* variables (below); the defaults avoid the
# ports, cgroups, paths and CIDRs of another cluster set up with the usual defaults on the same
# machine. See scripts/kube-cluster/README.md.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export PATH="$PATH:/usr/local/go/bin:/usr/local/sbin:/usr/sbin:/sbin"

VERSION=${SANDPIT_KUBE_VERSION:-v1.32.13}
# The module proxy here is partial: k8s.io/endpointslice v0.32.13 answers 403, and v0.32.12
# (imported by kube-controller-manager only) stands in. "module=version ...".
STAGING_OVERRIDES=${SANDPIT_KUBE_STAGING_OVERRIDES:-k8s.io/endpointslice=v0.32.12}
CACHE_ROOT=${SANDPIT_KUBE_CACHE:-$HOME/.cache/sandpit/kube}
CACHE=$CACHE_ROOT/$VERSION
BIN=$CACHE/bin
# gVisor (RuntimeClass "gvisor", handler runsc): SANDPIT_KUBE_GVISOR=1 builds and registers it
# (.ci/run sets it). Off by default: a cluster started by hand for runc's cases needs none.
GVISOR=${SANDPIT_KUBE_GVISOR:-0}
GVISOR_VERSION=${SANDPIT_KUBE_GVISOR_VERSION:-v0.0.0-20260905035102-160fafc42237}
GVCACHE=$CACHE_ROOT/gvisor/$GVISOR_VERSION
GVBIN=$GVCACHE/bin
DEBS=$CACHE_ROOT/debs
# From Debian, extracted (not installed): etcd, the CNI plugins, and kubectl (1.20: older than
# the cluster, but its get, apply and delete are all this script asks of it, and building
# kubectl 1.32 cost a fresh machine minutes of CPU that no test used).
DEB_PACKAGES="etcd-server containernetworking-plugins kubernetes-client"
DIR=${SANDPIT_KUBE_DIR:-/tmp/sandpit-kube}
ETCD_PORT=${SANDPIT_KUBE_ETCD_PORT:-12379}
ETCD_PEER_PORT=${SANDPIT_KUBE_ETCD_PEER_PORT:-12380}
APISERVER_PORT=${SANDPIT_KUBE_APISERVER_PORT:-16443}
KUBELET_PORT=${SANDPIT_KUBE_KUBELET_PORT:-11250}
KUBELET_HEALTHZ_PORT=${SANDPIT_KUBE_KUBELET_HEALTHZ_PORT:-11248}
SCHEDULER_PORT=${SANDPIT_KUBE_SCHEDULER_PORT:-11259}
CONTROLLER_MANAGER_PORT=${SANDPIT_KUBE_CONTROLLER_MANAGER_PORT:-11257}
# Node 1's name (the apiserver reaches each kubelet at its InternalIP).
NODE_NAME=${SANDPIT_KUBE_NODE_NAME:-localhost}
# The nodes' network: a bridge with NET.1 (node 1, the apiserver), node N at NET.N. Node N's
# name is NODE_PREFIX-N.
NODE_NET=${SANDPIT_KUBE_NODE_NET:-10.98.0}
BRIDGE=${SANDPIT_KUBE_BRIDGE:-sandpit-kube0}
NODE_PREFIX=${SANDPIT_KUBE_NODE_PREFIX:-sandpit-kube}
# How long the controller-manager waits for a silent node before it marks it NotReady (and the
# scheduler stops placing pods there). Kubernetes' default is 40 s; short here for the tests.
NODE_GRACE=${SANDPIT_KUBE_NODE_GRACE:-20s}
HOST_IP=$NODE_NET.1
VETH_PREFIX=${SANDPIT_KUBE_VETH_PREFIX:-sandpit-kv}
# The node the node-level functions act on (use_node sets it and its paths, name and address).
NODE=1 NODE_IP=$HOST_IP KUBELET_CERT=kubelet VETH="" TAINTS=""
CGROUP_ROOT=${SANDPIT_KUBE_CGROUP_ROOT:-/sandpit-kube}
SERVICE_CIDR=${SANDPIT_KUBE_SERVICE_CIDR:-10.97.0.0/24}
SERVICE_IP=${SANDPIT_KUBE_SERVICE_IP:-10.97.0.1}
PAUSE_IMAGE=registry.k8s.io/pause:3.10
BUILD_P=${SANDPIT_KUBE_BUILD_P:-2}
PORTS="$ETCD_PORT $ETCD_PEER_PORT $APISERVER_PORT $KUBELET_PORT $KUBELET_HEALTHZ_PORT $SCHEDULER_PORT $CONTROLLER_MANAGER_PORT"
# The build order: the kubelet first, kube-apiserver last (what a concurrent build of
# kube-apiserver alone compiles is then in the cache when this one gets to it).
COMMANDS="kubelet kube-scheduler kube-controller-manager kube-apiserver"

PKI=$DIR/pki ETC=$DIR/etc DATA=$DIR/data RUN=$DIR/run LOGS=$DIR/logs PIDS=$DIR/run/pids
SOCK=$RUN/containerd/containerd.sock
NODES=$DIR/nodes
KUBECONFIG_ADMIN=$PKI/admin.kubeconfig
# The sysctls the kubelet sets (and would fail on with protectKernelDefaults): in the node's
# mount namespace they are files of ours bound over /proc/sys.
SYSCTLS="vm/overcommit_memory vm/panic_on_oom kernel/panic kernel/panic_on_oops kernel/keys/root_maxkeys kernel/keys/root_maxbytes"
# Host paths a kubelet, containerd or controller-manager would create with their defaults: none
# may appear. The node sees /var and /run privately, so what appears there comes from elsewhere
# (another cluster on the machine): down notes it without failing.
HOST_PATHS="/usr/libexec/kubernetes /etc/cni/net.d /opt/cni /var/lib/kubelet /var/lib/cni /var/log/containers /var/log/pods /var/lib/containerd/io.containerd.grpc.v1.cri /run/containerd/fifo /run/netns"

log() { printf '[kube] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------------------------------- build

ldflags() {
	local minor f="-s -w" pkg date
	minor=$(echo "$VERSION" | cut -d. -f2)
	date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
		f+=" -X $pkg.gitVersion=$VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
		f+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
	done
	echo "$f"
}

# A wrapper module that requires k8s.io/kubernetes and replaces its ./staging modules with
# their published versions (k8s.io/kubernetes' own replaces break a build from the proxy).
# Written exactly so that an identical module elsewhere shares Go's build cache with it.
wrapper_module() {
	local w=$CACHE/src/k8sbuild gomod staging
	staging=v0.${VERSION#v1.}
	mkdir -p "$w"
	gomod=$(cd "$w" && go mod download -json "k8s.io/kubernetes@$VERSION" | jq -r .GoMod)
	{
		printf 'module k8sbuild\n\ngo 1.23.0\n\ngodebug default=go1.23\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$VERSION"
		sed -n '/^replace (/,/^)/p' "$gomod" | grep '=> ./staging/' |
			awk -v v="$staging" -v o="$STAGING_OVERRIDES" '
				BEGIN { n = split(o, a, " "); for (i = 1; i <= n; i++) { split(a[i], kv, "="); ov[kv[1]] = kv[2] } }
				{ ver = ($1 in ov) ? ov[$1] : v; printf "\t%s => %s %s\n", $1, $1, ver }'
		echo ")"
	} >"$w/go.mod.new"
	cat >"$w/tools.go" <<'EOF'
//go:build tools

// Package tools only exists so that `go mod tidy` records every dependency
// of the Kubernetes commands we build.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
EOF
	# Tidy only when the module changed (go.mod.in is the last untidied go.mod).
	if ! cmp -s "$w/go.mod.new" "$w/go.mod.in" || [ ! -s "$w/go.sum" ]; then
		cp "$w/go.mod.new" "$w/go.mod"
		(cd "$w" && go mod tidy)
		mv "$w/go.mod.new" "$w/go.mod.in"
	else
		rm "$w/go.mod.new"
	fi
}

build_kube() {
	local stamp want missing=0 c t0
	want="$VERSION $STAGING_OVERRIDES $(go env GOVERSION) $COMMANDS"
	for c in $COMMANDS; do [ -x "$BIN/$c" ] || missing=1; done
	if [ $missing = 0 ] && [ "$(cat "$BIN/.stamp" 2>/dev/null)" = "$want" ] && [ -z "${SANDPIT_KUBE_REBUILD:-}" ]; then
		log "kubernetes $VERSION: cached in $BIN"
		return
	fi
	t0=$(now)
	wrapper_module
	log "module resolved in $(since "$t0")s; building $COMMANDS (go build -p $BUILD_P)"
	mkdir -p "$BIN/.new"
	# The flags must stay as they are (CGO_ENABLED=0, -buildvcs=false, -trimpath, no DWARF)
	# for Go's build cache to hold between runs and between identical wrapper modules. No
	# DWARF: the binaries are stripped (-s -w) anyway, and not making it takes about 14 % off
	# the compile's CPU (a cold build of k8s.io/api/core/v1: 57 against 67 CPU-s).
	(cd "$CACHE/src/k8sbuild" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -p "$BUILD_P" -trimpath -gcflags=all=-dwarf=false \
		-ldflags "$(ldflags)" -o "$BIN/.new/" $(for c in $COMMANDS; do echo "k8s.io/kubernetes/cmd/$c"; done))
	for c in $COMMANDS; do mv "$BIN/.new/$c" "$BIN/$c"; done
	rmdir "$BIN/.new"
	echo "$want" >"$BIN/.stamp"
	log "kubernetes $VERSION built in $(since "$t0")s: $("$BIN/kube-apiserver" --version 2>/dev/null | head -1)"
}

# etcd, the CNI plugins and kubectl from Debian, extracted (not installed: no dpkg state,
# nothing started).
fetch_debs() {
	if [ -x "$DEBS/root/usr/bin/etcd" ] && [ -x "$DEBS/root/usr/lib/cni/loopback" ] && [ -x "$DEBS/bin/kubectl" ]; then
		log "etcd, CNI plugins and kubectl: cached in $DEBS"
		return
	fi
	rm -rf "$DEBS" && mkdir -p "$DEBS/dl" "$DEBS/root"
	(cd "$DEBS/dl" && { apt-get download $DEB_PACKAGES >/dev/null 2>&1 ||
		{ apt-get update -qq >/dev/null && apt-get download $DEB_PACKAGES >/dev/null; }; })
	for d in "$DEBS"/dl/*.deb; do dpkg -x "$d" "$DEBS/root"; done
	rm -rf "$DEBS/dl"
	# kubectl alone on the PATH that env exports (not etcd and the rest of the packages).
	mkdir -p "$DEBS/bin" && ln -sf ../root/usr/bin/kubectl "$DEBS/bin/kubectl"
	log "$("$DEBS/root/usr/bin/etcd" --version | head -1), CNI plugins $(ls "$DEBS/root/usr/lib/cni" | wc -l)"
}

# The pod sandbox image: a static Go program packed as a docker-save archive (no registry).
build_pause() {
	local out=$CACHE/images/pause.tar tmp diff cfg cfgsum
	if [ -s "$out" ] && [ "$out" -nt "$HERE/kube-cluster/pause/main.go" ]; then
		log "pause image: cached in $out"
		return
	fi
	tmp=$(mktemp -d)
	mkdir -p "$tmp/rootfs" "$tmp/archive" "$CACHE/images"
	(cd "$HERE/kube-cluster/pause" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -trimpath -ldflags '-s -w' -o "$tmp/rootfs/pause" .)
	tar --numeric-owner --owner=0 --group=0 --mtime=@0 -cf "$tmp/layer.tar" -C "$tmp/rootfs" pause
	diff=$(sha256sum "$tmp/layer.tar" | cut -d' ' -f1)
	cfg=$(printf '{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z","config":{"Env":["PATH=/"],"Entrypoint":["/pause"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]},"history":[{"created_by":"scripts/kube-cluster.sh"}]}' "$diff")
	printf '%s' "$cfg" >"$tmp/config.json"
	cfgsum=$(sha256sum "$tmp/config.json" | cut -d' ' -f1)
	mkdir "$tmp/archive/$diff"
	mv "$tmp/layer.tar" "$tmp/archive/$diff/layer.tar"
	mv "$tmp/config.json" "$tmp/archive/$cfgsum.json"
	printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$cfgsum" "$PAUSE_IMAGE" "$diff" >"$tmp/archive/manifest.json"
	tar --numeric-owner --owner=0 --group=0 --mtime=@0 -cf "$out.new" -C "$tmp/archive" manifest.json "$cfgsum.json" "$diff/layer.tar"
	mv "$out.new" "$out"
	rm -rf "$tmp"
	log "pause image $PAUSE_IMAGE: $out"
}

# gVisor for the RuntimeClass "gvisor": runsc and its containerd shim from the Go module proxy
# (google/gvisor's "go" branch as gvisor.dev/gvisor pseudo-versions). Debian's runsc cannot run
# pods here (scripts/kube-cluster/README.md). Two adaptations, both for this machine kind:
#  - the shim sets its own oom_score_adj to -999 and fails when refused (root here lacks
#    CAP_SYS_RESOURCE): one line of pkg/shim/v1/manager.go turns that into a warning;
#  - the shim (containerd v2 libraries) answers `start` with JSON, where containerd 1.6 wants a
#    bare address: containerd-shim-runsc-v1 is a wrapper that passes on the address only.
build_gvisor() {
	local src want t0 mod f old new
	want="$GVISOR_VERSION $(go env GOVERSION) patch-oom-1 wrapper-1 version-1"
	if [ -x "$GVBIN/runsc" ] && [ -x "$GVBIN/containerd-shim-runsc-v1.real" ] && [ -x "$GVBIN/containerd-shim-runsc-v1" ] &&
		[ "$(cat "$GVBIN/.stamp" 2>/dev/null)" = "$want" ] && [ -z "${SANDPIT_KUBE_REBUILD:-}" ]; then
		log "gVisor $GVISOR_VERSION: cached in $GVBIN"
		return
	fi
	t0=$(now)
	mod=$(cd /tmp && go mod download -json "gvisor.dev/gvisor@$GVISOR_VERSION" | jq -r .Dir) || true
	[ -n "$mod" ] && [ -d "$mod" ] || die "gvisor.dev/gvisor@$GVISOR_VERSION is not on the Go module proxy (set SANDPIT_KUBE_GVISOR_VERSION, or SANDPIT_KUBE_GVISOR=0 to go without gVisor)"
	# The module cache is read-only: build from a copy of hard links with the one file replaced.
	src=$GVCACHE/src
	rm -rf "$src" "$GVBIN/.new" && mkdir -p "$GVCACHE" "$GVBIN/.new"
	cp -al "$mod" "$src"
	find "$src" -type d -exec chmod u+w {} +
	f=pkg/shim/v1/manager.go
	old='		return shim.BootstrapParams{}, fmt.Errorf("failed to set OOM Score on shim: %w", err)'
	new='		log.L.WithError(err).Warn("failed to set OOM Score on shim (ignored: no CAP_SYS_RESOURCE)")'
	[ "$(grep -cxF "$old" "$mod/$f")" = 1 ] || die "the shim patch does not apply to $mod/$f"
	rm "$src/$f"
	awk -v old="$old" -v new="$new" '$0 == old { print new; next } { print }' "$mod/$f" >"$src/$f"
	log "building gVisor $GVISOR_VERSION: runsc, containerd-shim-runsc-v1 (go build -p $BUILD_P)"
	(cd "$src" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false go build -p "$BUILD_P" -trimpath -gcflags=all=-dwarf=false \
		-ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$GVISOR_VERSION" -o "$GVBIN/.new/" ./runsc ./shim)
	mv "$GVBIN/.new/runsc" "$GVBIN/runsc"
	mv "$GVBIN/.new/shim" "$GVBIN/containerd-shim-runsc-v1.real"
	rmdir "$GVBIN/.new"
	rm -rf "$src"
	cat >"$GVBIN/containerd-shim-runsc-v1" <<'EOF'
#!/bin/sh
# containerd 1.6 takes what `start` prints (stdout and stderr) for the shim's socket address;
# this shim prints {"version":2,"address":"unix://...","protocol":"ttrpc"}: pass on the address.
real=$(dirname "$0")/containerd-shim-runsc-v1.real
eval last=\${$#}
[ "$last" = start ] || exec "$real" "$@"
out=$("$real" "$@" 2>&1) || { echo "$out"; exit 1; }
addr=$(echo "$out" | sed -n 's/.*"address":"\([^"]*\)".*/\1/p' | tail -n 1)
[ -n "$addr" ] || { echo "$out"; exit 1; }
echo "$addr"
EOF
	chmod +x "$GVBIN/containerd-shim-runsc-v1"
	echo "$want" >"$GVBIN/.stamp"
	log "gVisor built in $(since "$t0")s: $("$GVBIN/runsc" --version | head -1)"
}

check_node_packages() {
	local missing=""
	command -v containerd >/dev/null || missing+=" containerd"
	command -v runc >/dev/null || missing+=" runc"
	command -v ctr >/dev/null || missing+=" containerd" # ctr comes with Debian's containerd
	if [ -n "$missing" ]; then
		log "installing$missing"
		apt-get update -qq >/dev/null
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing runc >/dev/null
	fi
	log "$(containerd --version | cut -d' ' -f3), runc $(runc --version | head -1 | cut -d' ' -f3)"
}

cmd_build() {
	local t0
	t0=$(now)
	mkdir -p "$CACHE_ROOT"
	exec 9>"$CACHE_ROOT/.lock"
	flock 9
	command -v go >/dev/null || die "no go on PATH"
	local parts=${*:-packages debs pause kube gvisor}
	case " $parts " in *" packages "*) check_node_packages ;; esac
	case " $parts " in *" debs "*) fetch_debs ;; esac
	case " $parts " in *" pause "*) build_pause ;; esac
	case " $parts " in *" kube "*) build_kube ;; esac
	case " $parts " in *" gvisor "*) if [ "$GVISOR" = 1 ]; then build_gvisor; else log "gVisor: not built (SANDPIT_KUBE_GVISOR=1 builds it)"; fi ;; esac
	log "build done in $(since "$t0")s"
}

# ------------------------------------------------------------------------------------------ up

starttime() { sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20; }
# The PID of daemon $1 while it runs: its PID file holds "PID STARTTIME", so that a PID reused
# by another process is never taken for ours.
pid_of() {
	local pid st
	read -r pid st 2>/dev/null <"$PIDS/$1.pid" || return 1
	[ -n "$pid" ] && [ -n "$st" ] && [ "$(starttime "$pid")" = "$st" ] && echo "$pid"
}
alive() {
	local p
	p=$(pid_of "$1") && [ -n "$p" ] && kill -0 "$p" 2>/dev/null
}

start_daemon() { # name command...
	local name=$1
	shift
	alive "$name" && die "$name already runs (pid $(pid_of "$name")); run down first"
	setsid "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
	echo "$! $(starttime $!)" >"$PIDS/$name.pid"
}

wait_until() { # seconds what command...
	local t=$1 what=$2 i=0
	shift 2
	until "$@" >/dev/null 2>&1; do
		i=$((i + 1))
		if [ $i -ge $((t * 10)) ]; then
			log "timed out after ${t}s waiting for $what; the last log lines:"
			tail -n 20 "$LOGS"/*.log >&2 || true
			return 1
		fi
		sleep 0.1
	done
}

kctl() { "$DEBS/bin/kubectl" --kubeconfig "$KUBECONFIG_ADMIN" "$@"; }

# use_node makes node $1 the one the node-level functions (configs, namespace, containerd,
# kubelet, down) act on: node 1 keeps the cluster's own paths; node N (2-254) has its state in
# $NODES/N, its own cgroup root (CGROUP_ROOT-N), name (NODE_PREFIX-N) and address (NET.N).
use_node() {
	NODE=$1
	[ "$NODE" = 1 ] && return
	local nd=$NODES/$NODE
	ETC=$nd/etc DATA=$nd/data RUN=$nd/run LOGS=$nd/logs PIDS=$nd/run/pids
	SOCK=$RUN/containerd/containerd.sock
	CGROUP_ROOT=$CGROUP_ROOT-$NODE NODE_NAME=$NODE_PREFIX-$NODE NODE_IP=$NODE_NET.$NODE
	KUBELET_CERT=kubelet-$NODE VETH=$VETH_PREFIX$NODE
}

# The extra nodes' numbers, from their state directories.
nodes() { ls "$NODES" 2>/dev/null | grep -xE '[0-9]+' | sort -n || true; }

port_open() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }

CLIENT_EXT='basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n'

# issue_cert NAME SUBJECT EXTENSIONS: a key and a certificate of the CA in directory $1.
issue_cert() { # dir name subject extensions
	(
		cd "$1"
		openssl ecparam -name prime256v1 -genkey -noout -out "$2.key"
		openssl req -new -key "$2.key" -subj "$3" -out "$2.csr" 2>/dev/null
		printf "$4" >"$2.ext"
		openssl x509 -req -in "$2.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -out "$2.crt" -extfile "$2.ext" 2>/dev/null
		rm -f "$2.csr" "$2.ext"
		chmod 600 "$2.key"
	)
}

# kubeconfig_of USER: the kubeconfig of USER's certificate in $PKI, on stdout.
kubeconfig_of() {
	cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: sandpit-kube
  cluster:
    server: https://$HOST_IP:$APISERVER_PORT
    certificate-authority: $PKI/ca.crt
users:
- name: $1
  user:
    client-certificate: $PKI/$1.crt
    client-key: $PKI/$1.key
contexts:
- name: sandpit-kube
  context: {cluster: sandpit-kube, user: $1}
current-context: sandpit-kube
EOF
}

write_pki() {
	mkdir -p "$PKI"
	# Kept, unless made for another address (before the nodes' network): then made anew.
	if [ -f "$PKI/ca.crt" ] && openssl x509 -in "$PKI/apiserver.crt" -noout -ext subjectAltName 2>/dev/null | grep -q "IP Address:$HOST_IP,"; then
		return
	fi
	rm -rf "${PKI:?}"/*
	local tmp u
	tmp=$(mktemp -d)
	openssl ecparam -name prime256v1 -genkey -noout -out "$tmp/ca.key"
	openssl req -x509 -new -key "$tmp/ca.key" -subj "/CN=sandpit-kube-ca" -days 3650 -out "$tmp/ca.crt" 2>/dev/null
	issue_cert "$tmp" apiserver /CN=kube-apiserver "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:$HOST_IP,IP:127.0.0.1,IP:$SERVICE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n"
	issue_cert "$tmp" admin "/O=system:masters/CN=sandpit-kube-admin" "$CLIENT_EXT"
	issue_cert "$tmp" apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$CLIENT_EXT"
	issue_cert "$tmp" kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "$CLIENT_EXT"
	issue_cert "$tmp" kube-scheduler /CN=system:kube-scheduler "$CLIENT_EXT"
	issue_cert "$tmp" kube-controller-manager /CN=system:kube-controller-manager "$CLIENT_EXT"
	openssl ecparam -name prime256v1 -genkey -noout -out "$tmp/sa.key"
	openssl ec -in "$tmp/sa.key" -pubout -out "$tmp/sa.pub" 2>/dev/null
	chmod 600 "$tmp"/*.key
	for u in admin kubelet kube-scheduler kube-controller-manager; do kubeconfig_of "$u" >"$tmp/$u.kubeconfig"; done
	cp -a "$tmp"/. "$PKI"/
	rm -rf "$tmp"
}

# node_pki: node NODE's kubelet certificate (the Node authorizer's system:node:NAME) and
# kubeconfig, made once.
node_pki() {
	[ -f "$PKI/$KUBELET_CERT.kubeconfig" ] && return
	issue_cert "$PKI" "$KUBELET_CERT" "/O=system:nodes/CN=system:node:$NODE_NAME" "$CLIENT_EXT"
	kubeconfig_of "$KUBELET_CERT" >"$PKI/$KUBELET_CERT.kubeconfig"
}

# The containerd runtime handler "runsc" (RuntimeClass gvisor) when gVisor is on: the shim
# (found on containerd's PATH, the wrapper of build_gvisor) drives $GVBIN/runsc as runsc.toml says.
runsc_runtime() {
	[ "$GVISOR" = 1 ] || return 0
	cat <<EOF

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc]
        runtime_type = "io.containerd.runsc.v1"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runsc.options]
          TypeUrl = "io.containerd.runsc.v1.options"
          ConfigPath = "$ETC/runsc.toml"
EOF
}

write_configs() {
	mkdir -p "$ETC/cni/net.d" "$RUN/cni-bin"
	ln -sf "$DEBS/root/usr/lib/cni/loopback" "$RUN/cni-bin/loopback"
	cp "$HERE/kube-cluster/cni/sandpit-nonet" "$RUN/cni-bin/sandpit-nonet"
	# SANDPIT_KUBE_CNI=loopback leaves sandpit-nonet out: containerd 1.6 then fails every sandbox
	# (see scripts/kube-cluster/README.md); kept to show it.
	local plugins='{"type": "loopback"}, {"type": "sandpit-nonet"}'
	[ "${SANDPIT_KUBE_CNI:-nonet}" = loopback ] && plugins='{"type": "loopback"}'
	cat >"$ETC/cni/net.d/10-sandpit-nonet.conflist" <<EOF
{"cniVersion": "1.0.0", "name": "sandpit-nonet", "plugins": [$plugins]}
EOF
	cat >"$ETC/containerd.toml" <<EOF
version = 2
root = "$DATA/containerd/root"
state = "$RUN/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "$SOCK"
[ttrpc]
  address = ""
[debug]
  address = ""
  level = "warn"
[metrics]
  address = ""
[plugins]
  [plugins."io.containerd.internal.v1.opt"]
    path = "$DATA/containerd/opt"
  [plugins."io.containerd.grpc.v1.cri"]
    sandbox_image = "$PAUSE_IMAGE"
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
    enable_selinux = false
    # Root here lacks CAP_SYS_RESOURCE: a negative oom_score_adj (the sandbox's -998) makes
    # runc fail. Clamp to containerd's own.
    restrict_oom_score_adj = true
    [plugins."io.containerd.grpc.v1.cri".containerd]
      snapshotter = "overlayfs"
      default_runtime_name = "runc"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
          SystemdCgroup = false
          Root = "$RUN/runc"$(runsc_runtime)
    [plugins."io.containerd.grpc.v1.cri".cni]
      bin_dir = "$RUN/cni-bin"
      conf_dir = "$ETC/cni/net.d"
      max_conf_num = 1
EOF
	rm -f "$ETC/runsc.toml"
	if [ "$GVISOR" = 1 ]; then
		# systrap: no KVM here. root: the shim's runsc state (per containerd namespace), outside
		# the node's private /run so that down can reach it.
		cat >"$ETC/runsc.toml" <<EOF
binary_name = "$GVBIN/runsc"
root = "$RUN/runsc"
[runsc_config]
  platform = "systrap"
EOF
		# SANDPIT_KUBE_GVISOR_DEBUG=1: runsc's debug logs, one directory per container.
		if [ "${SANDPIT_KUBE_GVISOR_DEBUG:-0}" = 1 ]; then
			mkdir -p "$LOGS/runsc"
			printf '  debug = "true"\n  debug-log = "%s/runsc/%%ID%%/"\n' "$LOGS" >>"$ETC/runsc.toml"
		fi
	fi
	cat >"$ETC/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
port: $KUBELET_PORT
healthzBindAddress: 127.0.0.1
healthzPort: $KUBELET_HEALTHZ_PORT
readOnlyPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
cgroupRoot: $CGROUP_ROOT
containerRuntimeEndpoint: unix://$SOCK
podLogsDir: $DATA/pod-logs
volumePluginDir: $DATA/kubelet-volume-plugins
makeIPTablesUtilChains: false
failSwapOn: false
# The default -999 needs CAP_SYS_RESOURCE, which root lacks here.
oomScoreAdj: 0
rotateCertificates: false
serverTLSBootstrap: false
serializeImagePulls: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
maxPods: 100
# Each pod's processes are bounded as a Docker box's are (docs/kubernetes.md asks sandbox nodes
# for this): without it a fork bomb in a pod fills the pod's memory, the OOM killer takes the
# executor's kill helper, and the bomb's uid counts against the same uid's runs elsewhere.
podPidsLimit: ${SANDPIT_KUBE_POD_PIDS_LIMIT:-1024}
imageGCHighThresholdPercent: 99
imageGCLowThresholdPercent: 98
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
registerWithTaints: [$TAINTS]
EOF
}

start_control_plane() {
	mkdir -p "$DATA/etcd" && chmod 700 "$DATA/etcd"
	start_daemon etcd "$DEBS/root/usr/bin/etcd" --name sandpit-kube --data-dir "$DATA/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "sandpit-kube=http://127.0.0.1:$ETCD_PEER_PORT" --initial-cluster-state new \
		--quota-backend-bytes 2147483648 --snapshot-count 10000 --log-level warn
	wait_until 30 etcd curl -fs "http://127.0.0.1:$ETCD_PORT/health"
	start_daemon kube-apiserver "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
		--bind-address="$HOST_IP" --secure-port="$APISERVER_PORT" --advertise-address="$HOST_IP" \
		--endpoint-reconciler-type=none \
		--tls-cert-file="$PKI/apiserver.crt" --tls-private-key-file="$PKI/apiserver.key" --client-ca-file="$PKI/ca.crt" \
		--kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
		--service-cluster-ip-range="$SERVICE_CIDR" \
		--authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
		--allow-privileged=true --profiling=false --v=1
}

start_scheduler_cm() {
	local k
	k=$PKI/kube-scheduler.kubeconfig
	start_daemon kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$k" --authentication-kubeconfig="$k" \
		--authorization-kubeconfig="$k" --bind-address=127.0.0.1 --secure-port="$SCHEDULER_PORT" --leader-elect=false --v=1
	k=$PKI/kube-controller-manager.kubeconfig
	# --flex-volume-plugin-dir: its default, /usr/libexec/kubernetes/..., would be created on the host.
	start_daemon kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$k" --authentication-kubeconfig="$k" \
		--authorization-kubeconfig="$k" --bind-address=127.0.0.1 --secure-port="$CONTROLLER_MANAGER_PORT" \
		--leader-elect=false --use-service-account-credentials=true \
		--service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
		--flex-volume-plugin-dir="$DATA/kcm-flexvolume" --node-monitor-grace-period="$NODE_GRACE" \
		--cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" --v=1
}

# The node's private mount namespace, held by a sleeping process: sysctl shadows, a private
# /run (shim sockets, FIFOs, netns), and /var overlaid so that the kubelet's and CNI's hard-coded
# /var/lib/kubelet, /var/lib/cni, /var/log/containers land in our state dir, not on the host.
start_node_ns() {
	mkdir -p "$RUN/sysctl" "$RUN/host-run" "$RUN/var/upper" "$RUN/var/work"
	local net=""
	[ "$NODE" = 1 ] || net=--net
	start_daemon node-ns unshare --mount $net --propagation private sleep infinity
	local h
	h=$(pid_of node-ns)
	own_ns() { [ "$(readlink /proc/"$1"/ns/mnt)" != "$(readlink /proc/self/ns/mnt)" ]; }
	wait_until 5 "the node's mount namespace" own_ns "$h"
	readlink /proc/"$h"/ns/mnt >"$RUN/node-ns.inode"
	nsenter -t "$h" -m -- bash -euc '
		R=$1 SYSCTLS=$2
		for f in $SYSCTLS; do
			s=$R/sysctl/${f//\//_}; cat /proc/sys/$f >$s; mount --bind $s /proc/sys/$f
		done
		mount -t overlay sandpit-kube-var -o lowerdir=/var,upperdir=$R/var/upper,workdir=$R/var/work /var
		mkdir -p /var/lib/kubelet /var/lib/cni /var/log/containers
		mount --bind /run $R/host-run
		mount -t tmpfs -o mode=755,size=256m sandpit-kube-run /run
		if [ -e $R/host-run/xtables.lock ]; then touch /run/xtables.lock; mount --bind $R/host-run/xtables.lock /run/xtables.lock; fi
		umount $R/host-run
	' _ "$RUN" "$SYSCTLS"
	[ "$NODE" = 1 ] || node_link "$h"
}

# The cluster's bridge, with the address of the apiserver and node 1's kubelet.
bridge_up() {
	if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
		ip link add "$BRIDGE" type bridge
		ip addr add "$HOST_IP/24" dev "$BRIDGE"
	fi
	ip link set "$BRIDGE" up
}

# node_link links the network namespace of node NODE (that of process $1) to the bridge: a veth
# whose host end is VETH, the node's end eth0 at NODE_IP, its default route through HOST_IP.
node_link() {
	ip link add "$VETH" type veth peer name eth0 netns "/proc/$1/ns/net"
	ip link set "$VETH" master "$BRIDGE" up
	nsenter -t "$1" -n sh -euc 'ip link set lo up; ip addr add "$1/24" dev eth0; ip link set eth0 up; ip route add default via "$2"' \
		_ "$NODE_IP" "$HOST_IP"
}

# ns_enter is nsenter's flags for node NODE's namespaces: mount, and network but for node 1.
ns_enter() { if [ "$NODE" = 1 ]; then echo -m; else echo -m -n; fi; }

make_cgroups() {
	local c
	for c in /sys/fs/cgroup/*/; do
		[ "$(stat -fc %T "$c")" = cgroup2fs ] && continue
		mkdir -p "$c${CGROUP_ROOT#/}"
		if [ -f "${c}cpuset.cpus" ]; then
			cat "${c}cpuset.cpus" >"$c${CGROUP_ROOT#/}/cpuset.cpus"
			cat "${c}cpuset.mems" >"$c${CGROUP_ROOT#/}/cpuset.mems"
		fi
	done
}

start_containerd() {
	local h
	h=$(pid_of node-ns)
	mkdir -p "$RUN/containerd" "$DATA/containerd"
	# PATH: containerd finds the runtime type io.containerd.runsc.v1 as containerd-shim-runsc-v1.
	start_daemon containerd nsenter -t "$h" $(ns_enter) -- env PATH="$GVBIN:$PATH" containerd --config "$ETC/containerd.toml"
	wait_until 30 containerd ctr -a "$SOCK" version
	if ! ctr -a "$SOCK" -n k8s.io images ls -q | grep -qx "$PAUSE_IMAGE"; then
		ctr -a "$SOCK" -n k8s.io images import "$CACHE/images/pause.tar" >/dev/null
	fi
}

start_kubelet() {
	local h
	h=$(pid_of node-ns)
	mkdir -p "$DATA/kubelet" "$DATA/pod-logs"
	start_daemon kubelet nsenter -t "$h" $(ns_enter) -- "$BIN/kubelet" --config="$ETC/kubelet.yaml" \
		--kubeconfig="$PKI/$KUBELET_CERT.kubeconfig" --root-dir="$DATA/kubelet" --hostname-override="$NODE_NAME" \
		--node-ip="$NODE_IP" --v=1
}

node_ready() {
	[ "$(kctl get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

cmd_up() {
	local t0 c p
	t0=$(now)
	for c in $COMMANDS; do [ -x "$BIN/$c" ] || die "$BIN/$c is missing: run $0 build"; done
	if [ "$GVISOR" = 1 ]; then
		[ -x "$GVBIN/runsc" ] && [ -x "$GVBIN/containerd-shim-runsc-v1" ] ||
			die "gVisor is missing from $GVBIN: run $0 build (or set SANDPIT_KUBE_GVISOR=0)"
	fi
	[ -x "$DEBS/root/usr/bin/etcd" ] && [ -x "$DEBS/bin/kubectl" ] && [ -s "$CACHE/images/pause.tar" ] || die "etcd, kubectl or the pause image is missing: run $0 build"
	if alive kube-apiserver && alive kubelet; then
		# A cluster started without gVisor has no runtime handler for it: up cannot add one.
		[ "$GVISOR" = 1 ] && [ ! -f "$ETC/runsc.toml" ] && die "the cluster is up without gVisor: run $0 down, then up with SANDPIT_KUBE_GVISOR=1"
		log "already up"
		return
	fi
	# PID files whose processes are all gone are a killed run's (a reboot, a killed CI): down
	# clears what it left (cgroups, mounts, stray shims) before this start.
	local f live="" stale=0
	for f in "$PIDS"/*.pid; do
		[ -e "$f" ] || continue
		f=$(basename "$f" .pid)
		if alive "$f"; then live+=" $f"; else stale=1; fi
	done
	[ -z "$live" ] || die "a partial cluster runs (${live# }): run $0 down first"
	for f in $(nodes); do
		(use_node "$f" && for d in node-ns containerd kubelet; do alive "$d" && exit 1; done; exit 0) ||
			die "node $f of a partial cluster runs: run $0 down first"
		stale=1
	done
	if [ $stale = 1 ]; then
		log "a stopped run's PID files are here: down first"
		cmd_down
	fi
	for p in $PORTS; do port_open "$p" && die "port $p is taken: set SANDPIT_KUBE_*_PORT"; done
	mkdir -p "$PIDS" "$LOGS" "$DATA"
	for p in $HOST_PATHS; do [ -e "$p" ] && echo "$p"; done >"$RUN/host-paths-before"
	rm -rf "$NODES"
	write_pki
	write_configs
	make_cgroups
	bridge_up
	start_control_plane
	# The node's side does not need the apiserver yet: start it while the apiserver comes up.
	start_node_ns
	start_containerd
	wait_until 120 kube-apiserver curl -fs --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
		"https://$HOST_IP:$APISERVER_PORT/readyz"
	log "apiserver ready after $(since "$t0")s"
	start_scheduler_cm
	start_kubelet
	wait_until 120 "node $NODE_NAME Ready" node_ready
	wait_until 60 "the default service account" kctl -n default get serviceaccount default
	if [ "$GVISOR" = 1 ]; then
		kctl apply -f - >/dev/null <<EOF
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: runsc
EOF
		log "RuntimeClass gvisor (handler runsc): $("$GVBIN/runsc" --version | head -1)"
	else
		kctl delete runtimeclass gvisor --ignore-not-found >/dev/null
	fi
	log "cluster up in $(since "$t0")s: KUBECONFIG=$KUBECONFIG_ADMIN, containerd $SOCK"
}

# ------------------------------------------------------------------------------------- nodes

# node_add N [--taint T]: node N beside node 1.
node_add() {
	local N=$1 taint=""
	shift
	while [ $# -gt 0 ]; do
		case $1 in
		--taint) [ $# -ge 2 ] || die "--taint needs KEY=VALUE:EFFECT"; taint=$2 && shift 2 ;;
		*) die "node add: unknown argument $1" ;;
		esac
	done
	alive kube-apiserver || die "the cluster is not up: run $0 up first"
	if [ -n "$taint" ]; then
		[[ "$taint" =~ ^([^=:]+)=([^=:]*):(NoSchedule|PreferNoSchedule|NoExecute)$ ]] || die "--taint $taint: want KEY=VALUE:EFFECT"
		TAINTS="{key: \"${BASH_REMATCH[1]}\", value: \"${BASH_REMATCH[2]}\", effect: ${BASH_REMATCH[3]}}"
	fi
	# As node 1: with gVisor's runtime handler when it has it.
	GVISOR=0
	[ -f "$ETC/runsc.toml" ] && GVISOR=1
	use_node "$N"
	alive node-ns && die "node $N runs already"
	local t0
	t0=$(now)
	rm -rf "${NODES:?}/$N"
	mkdir -p "$PIDS" "$LOGS" "$DATA"
	node_pki
	write_configs
	make_cgroups
	start_node_ns
	start_containerd
	start_kubelet
	wait_until 120 "node $NODE_NAME Ready" node_ready
	log "node $N ($NODE_NAME at $NODE_IP) up in $(since "$t0")s; it has no image but pause: import-image imports on every node"
	echo "$NODE_NAME"
}

# node_down stops node NODE: the kubelet, its containers, containerd, every process left in
# its namespace or cgroups, and the namespace (its mounts, and its network with the veth).
node_down() {
	local p c i
	stop_daemon kubelet 20
	if alive containerd; then
		for c in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
			timeout 10 ctr -a "$SOCK" -n k8s.io tasks kill -s SIGKILL "$c" >/dev/null 2>&1 || true
		done
		for c in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
			timeout 10 ctr -a "$SOCK" -n k8s.io tasks delete -f "$c" >/dev/null 2>&1 || true
		done
	fi
	delete_runsc_containers
	stop_daemon containerd 20
	# Shims and pod processes that outlived containerd: by namespace and cgroup, never by name.
	for p in $(node_ns_pids | sort -u); do
		[ "$p" = "$(pid_of node-ns)" ] && continue
		log "killing leftover $p: $(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | cut -c1-100)"
		kill -KILL "$p" 2>/dev/null || true
	done
	# The last process of the namespace takes its mounts (/run, /var, pods' rootfs) with it.
	stop_daemon node-ns 5
	for c in $(cgroup_dirs); do
		for ((i = 0; i < 50; i++)); do rmdir "$c" 2>/dev/null && break; [ -d "$c" ] || break; sleep 0.1; done
	done
	[ -z "$VETH" ] || ip link del "$VETH" 2>/dev/null || true
	rm -rf "$RUN/var" "$RUN/sysctl" "$RUN/host-run" "$RUN/containerd" "$RUN/runc" "$RUN/runsc" "$RUN/cni-bin"
}

cmd_node() {
	local verb=${1:-} N=${2:-}
	[[ "$N" =~ ^[0-9]+$ ]] && [ "$N" -ge 2 ] && [ "$N" -le 254 ] || die "usage: $0 node add|kill|start|cut|mend|tasks|rm N (2-254)"
	shift 2
	if [ "$verb" = add ]; then
		node_add "$N" "$@"
		return
	fi
	[ -d "$NODES/$N" ] || die "there is no node $N: add it with $0 node add $N"
	use_node "$N"
	case $verb in
	kill)
		alive kubelet || die "node $N's kubelet does not run"
		kill -KILL "$(pid_of kubelet)"
		log "node $N: kubelet killed (its pods run on; $0 node start $N starts it again)"
		;;
	start)
		alive node-ns || die "node $N is down: remove it and add it again"
		start_kubelet
		wait_until 120 "node $NODE_NAME Ready" node_ready
		log "node $N: kubelet started, the node Ready"
		;;
	cut) ip link set "$VETH" down && log "node $N: cut off (link $VETH down)" ;;
	mend) ip link set "$VETH" up && log "node $N: link $VETH up" ;;
	tasks)
		local c info
		for c in $(ctr -a "$SOCK" -n k8s.io tasks ls -q); do
			# A container the kubelet removes between the listing and its info is not running.
			info=$(ctr -a "$SOCK" -n k8s.io containers info "$c" 2>/dev/null) || continue
			jq -r '.Labels as $l |
				"\($l["io.kubernetes.pod.namespace"] // "")/\($l["io.kubernetes.pod.name"] // "") \($l["io.kubernetes.container.name"] // "(sandbox)")"' <<<"$info"
		done
		;;
	rm)
		local t0
		t0=$(now)
		if alive kubelet; then
			kctl delete pods --all-namespaces --field-selector "spec.nodeName=$NODE_NAME" --grace-period=1 --wait=true --timeout=60s >/dev/null 2>&1 || true
		fi
		node_down
		(PIDS=$DIR/run/pids && alive kube-apiserver) && kctl delete node "$NODE_NAME" --ignore-not-found >/dev/null
		rm -rf "${NODES:?}/$N"
		log "node $N removed in $(since "$t0")s"
		;;
	*) die "usage: $0 node add|kill|start|cut|mend|tasks|rm N" ;;
	esac
}

# ------------------------------------------------------------------------------- images, env

# containerd's name of a Docker reference: docker.io/library/x:latest for x.
normalize_ref() {
	local r=$1 first
	case "${r##*/}" in *:* | *@*) ;; *) r="$r:latest" ;; esac
	first=${r%%/*}
	if [ "$first" = "$r" ]; then
		r="docker.io/library/$r"
	elif [[ "$first" != *.* && "$first" != *:* && "$first" != localhost ]]; then
		r="docker.io/$r"
	fi
	echo "$r"
}

cmd_import_image() {
	[ $# = 1 ] || die "usage: $0 import-image REF"
	local n
	for n in 1 $(nodes); do
		(use_node "$n" && import_image "$1") >/dev/null
	done
	normalize_ref "$1"
}

# import_image REF: into node NODE's containerd.
import_image() {
	local ref=$1 name id t0
	t0=$(now)
	ctr -a "$SOCK" version >/dev/null 2>&1 || die "node $NODE's containerd does not answer at $SOCK: run $0 up"
	id=$(docker image inspect -f '{{.Id}}' "$ref") || die "the Docker engine has no image $ref"
	name=$(normalize_ref "$ref")
	if ctr -a "$SOCK" -n k8s.io images ls "name==$name" | grep -q "dev.sandpit.docker-id=$id"; then
		log "$name ($id) is already on node $NODE"
		echo "$name"
		return
	fi
	docker save "$ref" | ctr -a "$SOCK" -n k8s.io images import - >/dev/null
	ctr -a "$SOCK" -n k8s.io images label "$name" "dev.sandpit.docker-id=$id" >/dev/null
	log "imported $ref as $name on node $NODE in $(since "$t0")s"
	echo "$name"
}

cmd_env() {
	# The settings this cluster was started with, for the tests that run this script (node).
	printf 'export SANDPIT_KUBE_DIR=%q\n' "$DIR"
	env | grep -E '^SANDPIT_KUBE_[A-Z_]+=' | grep -v '^SANDPIT_KUBE_DIR=' | sed 's/^/export /' || true
	printf 'export SANDPIT_TEST_KUBECONFIG=%q\n' "$KUBECONFIG_ADMIN"
	printf 'export SANDPIT_TEST_KUBE_CONTAINERD=%q\n' "$SOCK"
	printf 'export KUBECONFIG=%q\n' "$KUBECONFIG_ADMIN"
	# The RuntimeClass the tests run a gVisor variant of the conformance suite with.
	if [ -f "$ETC/runsc.toml" ]; then
		printf 'export SANDPIT_TEST_KUBE_RUNTIME_CLASS=gvisor\n'
	else
		printf 'unset SANDPIT_TEST_KUBE_RUNTIME_CLASS\n'
	fi
	case ":$PATH:" in *":$BIN:"*) ;; *) printf 'export PATH=%q:%q:"$PATH"\n' "$BIN" "$DEBS/bin" ;; esac
}

rss_mib() { awk '/VmRSS/ { printf "%d", $2 / 1024 }' "/proc/$1/status" 2>/dev/null || echo 0; }

cmd_status() {
	local n any=0 total=0 r p shims=0 nshims=0 known=""
	for n in etcd kube-apiserver kube-scheduler kube-controller-manager node-ns containerd kubelet; do
		if alive "$n"; then
			r=$(rss_mib "$(pid_of "$n")")
			printf '%-24s pid %-8s rss %5d MiB\n' "$n" "$(pid_of "$n")" "$r"
			total=$((total + r)) any=1 known+=" $(pid_of "$n") "
		fi
	done
	for n in $(nodes); do
		while read -r p r; do
			printf '%-24s pid %-8s rss %5d MiB\n' "$p" "$r" "$(rss_mib "$r")"
			total=$((total + $(rss_mib "$r"))) any=1
		done < <(use_node "$n" && for p in node-ns containerd kubelet; do alive "$p" && echo "node-$n-$p $(pid_of "$p")"; done)
	done
	[ $any = 1 ] || { echo "not running"; return; }
	# The rest of node 1's namespace: containerd's shims (pods' own processes are in cgroups).
	for p in $(ns_members "$(cat "$RUN/node-ns.inode" 2>/dev/null)"); do
		[[ "$known" == *" $p "* ]] && continue
		shims=$((shims + $(rss_mib "$p"))) nshims=$((nshims + 1))
	done
	printf '%-24s %-12s rss %5d MiB\n' "shims ($nshims)" "" "$shims"
	# gVisor's sentries and gofers (in namespaces of their own; their shims are counted above).
	local gv=0 ngv=0
	for p in $(gvisor_pids); do
		[[ "$known" == *" $p "* ]] && continue
		[ "$(readlink "/proc/$p/ns/mnt")" = "$(cat "$RUN/node-ns.inode" 2>/dev/null)" ] && continue
		gv=$((gv + $(rss_mib "$p"))) ngv=$((ngv + 1))
	done
	[ $ngv = 0 ] || printf '%-24s %-12s rss %5d MiB\n' "gVisor sandboxes ($ngv)" "" "$gv"
	printf '%-24s %-12s rss %5d MiB\n' total "" $((total + shims + gv))
	if alive kube-apiserver; then kctl get nodes -o wide 2>&1 || true; fi
}

# -------------------------------------------------------------------------------------- down

stop_daemon() { # name seconds
	local name=$1 t=${2:-20} pid i
	pid=$(pid_of "$name") || return 0
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < t * 10; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$pid" 2>/dev/null; then
			log "$name did not stop in ${t}s: SIGKILL"
			kill -KILL "$pid" 2>/dev/null || true
			sleep 0.2
		fi
	fi
	rm -f "$PIDS/$name.pid"
}

cgroup_dirs() { # every cgroup of ours, deepest first
	local c
	for c in /sys/fs/cgroup/*/"${CGROUP_ROOT#/}"; do
		[ -d "$c" ] && find "$c" -depth -type d
	done
	return 0
}

# PIDs in the node's mount namespace: namespace $1 (mnt:[inode]) and, since a dead namespace's
# inode number is reused, /var overlaid from our state dir.
ns_members() {
	local p
	for p in $(find /proc -mindepth 3 -maxdepth 3 -path '/proc/[0-9]*/ns/mnt' -printf '%p %l\n' 2>/dev/null |
		awk -v ns="$1" '$2 == ns { split($1, f, "/"); print f[3] }'); do
		grep -qF "upperdir=$RUN/var/upper" "/proc/$p/mountinfo" 2>/dev/null && echo "$p"
	done
	return 0
}

# PIDs of this cluster's gVisor: shims and each sandbox's sentry and gofer, which live in mount
# namespaces of their own. Found by executable (the cached binaries, which another cluster on
# the machine may run too) and by this cluster's runsc root or containerd socket on the command
# line, never by name. (A sandbox's systrap stubs are in its pod's cgroup and die with it.)
gvisor_pids() {
	local p
	for p in $(find /proc -mindepth 2 -maxdepth 2 -path '/proc/[0-9]*/exe' -printf '%p %l\n' 2>/dev/null |
		awk -v a="$GVBIN/runsc" -v b="$GVBIN/containerd-shim-runsc-v1.real" '
			{ l = $2; sub(/ \(deleted\)$/, "", l) } l == a || l == b { split($1, f, "/"); print f[3] }'); do
		tr '\0' '\n' <"/proc/$p/cmdline" 2>/dev/null | grep -qE "^(--root=)?($RUN/runsc/|$SOCK$)" && echo "$p"
	done
	return 0
}

node_ns_pids() { # processes in the node's mount namespace, in our cgroups, or of our gVisor
	local ns p
	ns=$(cat "$RUN/node-ns.inode" 2>/dev/null || true)
	[ -n "$ns" ] && ns_members "$ns"
	cgroup_dirs | while read -r c; do cat "$c/cgroup.procs" 2>/dev/null; done
	gvisor_pids
	return 0
}

# gVisor sandboxes containerd left behind (a shim that died, a half-created container):
# runsc delete --force stops each one's sentry and gofer.
delete_runsc_containers() {
	local ns id
	[ -x "$GVBIN/runsc" ] || return 0
	for ns in "$RUN"/runsc/*/; do
		[ -d "$ns" ] || continue
		for id in $("$GVBIN/runsc" --root "$ns" list -q 2>/dev/null); do
			timeout 20 "$GVBIN/runsc" --root "$ns" delete --force "$id" >/dev/null 2>&1 || true
		done
	done
}

cmd_down() {
	local t0 n
	t0=$(now)
	mkdir -p "$PIDS"
	# Let the kubelets tear pods down (unmounts, CNI DEL) while they and the apiserver run.
	if alive kube-apiserver && alive kubelet; then
		kctl delete pods --all --all-namespaces --grace-period=1 --wait=true --timeout=60s >/dev/null 2>&1 || true
	fi
	for n in $(nodes); do (use_node "$n" && node_down); done
	node_down
	stop_daemon kube-controller-manager 10
	stop_daemon kube-scheduler 10
	stop_daemon kube-apiserver 20
	stop_daemon etcd 20
	ip link del "$BRIDGE" 2>/dev/null || true
	log "down in $(since "$t0")s"
	cmd_check
}

# Prove the host is as before: no process, cgroup, mount, port, host path or iptables rule.
# node_check prints what node NODE left: processes, gVisor sandboxes, cgroups.
node_check() {
	local n p ns
	for n in node-ns containerd kubelet; do
		alive "$n" && echo "LEFT: node $NODE's $n runs (pid $(pid_of "$n"))"
	done
	ns=$(cat "$RUN/node-ns.inode" 2>/dev/null || true)
	if [ -n "$ns" ]; then
		for p in $(ns_members "$ns"); do echo "LEFT: process $p in node $NODE's namespace"; done
	fi
	for p in $(gvisor_pids); do echo "LEFT: gVisor process $p ($(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | cut -c1-80))"; done
	for p in $(cgroup_dirs); do echo "LEFT: cgroup $p"; done
	return 0
}

cmd_check() {
	local bad=0 n p before left
	for n in etcd kube-apiserver kube-scheduler kube-controller-manager; do
		alive "$n" && { echo "LEFT: $n runs (pid $(pid_of "$n"))"; bad=1; }
	done
	left=$(node_check; for n in $(nodes); do (use_node "$n" && node_check); done)
	[ -z "$left" ] || { echo "$left"; bad=1; }
	# This cluster's paths, and the node's private /var and /run (named as any cluster's: they
	# are never on the host's side), not another cluster's beside it.
	local mounts="$DIR|sandpit-kube-(var|run) "
	if grep -E "$mounts" /proc/self/mountinfo /proc/1/mountinfo >/dev/null 2>&1; then
		echo "LEFT: mounts: $(grep -hE "$mounts" /proc/self/mountinfo /proc/1/mountinfo | cut -d' ' -f5 | sort -u | tr '\n' ' ')"
		bad=1
	fi
	for p in $PORTS; do port_open "$p" && { echo "LEFT: port $p open"; bad=1; }; done
	before=$(cat "$RUN/host-paths-before" 2>/dev/null || true)
	for p in $HOST_PATHS; do
		[ -e "$p" ] && ! grep -qx "$p" <<<"$before" || continue
		case $p in
		/var/* | /run/*) echo "note: $p appeared on the host while this cluster ran (not from its node, which sees /var and /run privately)" ;;
		*) echo "LEFT: $p appeared on the host"; bad=1 ;;
		esac
	done
	if command -v iptables-save >/dev/null && iptables-save 2>/dev/null | grep -qiE "sandpit|198\.1[89]\."; then
		echo "LEFT: iptables rules: $(iptables-save | grep -ciE "sandpit|198\.1[89]\.")"
		bad=1
	fi
	left=$(ip -o link 2>/dev/null | awk -F': ' '{ sub(/@.*/, "", $2); print $2 }' | grep -xE "$BRIDGE|$VETH_PREFIX[0-9]+" || true)
	if [ -n "$left" ]; then echo "LEFT: network links $(echo $left)"; bad=1; fi
	if [ $bad = 0 ]; then
		echo "clean: no process, cgroup, mount, open port ($PORTS), host path or iptables rule left"
	fi
	return $bad
}

cmd_purge() {
	cmd_down || true
	rm -rf "$DIR"
	log "removed $DIR"
}

usage() {
	sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'
	exit 2
}

# Sourced (for debugging), define the functions only.
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

case "${1:-}" in
build) shift && cmd_build "$@" ;;
up) cmd_up ;;
node) shift && cmd_node "$@" ;;
import-image) shift && cmd_import_image "$@" ;;
env) cmd_env ;;
status) cmd_status ;;
down) cmd_down ;;
check) cmd_check ;;
purge) cmd_purge ;;
*) usage ;;
esac
