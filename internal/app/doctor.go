package app

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	apiclient "github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/config"
	"github.com/sandpit-dev/sandpit/internal/datadir"
	"github.com/sandpit-dev/sandpit/internal/egress"
	"github.com/sandpit-dev/sandpit/internal/runtime/docker"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// Check is one requirement that Doctor checked. The JSON field names are the public API.
type Check struct {
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Detail says what was found; Fix what to do when OK is false.
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
	// Required says whether sandpit cannot work without it (otherwise it is advice).
	Required bool `json:"required"`
}

// ConfigSource says which configuration Doctor checks.
type ConfigSource struct {
	// Name describes it in the report, such as "config file /etc/sandpit.json" or "the
	// defaults and SANDPIT_* variables".
	Name string
	// Err is why it could not be loaded (nil when it was); Doctor validates what was loaded.
	Err error
	// Ignored says what was set and ignored, one sentence each ("SANDPIT_SLOT is not a
	// sandpit setting and is ignored (did you mean SANDPIT_SLOTS?)").
	Ignored []string
}

// Doctor checks every requirement of running sandpit with cfg (read from src) on this machine,
// and whether a daemon answers at url. A configuration that could not be loaded or is invalid
// is a failed check (the others that need it are not made). When a daemon answers at url, the
// settings it serves (network, package index, slots: GET /v1/limits) are checked in place of
// cfg's, and the configuration check says so and names those that differ.
func Doctor(ctx context.Context, cfg config.Config, src ConfigSource, url string) []Check {
	var checks []Check
	add := func(c Check) { checks = append(checks, c) }

	d := askDaemon(ctx, cfg.Token, url)
	if err := cmp.Or(src.Err, cfg.Validate()); err != nil {
		add(Check{Name: "configuration", Required: true, Detail: fmt.Sprintf("%s: %v", src.Name, err),
			Fix: "correct the settings named above (config file, SANDPIT_* variables, --config), then run `sandpit doctor` again"})
		return append(checks, d.check)
	}
	conf := Check{Name: "configuration", OK: true, Required: true, Detail: "valid: " + src.Name}
	if d.limits != nil {
		var differ []string
		cfg, differ = d.overlay(cfg)
		conf.Detail += "; the daemon at " + url + " answers, so its network, package index and slots were checked"
		if len(differ) > 0 {
			conf.Detail += " (they differ from this configuration's: " + strings.Join(differ, "; ") + ")"
		}
	}
	add(conf)
	if len(src.Ignored) > 0 {
		add(Check{Name: "ignored settings", Detail: strings.Join(src.Ignored, "; "),
			Fix: "rename each to the setting it was meant to be, or unset it"})
	}
	add(networkCheck(cfg))

	exe, err := cfg.Executor()
	if err == nil {
		err = executorFile(exe)
	}
	if err != nil {
		add(Check{Name: "executor binary", Required: cfg.Runtime != config.RuntimeKubernetes, Detail: err.Error(), Fix: "run `make build`, or set executor_path to a built sandpit-executor"})
	} else {
		add(Check{Name: "executor binary", OK: true, Required: true, Detail: exe})
	}

	add(dataDirCheck(cfg.DataDir, cfg.Token != ""))
	add(ledgerCheck(cfg))
	add(hibernationCheck(cfg))
	if cfg.DatabaseURL != "" {
		add(databaseCheck(ctx, cfg.DatabaseURL))
	}

	if cfg.Runtime == config.RuntimeKubernetes {
		checks = append(checks, kubernetesChecks(ctx, cfg)...)
		if cfg.Kubernetes.Templates() {
			checks = append(checks, kubeTemplateChecks(ctx, cfg)...)
		}
		add(d.check)
		return checks
	}
	api, err := DockerClient(cfg)
	if err == nil {
		defer api.Close()
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var version string
		version, err = serverVersion(pctx, api)
		cancel()
		if err == nil {
			add(Check{Name: "docker engine", OK: true, Required: true, Detail: "Docker Engine " + version})
			add(runtimeCheck(ctx, api, cfg))
			checks = append(checks, imageChecks(ctx, api, ChooseBaseImage(ctx, api, cfg), exe, d)...)
			if c, ok := templatesDoctor(ctx, api, cfg); ok {
				add(c)
			}
			add(buildNetworkCheck(version))
		}
	}
	if err != nil {
		fix := "start Docker (Linux: sudo systemctl start docker; macOS: colima start), or run `sandpit setup --install`"
		if addr := cmp.Or(cfg.DockerHost, os.Getenv("DOCKER_HOST")); addr != "" {
			fix = "check the engine address " + addr + " (docker_host, SANDPIT_DOCKER_HOST or DOCKER_HOST), or unset it to use this machine's engine"
		}
		add(Check{Name: "docker engine", Required: true, Detail: err.Error(), Fix: fix})
	}

	add(d.check)
	if d.check.OK {
		ectx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		add(e2bCheck(ectx, cfg, url))
	}
	return checks
}

// daemonView is what the daemon at a URL answered: its check, and its limits when it answers.
type daemonView struct {
	url    string
	check  Check
	limits *apitype.Limits // nil when no daemon answers
}

// askDaemon asks url whether a daemon answers, is ready, and with which settings.
func askDaemon(ctx context.Context, token, url string) daemonView {
	d := daemonView{url: url}
	c := apiclient.New(url, nil).WithToken(token)
	hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := c.Health(hctx); err != nil {
		d.check = Check{Name: "daemon", Detail: fmt.Sprintf("none answers at %s", url),
			Fix: "start it with `sandpit serve` (needed for saved code, jobs, the ledger and MCP over HTTP)"}
		return d
	}
	if lim, err := c.Limits(hctx); err == nil {
		d.limits = &lim
	}
	w, err := c.Warmth(hctx)
	if err != nil {
		d.check = Check{Name: "daemon", Detail: fmt.Sprintf("answers at %s but is not ready: %v", url, err),
			Fix: "wait a few seconds; if it stays so, see the daemon's log"}
		return d
	}
	d.check = Check{Name: "daemon", OK: true, Detail: "ready at " + url}
	switch {
	case w == nil:
	case w.ForkOff != "":
		d.check.Detail += fmt.Sprintf("; %d of %d slots up; runs start cold: %s", w.SlotsUp, w.Slots, w.ForkOff)
	case w.Warm:
		d.check.Detail += fmt.Sprintf("; all %d slots up, starting runs as forks", w.Slots)
	default:
		// Ready, but its first runs are cold (seconds each) until the fork servers are up.
		d.check.OK = false
		d.check.Detail += fmt.Sprintf("; %d of %d slots up, %d starting runs as forks: runs start cold (slower) until the others have imported the preload",
			w.SlotsUp, w.Slots, w.ForkSlots)
		d.check.Fix = "wait (about half a minute after a start on a busy machine) and run `sandpit doctor` again; a program can wait for GET /readyz?warm=true to answer 200"
	}
	return d
}

// overlay returns cfg with the daemon's network, package index and slots, and what differed,
// in config keys.
func (d daemonView) overlay(cfg config.Config) (config.Config, []string) {
	l := d.limits
	var differ []string
	note := func(key string, mine, its any) {
		if fmt.Sprint(mine) != fmt.Sprint(its) {
			differ = append(differ, fmt.Sprintf("%s %v here, %v in the daemon", key, mine, its))
		}
	}
	note("network", cfg.Network, l.Network)
	note("network_allow", cfg.NetworkAllow, l.NetworkAllow)
	note("index_url", fmt.Sprintf("%q", cfg.IndexURL), fmt.Sprintf("%q", l.PackageIndex.IndexURL))
	note("extra_index_urls", cfg.ExtraIndexURLs, l.PackageIndex.ExtraIndexURLs)
	note("trusted_hosts", cfg.TrustedHosts, l.PackageIndex.TrustedHosts)
	note("slots", cfg.Slots, l.Slots)
	cfg.Network, cfg.NetworkAllow, cfg.Slots = l.Network, slices.Clone(l.NetworkAllow), l.Slots
	cfg.IndexURL, cfg.ExtraIndexURLs, cfg.TrustedHosts = l.PackageIndex.IndexURL, l.PackageIndex.ExtraIndexURLs, l.PackageIndex.TrustedHosts
	cfg.BinaryOnly = l.PackageIndex.BinaryOnly
	return cfg, differ
}

// e2bCheck reports the daemon's E2B API: its sandboxes and its warm pool, read from /metrics.
func e2bCheck(ctx context.Context, cfg config.Config, url string) Check {
	c := Check{Name: "e2b api", Detail: fmt.Sprintf("%s%s; e2b_pool %d", strings.TrimRight(url, "/"), E2BPrefix, cfg.E2BPool)}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(url, "/")+"/metrics", nil)
	if err != nil {
		c.Detail += ": " + err.Error()
		return c
	}
	if cfg.Token != "" {
		req.Header.Set("Authorization", "Bearer "+cfg.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.Detail += ": reading /metrics: " + err.Error()
		return c
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	values := map[string]string{}
	for line := range strings.SplitSeq(string(body), "\n") {
		if name, v, ok := strings.Cut(line, " "); ok && strings.HasPrefix(name, "sandpit_e2b_") {
			values[name] = v
		}
	}
	warm, running := values["sandpit_e2b_warm_sandboxes"], values["sandpit_e2b_sandboxes"]
	if warm == "" {
		c.Detail += ": the daemon does not report its E2B sandboxes (an older sandpit?)"
		return c
	}
	c.OK = true
	c.Detail += fmt.Sprintf(": %s sandboxes, %s warm and ready", running, warm)
	if cfg.E2BPool > 0 && warm == "0" {
		c.Fix = "the warm pool is empty: it refills in the background; if it stays so, sessions_max may be reached (see the daemon's log)"
	}
	return c
}

// ledgerCheck shows the ledger's retention, and notes a byte budget the data directory's disk
// cannot hold, or none at all.
func ledgerCheck(cfg config.Config) Check {
	bound := func(n int64, unit string) string {
		if n == 0 {
			return "no " + unit + " limit"
		}
		return fmt.Sprintf("%d %s", n, unit)
	}
	size := "no byte limit"
	if cfg.LedgerMaxBytes > 0 {
		size = config.FormatSize(cfg.LedgerMaxBytes)
	}
	c := Check{Name: "ledger", OK: true, Detail: fmt.Sprintf("keeps %s, %s, %s with their output files (ledger_max_age_days, ledger_max_executions, ledger_max_bytes)",
		bound(cfg.LedgerMaxAgeDays, "days"), bound(cfg.LedgerMaxExecutions, "records"), size)}
	if cfg.LedgerMaxBytes == 0 {
		c.OK, c.Fix = false, "set ledger_max_bytes (such as 2GiB): without it, runs at their output caps can fill the disk"
		return c
	}
	if cfg.DatabaseURL != "" {
		return c // the records are in PostgreSQL, on its disk
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(cfg.DataDir, &fs); err == nil {
		if free := int64(fs.Bavail) * int64(fs.Bsize); free < cfg.LedgerMaxBytes {
			c.OK = false
			c.Detail += fmt.Sprintf("; %s has %.1f GiB free, less than ledger_max_bytes", cfg.DataDir, float64(free)/(1<<30))
			c.Fix = "free disk space, or lower ledger_max_bytes: the ledger may grow to it (what it holds now is part of it)"
		}
	}
	return c
}

// dataDirCheck checks that dir is a writable data directory with room, private to its owner
// (required when the daemon has a token, which then refuses an exposed one).
func dataDirCheck(dir string, token bool) Check {
	c := Check{Name: "data directory", Required: true}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		c.Detail, c.Fix = err.Error(), "set data_dir (SANDPIT_DATA_DIR) to a directory you can write"
		return c
	}
	f, err := os.CreateTemp(dir, ".doctor-*")
	if err != nil {
		c.Detail, c.Fix = err.Error(), "make "+dir+" writable, or set data_dir to another directory"
		return c
	}
	f.Close()
	os.Remove(f.Name())
	if why, err := datadir.Exposed(dir); err != nil || why != "" {
		c.Detail, c.Required = cmp.Or(why, fmt.Sprint(err)), token
		c.Fix = "chmod 700 " + dir + " (a daemon with a token refuses to start on a data directory others can read)"
		return c
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err == nil {
		free := int64(fs.Bavail) * int64(fs.Bsize)
		gib := float64(free) / (1 << 30)
		if free < 1<<30 {
			c.Detail, c.Fix = fmt.Sprintf("%s has %.2f GiB free", dir, gib), "free some disk space (the ledger and images need room)"
			return c
		}
		c.Detail = fmt.Sprintf("%s, %.1f GiB free", dir, gib)
	} else {
		c.Detail = dir
	}
	c.OK = true
	return c
}

func imageChecks(ctx context.Context, api client.APIClient, cfg config.Config, exe string, d daemonView) []Check {
	var checks []Check
	if _, err := api.ImageInspect(ctx, cfg.BaseImage); err != nil {
		checks = append(checks, Check{Name: "base image", Required: true, Detail: cfg.BaseImage + " is not in the engine",
			Fix: "docker pull " + cfg.BaseImage + ", or without a registry: scripts/offline-base-image.sh (base_image unset chooses " + config.OfflineBaseImage + " when the engine has it)"})
	} else {
		checks = append(checks, Check{Name: "base image", OK: true, Required: true, Detail: cfg.BaseImage})
	}
	if exe == "" {
		return checks
	}
	rcfg, err := RuntimeConfig(cfg, nil)
	if err != nil {
		return checks
	}
	img, err := docker.Resolve(ctx, api, rcfg.Recipe)
	switch {
	case err != nil:
		checks = append(checks, Check{Name: "sandbox image", Detail: err.Error(), Fix: "run `sandpit image build`"})
	default:
		if _, err := api.ImageInspect(ctx, img.Tag); err != nil {
			checks = append(checks, Check{Name: "sandbox image", Detail: img.Tag + " is not built yet",
				Fix: "run `sandpit setup` or `sandpit image build` (the first run builds it otherwise)"})
		} else {
			checks = append(checks, Check{Name: "sandbox image", OK: true, Detail: img.Tag})
		}
	}
	list, err := docker.Containers(ctx, api, filepath.Clean(cfg.DataDir))
	warm, running := warmCheck(list, err, cfg, d)
	checks = append(checks, warm)
	checks = append(checks, seccompCheck(ctx, api, cfg, running), socketMemoryCheck(ctx, api, cfg, running))
	if cfg.Network == "allowlist" && cfg.IndexURL != "" {
		checks = append(checks, hostIndexCheck(ctx, cfg.IndexURL))
	} else if err == nil && len(running) > 0 && cfg.IndexURL != "" {
		checks = append(checks, indexCheck(ctx, api, running[0], cfg.IndexURL))
	}
	return checks
}

// warmCheck is the check of the warm containers among list, the containers of cfg's data
// directory (listErr: why they could not be listed), and the IDs of those running. It counts
// the slots' containers, one per slot of the daemon (d) when one answers, else of cfg; the
// sessions' containers (they are not slots: a trial saw "8 running, one per slot" with 4
// slots) are named beside them. A daemon that answers brings its slots' containers up itself
// (after a start, one at a time), and may use another data directory than cfg's.
func warmCheck(list []container.Summary, listErr error, cfg config.Config, d daemonView) (Check, []string) {
	var running []string
	sessions := 0
	for _, c := range list {
		switch _, slot := docker.SlotOf(c); {
		case c.State != "running":
		case slot:
			running = append(running, c.ID)
		default:
			sessions++
		}
	}
	slots := cfg.Slots
	if d.limits != nil {
		slots = d.limits.Slots
	}
	c := Check{Name: "warm containers"}
	switch {
	case listErr == nil && len(running) >= slots:
		c.OK, c.Detail = true, fmt.Sprintf("%d running, one per slot", len(running))
	case d.limits != nil && len(running) > 0:
		c.Detail = fmt.Sprintf("%d of %d running; the daemon at %s starts the others", len(running), slots, d.url)
		c.Fix = "wait a minute and check again (a new daemon starts its slots one after another); if it stays so, see the daemon's log"
	case d.limits != nil:
		c.Detail = fmt.Sprintf("none of data directory %s; the daemon at %s may use another (its data_dir) or be starting them", cfg.DataDir, d.url)
		c.Fix = "give this command the daemon's data_dir (--data-dir or SANDPIT_DATA_DIR), or wait a minute and check again"
	case listErr == nil && len(running) > 0:
		c.Detail, c.Fix = fmt.Sprintf("%d of %d running", len(running), slots), "start the daemon (`sandpit serve`): it brings every slot's container up"
	case listErr != nil:
		c.Detail, c.Fix = listErr.Error(), "check that the Docker engine answers (`docker ps`)"
	default:
		c.Detail, c.Fix = "not running", "run `sandpit setup` or `sandpit serve`"
	}
	if sessions > 0 {
		c.Detail += fmt.Sprintf(" (besides them, %d container(s) of sessions)", sessions)
	}
	return c, running
}

// runtimeCheck checks that the engine has the container runtime the configuration asks for.
func runtimeCheck(ctx context.Context, api client.APIClient, cfg config.Config) Check {
	c := Check{Name: "container runtime", Required: true}
	name := cmp.Or(cfg.ContainerRuntime(), "runc")
	info, err := api.Info(ctx, client.InfoOptions{})
	if err != nil {
		c.Detail = fmt.Sprintf("cannot read the engine's runtimes: %v", err)
		return c
	}
	if name == "runc" {
		c.OK, c.Detail = true, "runc (the engine's default: "+info.Info.DefaultRuntime+")"
		return c
	}
	rt, ok := info.Info.Runtimes[name]
	if !ok {
		c.Detail = fmt.Sprintf("runtime %q is not registered with the Docker engine (it has: %s)", name, strings.Join(slices.Sorted(maps.Keys(info.Info.Runtimes)), ", "))
		c.Fix = `install it (Debian: apt-get install runsc) and register it in /etc/docker/daemon.json: ` +
			`"runtimes": {"runsc": {"path": "/usr/bin/runsc", "runtimeArgs": ["--platform=ptrace", "--network=none"]}}, then reload the engine (kill -HUP $(pidof dockerd))`
		return c
	}
	c.OK, c.Detail = true, fmt.Sprintf("%s (%s %s)", name, rt.Path, strings.Join(rt.Args, " "))
	return c
}

// indexProbe fetches the URL in argv[1] and prints "ok STATUS" or "fail: WHY"; it is run
// inside the warm container, where pip runs.
const indexProbe = `import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=5) as r:
        print("ok", r.status)
except Exception as e:
    print("fail:", e)
`

// indexCheck asks for index from inside the warm container (id), as an unprivileged user in
// the container's network, which is where pip will reach it: an index that answers on this
// machine can still be out of the container's reach.
func indexCheck(ctx context.Context, api client.APIClient, id, index string) Check {
	c := Check{Name: "package index", Detail: index}
	fix := "make index_url an address the container reaches: this machine is host.docker.internal (Docker Desktop, Colima) " +
		"or the Docker bridge's gateway (`docker network inspect bridge`, usually 172.17.0.1), and the index must listen there; " +
		"with network none no index is reached (install while the network is on)"
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	created, err := api.ExecCreate(ctx, id, client.ExecCreateOptions{User: "65534:65534", AttachStdout: true, AttachStderr: true,
		Cmd: []string{"python3", "-I", "-c", indexProbe, index}})
	if err != nil {
		c.Detail, c.Fix = fmt.Sprintf("could not start a check in the warm container: %v", err), "run `sandpit setup`, then try again"
		return c
	}
	att, err := api.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		c.Detail, c.Fix = fmt.Sprintf("could not start a check in the warm container: %v", err), "run `sandpit setup`, then try again"
		return c
	}
	stop := context.AfterFunc(ctx, att.Close) // the hijacked connection does not watch ctx
	var stdout, stderr bytes.Buffer
	_, _ = stdcopy.StdCopy(&stdout, &stderr, att.Reader)
	stop()
	att.Close()
	answer := strings.TrimSpace(stdout.String())
	if status, ok := strings.CutPrefix(answer, "ok "); ok {
		c.OK, c.Detail = true, fmt.Sprintf("%s answers from inside the container (HTTP %s)", index, status)
		return c
	}
	why := strings.TrimSpace(strings.TrimPrefix(answer, "fail:"))
	if why == "" {
		why = cmp.Or(strings.TrimSpace(stderr.String()), "no answer within 15s")
	}
	c.Detail, c.Fix = fmt.Sprintf("%s does not answer from inside the container, where pip runs: %s", index, why), fix
	return c
}

// networkCheck shows the network policy in force: what runs and installs may reach.
func networkCheck(cfg config.Config) Check {
	c := Check{Name: "network policy", OK: true}
	switch cfg.Network {
	case "full":
		c.Detail = `full: runs reach the internet, the LAN, the host and cloud metadata (169.254.169.254)`
		c.Fix = `set network to "allowlist" and name the hosts runs may reach in network_allow`
		c.OK = false
	case "none":
		c.Detail = "none: runs reach nothing, and dependencies that are not installed cannot be installed"
	default:
		allow, err := egress.New(cfg.Egress())
		if err != nil {
			c.OK, c.Detail = false, err.Error()
			return c
		}
		runs, installs := allow.Rules()
		list := "nothing"
		if len(runs) > 0 {
			list = strings.Join(runs, ", ")
		}
		c.Detail = fmt.Sprintf("allowlist: runs reach %s; installs reach %s (through the proxy in each box)", list, strings.Join(installs, ", "))
	}
	return c
}

// hostIndexCheck asks for index from this machine: with network "allowlist" the daemon dials
// the package index for the sandboxes' installs (their proxy carries pip's connections to it).
func hostIndexCheck(ctx context.Context, index string) Check {
	c := Check{Name: "package index", Detail: index}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, index, nil)
	if err == nil {
		var resp *http.Response
		if resp, err = http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			c.OK, c.Detail = true, fmt.Sprintf("%s answers from this machine, where the daemon dials it for the sandboxes' installs (network allowlist; HTTP %d)",
				index, resp.StatusCode)
			return c
		}
	}
	c.Detail = fmt.Sprintf("%s does not answer from this machine, where the daemon dials it for the sandboxes' installs (network allowlist): %v", index, err)
	c.Fix = "make index_url an address this machine reaches (the daemon dials it; the sandboxes reach it through their proxy), and check that the index listens there"
	return c
}

// databaseCheck checks that the PostgreSQL database at url (database_url) answers.
func databaseCheck(ctx context.Context, url string) Check {
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	version, daemons, err := store.PingPostgres(pctx, url)
	if err != nil {
		return Check{Name: "database", Required: true, Detail: err.Error(),
			Fix: "start PostgreSQL, or correct database_url (SANDPIT_DATABASE_URL): host, port, user, password and database, and that this machine may connect"}
	}
	return Check{Name: "database", OK: true, Required: true,
		Detail: fmt.Sprintf("PostgreSQL %s at %s, shared by %d daemon(s) so far", version, store.RedactURL(url), daemons)}
}

// seccompCheck reports the seccomp profile in force: sandpit's own (docker.SeccompProfile),
// which the warm containers must carry, and under runsc that gVisor's kernel serves the system
// calls (it applies an OCI profile only when registered with --oci-seccomp).
func seccompCheck(ctx context.Context, api client.APIClient, cfg config.Config, running []string) Check {
	c := Check{Name: "seccomp profile", Detail: docker.SeccompSummary(cfg.Network)}
	info, err := api.Info(ctx, client.InfoOptions{})
	if err == nil && !slices.ContainsFunc(info.Info.SecurityOptions, func(o string) bool { return strings.Contains(o, "name=seccomp") }) {
		c.Required = true
		c.Detail = "the Docker engine has no seccomp support (docker info: Security Options), so sandpit's profile cannot be applied: " + c.Detail
		c.Fix = "use an engine built with seccomp on a kernel that has it (CONFIG_SECCOMP_FILTER), or runtime runsc"
		return c
	}
	if cfg.ContainerRuntime() == "runsc" && err == nil {
		if rt, ok := info.Info.Runtimes["runsc"]; ok && !slices.Contains(rt.Args, "--oci-seccomp") {
			c.Detail += "; under runsc gVisor's own kernel serves the system calls and applies no OCI profile (runsc without --oci-seccomp): it has no vsock, and its AIO and io_uring touch no host counter"
		}
	}
	want, other := docker.SeccompDigest(cfg.Network), 0
	for _, id := range running {
		ins, err := api.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err == nil && docker.SeccompDigestOf(ins.Container.HostConfig.SecurityOpt) != want {
			other++
		}
	}
	if other > 0 {
		c.Detail += fmt.Sprintf("; %d of the %d warm containers carry another profile", other, len(running))
		c.Fix = "restart the daemon (`sandpit serve`): it replaces containers made with other settings"
		return c
	}
	if len(running) > 0 {
		c.Detail += fmt.Sprintf("; in force on the %d warm containers", len(running))
	}
	c.OK = true
	return c
}

// socketMemoryCheck says whether a box's socket buffers count against its memory: cgroup v2
// charges them to the box's memory limit; cgroup v1 does not, and the daemon bounds the box's
// TCP buffers itself (memory.kmem.tcp.limit_in_bytes, which needs it on the engine's host as
// root), while v1 has no bound on UDP buffers (refused in the box unless network is full).
func socketMemoryCheck(ctx context.Context, api client.APIClient, cfg config.Config, running []string) Check {
	c := Check{Name: "socket buffers", OK: true}
	switch {
	case cfg.ContainerRuntime() == "runsc":
		c.Detail = "runsc: gVisor's network stack keeps socket buffers in the sandbox's own memory, under the box's limit"
		return c
	case docker.CgroupV2():
		c.Detail = "cgroup v2: socket buffers count against each box's memory limit"
		return c
	}
	c.Detail = fmt.Sprintf("cgroup v1 does not count socket buffers against a box's memory limit: sandpit caps each box's TCP buffers at %d MiB "+
		"(memory.kmem.tcp.limit_in_bytes) and each socket's at 4 MiB (tcp_rmem, tcp_wmem in the box's namespace)", docker.TCPMemoryBytes>>20)
	if cfg.Network == "full" {
		c.Detail += "; with network full, UDP buffers are bounded only by the host-wide udp_mem (cgroup v2 bounds them)"
	} else {
		c.Detail += "; runs make no UDP sockets (network " + cfg.Network + ")"
	}
	for _, id := range running {
		limit, on, err := docker.TCPMemoryLimit(ctx, api, id)
		switch {
		case err != nil:
			c.OK, c.Detail = false, c.Detail+"; cannot read a warm container's TCP limit: "+err.Error()
			c.Fix = "run the daemon as root on the engine's host so it can set each box's TCP limit, or move the host to cgroup v2 (systemd.unified_cgroup_hierarchy=1)"
		case !on || limit != docker.TCPMemoryBytes:
			c.OK, c.Detail = false, c.Detail+fmt.Sprintf("; warm container %.12s has no such TCP limit", id)
			c.Fix = "run the daemon as root on the engine's host (it sets the limit when it creates a container; `sandpit serve` replaces the rest), or use cgroup v2"
		default:
			continue
		}
		break
	}
	return c
}

// executorFile says why exe cannot be the executor binary: missing, not a regular file, or not
// executable (nil when it can be). Doctor checks the file itself: its path alone said ok for an
// executor_path that did not exist, and the image check then failed on it.
func executorFile(exe string) error {
	fi, err := os.Stat(exe)
	switch {
	case err != nil:
		return fmt.Errorf("no executor binary at %s: %w", exe, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", exe)
	case fi.Mode().Perm()&0o111 == 0:
		return fmt.Errorf("%s is not executable (mode %v)", exe, fi.Mode().Perm())
	}
	return nil
}
