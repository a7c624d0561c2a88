package executor

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandpit-dev/sandpit/internal/protocol"
	"github.com/sandpit-dev/sandpit/internal/requirement"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// installer installs dependencies with pip, as the installer user, into the package root:
//
//	root/cache          pip's cache (installer only)
//	root/home           the installer's HOME
//	root/pyX.Y/NAME-VERSION-RANDOM/   one requirement with its own dependencies, plus
//	                    .sandpit.json (its manifest); runs read it, never write it
//	root/pyX.Y/.tmp-*   an install in progress, renamed into place when complete
//
// The directory is keyed to the interpreter's version, so packages built for one Python are
// never loaded by another. One install runs at a time (they share the installer uid, which a
// timeout kills whole), and a requirement waiting behind another's install is checked again
// before pip starts: two runs asking for one missing package install it once.
type installer struct {
	e       *Executor
	root    string // "" when the box has no package directory
	site    string // root/pyX.Y
	uid     int
	python  string
	checker string

	mu        sync.Mutex // one install at a time
	satisfied sync.Map   // canonical requirement → resolution, once present
}

// checkerUID runs the checker: it only reads, and is not the installer, whose processes a
// timed-out install kills.
const checkerUID = 65534 // nobody

// resolution is how a requirement is satisfied: its version, and the directory to put on the
// run's sys.path ("" when the image itself has it).
type resolution struct {
	Version string `json:"version"`
	Path    string `json:"path"`
}

// manifest is the .sandpit.json of an installed directory.
type manifest struct {
	Requirement string    `json:"requirement"`
	Name        string    `json:"name"`
	Version     string    `json:"version"`
	InstalledAt time.Time `json:"installed_at"`
}

const manifestName = ".sandpit.json"

// newInstaller prepares the package root: owned by the installer, in-progress installs of a
// killed executor removed. A missing root disables installs.
func newInstaller(e *Executor, python, version string) (*installer, error) {
	in := &installer{e: e, uid: e.cfg.InstallerUID, python: python, checker: e.cfg.Checker}
	root := e.cfg.PackagesRoot
	if root == "" {
		return in, nil
	}
	if _, err := os.Stat(root); errors.Is(err, fs.ErrNotExist) {
		e.log.Warn("no package directory: dependencies cannot be installed", "path", root)
		return in, nil
	}
	major, minor, _ := strings.Cut(version, ".")
	minor, _, _ = strings.Cut(minor, ".")
	in.root, in.site = root, filepath.Join(root, "py"+major+"."+minor)
	if err := os.Chown(root, in.uid, in.uid); err != nil {
		return nil, fmt.Errorf("executor: handing the package directory to the installer: %w", err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		return nil, err
	}
	for dir, mode := range map[string]os.FileMode{filepath.Join(root, "cache"): 0o700, filepath.Join(root, "home"): 0o700,
		filepath.Join(root, "tmp"): 0o700, in.site: 0o755} {
		if err := os.MkdirAll(dir, mode); err != nil {
			return nil, fmt.Errorf("executor: preparing the package directory: %w", err)
		}
		if err := os.Chown(dir, in.uid, in.uid); err != nil {
			return nil, err
		}
	}
	// A killed executor's checkers and installs die with it (its container's processes only).
	for _, uid := range []int{in.uid, checkerUID} {
		if err := e.killAndWait(uid, e.cfg.KillTimeout); err != nil {
			return nil, fmt.Errorf("executor: stopping leftover installs: %w", err)
		}
	}
	// What unfinished installs left is removed now unless another sandbox sharing the
	// volume is installing (then the next install, which holds the lock, removes it).
	now, cancel := context.WithCancel(context.Background())
	cancel() // one try: no waiting
	if unlock, err := in.lockVolume(now); err == nil {
		in.clearLeftovers()
		unlock()
	}
	return in, nil
}

// install decides each requirement: present (cached, in the image, or installed earlier),
// installed now, or failed; then it checks that the directories together give every
// requirement a version it accepts (a package installed with its own dependencies may carry
// another version of one the run asked for).
func (in *installer) install(ctx context.Context, req protocol.Install, progress func(sandbox.DependencyStatus)) sandbox.Installed {
	reqs := req.Request.Requirements
	began := time.Now()
	statuses := make([]sandbox.DependencyStatus, len(reqs))
	found := make([]resolution, len(reqs))
	decided := func(i int, st sandbox.DependencyStatus, res resolution) {
		st.Requirement, st.DurationMS = reqs[i], time.Since(began).Milliseconds()
		if st.Status != sandbox.DependencyFailed {
			st.Version = res.Version
		}
		statuses[i], found[i] = st, res
	}

	// What the cache does not know is checked by one checker run for the whole request.
	var unknown []int
	for i, r := range reqs {
		if _, err := requirement.Parse(r); err != nil { // the daemon checked it; the executor trusts nobody
			decided(i, failed("%v", err), resolution{})
		} else if v, ok := in.satisfied.Load(r); ok && in.stillThere(v.(resolution)) {
			decided(i, sandbox.DependencyStatus{Status: sandbox.DependencyPresent}, v.(resolution))
		} else {
			unknown = append(unknown, i)
		}
	}
	var missing []int
	if len(unknown) > 0 {
		batch := make([]string, len(unknown))
		for k, i := range unknown {
			batch[k] = reqs[i]
		}
		answers, err := in.check(ctx, batch)
		for k, i := range unknown {
			switch {
			case err != nil:
				decided(i, failed("checking whether it is installed failed: %v", err), resolution{})
			case answers[k].present:
				in.satisfied.Store(reqs[i], answers[k].res)
				decided(i, sandbox.DependencyStatus{Status: sandbox.DependencyPresent}, answers[k].res)
			default:
				missing = append(missing, i)
			}
		}
	}
	for _, i := range missing {
		st, res := in.installMissing(ctx, reqs[i], req)
		decided(i, st, res)
	}

	var out sandbox.Installed
	for i := range reqs {
		if statuses[i].Status != sandbox.DependencyFailed && found[i].Path != "" && !slices.Contains(out.Paths, found[i].Path) {
			out.Paths = append(out.Paths, found[i].Path)
		}
	}
	if len(out.Paths) > 0 && len(reqs) > 1 {
		in.verify(ctx, reqs, out.Paths, statuses)
	}
	for _, st := range statuses {
		if progress != nil {
			progress(st)
		}
	}
	out.Dependencies = statuses
	return out
}

// installMissing installs r, which the checker did not find, unless another request
// installed it meanwhile or the network policy forbids it.
func (in *installer) installMissing(ctx context.Context, r string, req protocol.Install) (sandbox.DependencyStatus, resolution) {
	switch {
	case req.Request.Offline:
		return failed("it is not installed, and the sandbox's network policy is \"none\", so pip cannot fetch it: " +
			"run with network \"full\" (it stays installed afterwards), or add it to the image's packages"), resolution{}
	case in.root == "":
		return failed("it is not installed, and this sandbox has no package directory to install it into"), resolution{}
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	unlock, err := in.lockVolume(ctx)
	if err != nil {
		return failed("waiting for another sandbox's install to finish: %v", err), resolution{}
	}
	defer unlock()
	in.clearLeftovers()
	// Another request (here or in another sandbox) may have installed it while this one waited.
	if answers, err := in.check(ctx, []string{r}); err == nil && answers[0].present {
		in.satisfied.Store(r, answers[0].res)
		return sandbox.DependencyStatus{Status: sandbox.DependencyPresent}, answers[0].res
	}
	res, err := in.pip(ctx, r, req)
	if err != nil {
		return failed("%v", err), resolution{}
	}
	in.satisfied.Store(r, res)
	return sandbox.DependencyStatus{Status: sandbox.DependencyInstalled}, res
}

func failed(format string, args ...any) sandbox.DependencyStatus {
	return sandbox.DependencyStatus{Status: sandbox.DependencyFailed, Error: fmt.Sprintf(format, args...)}
}

// answer is the checker's verdict on one requirement.
type answer struct {
	present bool
	res     resolution
}

// checkers bounds the checker processes running at once.
var checkers = make(chan struct{}, 2)

// runChecker runs deps.py with job on its stdin, as the checker user, and decodes its answer
// (a list with one entry per requirement) into out.
func (in *installer) runChecker(ctx context.Context, job any, n int, out any) error {
	select {
	case checkers <- struct{}{}:
		defer func() { <-checkers }()
	case <-ctx.Done():
		return ctx.Err()
	}
	data, _ := json.Marshal(job)
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, in.python, "-I", in.checker)
	cmd.Stdin = bytes.NewReader(data)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	asUser(cmd, checkerUID, "/")
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v: %s", err, lastLines(stderr.String(), 3))
	}
	if err := json.Unmarshal(stdout.Bytes(), out); err != nil {
		return fmt.Errorf("the checker's answer %q is not a list of %d statuses", lastLines(stdout.String(), 1), n)
	}
	return nil
}

// check asks the checker about reqs against the image and the installed directories.
func (in *installer) check(ctx context.Context, reqs []string) ([]answer, error) {
	var dirs []string
	if in.site != "" {
		entries, _ := os.ReadDir(in.site)
		for _, e := range entries {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
				dirs = append(dirs, filepath.Join(in.site, e.Name()))
			}
		}
	}
	var got []struct {
		Status, Version, Path, Error string
	}
	if err := in.runChecker(ctx, map[string]any{"requirements": reqs, "dirs": dirs}, len(reqs), &got); err != nil {
		return nil, err
	}
	if len(got) != len(reqs) {
		return nil, fmt.Errorf("the checker answered %d statuses for %d requirements", len(got), len(reqs))
	}
	out := make([]answer, len(reqs))
	for i, a := range got {
		switch a.Status {
		case "present":
			out[i] = answer{present: true, res: resolution{Version: a.Version, Path: a.Path}}
		case "invalid":
			return nil, errors.New(a.Error)
		}
	}
	return out, nil
}

// verify fails the requirements that the run's sys.path (paths, then the image) would not
// satisfy: a directory earlier on it holds another version of the package.
func (in *installer) verify(ctx context.Context, reqs, paths []string, statuses []sandbox.DependencyStatus) {
	var got []struct {
		OK  bool   `json:"ok"`
		Why string `json:"why"`
	}
	if err := in.runChecker(ctx, map[string]any{"mode": "verify", "requirements": reqs, "paths": paths}, len(reqs), &got); err != nil || len(got) != len(reqs) {
		for i := range statuses {
			if statuses[i].Status != sandbox.DependencyFailed {
				statuses[i].Status, statuses[i].Error = sandbox.DependencyFailed, fmt.Sprintf("checking the requirements together failed: %v", err)
			}
		}
		return
	}
	for i, g := range got {
		if !g.OK && statuses[i].Status != sandbox.DependencyFailed {
			statuses[i].Status = sandbox.DependencyFailed
			statuses[i].Error = fmt.Sprintf("it conflicts with another requirement asked for with it: %s; ask for versions that agree "+
				"(pip would refuse this combination too)", strings.ReplaceAll(g.Why, in.site+"/", ""))
		}
	}
}

// asUser makes cmd run as uid in its own process group, in home, with a minimal environment.
func asUser(cmd *exec.Cmd, uid int, home string) {
	cmd.Env = []string{"HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "TMPDIR=/tmp",
		"PIP_BREAK_SYSTEM_PACKAGES=1", "PIP_NO_INPUT=1", "PIP_DISABLE_PIP_VERSION_CHECK=1"}
	cmd.Dir = home
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true,
		Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), NoSetGroups: true}}
}

// pip installs r into a fresh directory and moves it into place when complete; a failed or
// killed install leaves nothing.
func (in *installer) pip(ctx context.Context, r string, req protocol.Install) (resolution, error) {
	timeout := req.Request.Timeout
	if timeout <= 0 {
		timeout = 120 * time.Second
	}
	var suffix [4]byte
	_, _ = rand.Read(suffix[:])
	tmp := filepath.Join(in.site, ".tmp-"+hex.EncodeToString(suffix[:]))
	defer os.RemoveAll(tmp) // gone after the rename; removed as root if pip left it

	args := []string{"-m", "pip", "install", "--no-input", "--disable-pip-version-check", "--no-warn-script-location",
		"--progress-bar", "off", "--target", tmp, "--cache-dir", filepath.Join(in.root, "cache"),
		"--timeout", strconv.Itoa(pipReadTimeoutS), "--retries", "1"}
	if o := req.Pip; o.IndexURL != "" {
		args = append(args, "--index-url", o.IndexURL)
	}
	for _, u := range req.Pip.ExtraIndexURLs {
		args = append(args, "--extra-index-url", u)
	}
	for _, h := range req.Pip.TrustedHosts {
		args = append(args, "--trusted-host", h)
	}
	if req.Pip.BinaryOnly {
		args = append(args, "--only-binary", ":all:")
	}
	args = append(args, "--", r)

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.Command(in.python, args...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	asUser(cmd, in.uid, filepath.Join(in.root, "home"))
	// pip's work files go to the volume, not the runs' shared /tmp, and are removed after.
	pipTmp := filepath.Join(in.root, "tmp")
	cmd.Env = append(append(cmd.Env, "TMPDIR="+pipTmp), in.e.cfg.proxyEnv()...)
	defer in.clearTmp()
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return resolution{}, fmt.Errorf("starting pip: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = in.e.killAndWait(in.uid, in.e.cfg.KillTimeout) // pip and everything it started
		<-done
		if ctx.Err() == context.DeadlineExceeded && time.Since(began) >= timeout {
			return resolution{}, pipTimedOut(timeout, out.String(), req.Pip)
		}
		return resolution{}, fmt.Errorf("the install was cancelled: %w", ctx.Err())
	}
	_ = in.e.killAndWait(in.uid, in.e.cfg.KillTimeout) // nothing of pip may outlive it
	if err != nil {
		return resolution{}, pipError(out.String(), req.Pip)
	}

	name := requirementName(r)
	version := installedVersion(tmp, name)
	if version == "" {
		return resolution{}, fmt.Errorf("pip succeeded but installed no %s distribution: %s", name, lastLines(out.String(), 3))
	}
	m, _ := json.Marshal(manifest{Requirement: r, Name: name, Version: version, InstalledAt: time.Now().UTC()})
	if err := os.WriteFile(filepath.Join(tmp, manifestName), m, 0o644); err != nil {
		return resolution{}, fmt.Errorf("writing the manifest: %w", err)
	}
	final := filepath.Join(in.site, fmt.Sprintf("%s-%s-%s", name, sanitize(version), hex.EncodeToString(suffix[:])))
	if err := filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, in.uid, in.uid)
	}); err != nil {
		return resolution{}, fmt.Errorf("handing the install to the installer: %w", err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return resolution{}, err
	}
	if err := os.Rename(tmp, final); err != nil {
		return resolution{}, fmt.Errorf("moving the install into place: %w", err)
	}
	in.e.log.Info("installed a dependency", "requirement", r, "version", version, "duration_ms", time.Since(began).Milliseconds())
	return resolution{Version: version, Path: final}, nil
}

// pipReadTimeoutS is pip's --timeout: how long, in seconds, it waits for a connection and
// between two reads of an index page or a wheel.
const pipReadTimeoutS = 5

var (
	unreachable = regexp.MustCompile(`(?i)(failed to establish a new connection|connecttimeouterror|connection to \S+ timed out|temporary failure in name resolution|name or service not known|network is unreachable|connection refused|no route to host|too many 50[234] error responses|bad gateway|proxyerror|tunnel connection failed)`)
	// slow is an index that answered but too slowly: pip's read timeout (pipReadTimeoutS
	// between two reads of the page or the wheel), or an answer cut short.
	slow = regexp.MustCompile(`(?i)(read timed out|readtimeouterror|incompleteread)`)
)

// pipError turns pip's output into the reason of a failed install: pip's ERROR lines (or its
// last lines), and whether the index could not be reached or answered too slowly.
func pipError(output string, o protocol.PipOptions) error {
	var errs []string
	for line := range strings.Lines(output) {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "ERROR:") {
			errs = append(errs, l)
		}
	}
	reason := strings.Join(errs, "\n")
	if len(errs) > 5 {
		reason = strings.Join(errs[:5], "\n")
	}
	if reason == "" {
		reason = lastLines(output, 5)
	}
	index := indexName(o)
	if m := unreachable.FindString(output); m != "" {
		hint := "check the network and index_url"
		if loopbackURL(o.IndexURL) {
			hint += " (this machine is not 127.0.0.1 inside the sandbox: it is host.docker.internal on Docker Desktop and Colima, " +
				"or the Docker bridge's gateway, usually 172.17.0.1, on Linux)"
		}
		return fmt.Errorf("the package index %s could not be reached from the sandbox (%s); %s:\n%s", index, m, hint, reason)
	}
	if loc := slow.FindStringIndex(output); loc != nil {
		m := output[loc[0]:loc[1]]
		// pip's own ERROR line may be no more than "ERROR: Exception:": add the line that
		// says what timed out.
		start := strings.LastIndexByte(output[:loc[0]], '\n') + 1
		end := loc[1] + strings.IndexByte(output[loc[1]:]+"\n", '\n')
		if line := strings.TrimSpace(output[start:end]); !strings.Contains(reason, line) {
			reason += "\n" + line
		}
		return fmt.Errorf("the package index %s answered too slowly (%s: pip waits %d s for its next bytes); "+
			"try again, or set index_url to a nearer or faster mirror:\n%s", index, m, pipReadTimeoutS, reason)
	}
	return fmt.Errorf("pip could not install it:\n%s", reason)
}

// pipTimedOut is the error of an install stopped at its timeout, pip having printed output:
// it names the index pip was reaching, and pip's last lines when it printed any.
func pipTimedOut(timeout time.Duration, output string, o protocol.PipOptions) error {
	msg := fmt.Sprintf("pip did not finish within the install timeout of %s and was stopped: raise install_timeout_ms, or check the package index %s",
		timeout, indexName(o))
	if last := lastLines(output, 2); last != "" {
		msg += "; pip's last words:\n" + last
	}
	return errors.New(msg)
}

// indexName names the package index pip uses.
func indexName(o protocol.PipOptions) string {
	if o.IndexURL == "" {
		return "https://pypi.org/simple (pip's default)"
	}
	return o.IndexURL
}

// loopbackURL reports whether u names this machine's loopback (localhost, 127.0.0.0/8, ::1),
// which inside a sandbox is the sandbox itself.
func loopbackURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil {
		return false
	}
	h := p.Hostname()
	if ip := net.ParseIP(h); ip != nil {
		return ip.IsLoopback()
	}
	return strings.EqualFold(h, "localhost")
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// stillThere reports whether a cached resolution's directory still exists: another sandbox
// sharing the volume may have removed it.
func (in *installer) stillThere(res resolution) bool {
	if res.Path == "" {
		return true
	}
	_, err := os.Stat(res.Path)
	return err == nil
}

// lockVolume takes the package volume's install lock and returns its release. Every sandbox
// sharing the volume (one per slot) takes it around installs and removals. It waits for the
// lock until ctx ends, trying once more then (an ended ctx makes it a single try). The lock is
// an flock(2) on root/.lock, which the kernel releases when its holder dies.
func (in *installer) lockVolume(ctx context.Context) (func(), error) {
	f, err := os.OpenFile(filepath.Join(in.root, ".lock"), os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening the package volume's lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("locking the package volume: %w", err)
		}
		if ctx.Err() != nil {
			f.Close()
			return nil, fmt.Errorf("another sandbox holds the package volume's lock: %w", ctx.Err())
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// clearLeftovers removes what unfinished installs left: pip's temporary files and install
// directories never renamed into place. The caller holds the volume's lock, so no install is
// in progress in any sandbox.
func (in *installer) clearLeftovers() {
	in.clearTmp()
	leftovers, _ := filepath.Glob(filepath.Join(in.site, ".tmp-*"))
	for _, dir := range leftovers {
		in.e.log.Info("removing an unfinished install", "path", dir)
		if err := os.RemoveAll(dir); err != nil {
			in.e.log.Warn("removing an unfinished install", "path", dir, "error", err)
		}
	}
}

// clearTmp empties pip's temporary directory.
func (in *installer) clearTmp() {
	dir := filepath.Join(in.root, "tmp")
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			in.e.log.Warn("removing pip's temporary files", "error", err)
		}
	}
}

// requirementName returns the PEP 503 name of a canonical requirement.
func requirementName(r string) string {
	req, err := requirement.Parse(r)
	if err != nil {
		return ""
	}
	return req.Key
}

// installedVersion finds name's version from its .dist-info directory in dir.
func installedVersion(dir, name string) string {
	for _, p := range distributions(dir) {
		if p.Name == name {
			return p.Version
		}
	}
	return ""
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == os.PathSeparator || r < ' ' {
			return '_'
		}
		return r
	}, s)
}

// packages answers a packages request: the installed directories, or the removal of a name's.
func (in *installer) packages(op protocol.Packages) ([]protocol.Package, error) {
	if in.site == "" {
		return nil, errors.New("this sandbox has no package directory")
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if op.Op == "remove" {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		unlock, err := in.lockVolume(ctx)
		if err != nil {
			return nil, fmt.Errorf("waiting for another sandbox's install to finish: %w", err)
		}
		defer unlock()
	}
	entries, err := os.ReadDir(in.site)
	if err != nil {
		return nil, err
	}
	var list []protocol.Package
	for _, e := range entries {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		dir := filepath.Join(in.site, e.Name())
		data, err := os.ReadFile(filepath.Join(dir, manifestName))
		var m manifest
		if err != nil || json.Unmarshal(data, &m) != nil {
			continue
		}
		top := protocol.Package{Name: m.Name, Version: m.Version, Requirement: m.Requirement, SizeBytes: dirSize(dir), InstalledAt: m.InstalledAt}
		switch op.Op {
		case "remove":
			if m.Name == requirement.Normalize(op.Name) {
				if err := os.RemoveAll(dir); err != nil {
					return nil, fmt.Errorf("removing %s: %w", e.Name(), err)
				}
				list = append(list, top) // with the size it freed
			}
		default:
			// The dependencies installed with it satisfy requirements too (an install says
			// "present" for them): listed, within it.
			list = append(list, top)
			for _, dep := range distributions(dir) {
				if dep.Name != m.Name {
					dep.Within, dep.InstalledAt = m.Name, m.InstalledAt
					list = append(list, dep)
				}
			}
		}
	}
	if op.Op == "remove" {
		in.satisfied.Clear() // the removed directories may satisfy cached requirements
	}
	return list, nil
}

// distributions lists the packages whose .dist-info directories are in dir (name normalised).
func distributions(dir string) []protocol.Package {
	var out []protocol.Package
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		base, ok := strings.CutSuffix(e.Name(), ".dist-info")
		// NAME-VERSION.dist-info, where NAME has '-' escaped as '_' (PEP 427).
		if i := strings.LastIndex(base, "-"); ok && e.IsDir() && i > 0 {
			out = append(out, protocol.Package{Name: requirement.Normalize(base[:i]), Version: base[i+1:]})
		}
	}
	return out
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
