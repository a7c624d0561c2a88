package cli

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/spf13/pflag"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// Files in and out of a run: --file (input files), --no-charts, and --output-dir, which writes a
// run's output files beneath a directory and never outside it, whatever names the daemon sends.

// inputFlags are the flags that hand a run files: --file and --no-charts.
type inputFlags struct {
	files    []string
	noCharts bool
}

func (f *inputFlags) register(fs *pflag.FlagSet) {
	fs.StringArrayVar(&f.files, "file", nil, "a file for the run's working directory: PATH, or PATH=NAME to name it there (such as data.csv=in/data.csv); repeatable")
	fs.BoolVar(&f.noCharts, "no-charts", false, "do not save open matplotlib figures and PIL images shown as output files (figure-1.png, …)")
}

// runFiles reads the --file flags into the files of a request, with --no-charts.
func (f *inputFlags) runFiles() (apitype.RunFiles, error) {
	files, err := readInputFiles(f.files)
	if err != nil {
		return apitype.RunFiles{}, err
	}
	rf := apitype.RunFiles{Files: files}
	if f.noCharts {
		rf.Charts = new(bool)
	}
	return rf, nil
}

// readInputFiles reads each --file PATH[=NAME]: NAME is the file's path in the run's working
// directory (default PATH's last element). A PATH that holds "=" itself is taken whole when no
// file is at the part before its last "=". The content goes as UTF-8 text when it is valid
// UTF-8, else as base64. A missing file, a bad NAME or two files of one NAME is a UsageError
// naming the flag.
func readInputFiles(specs []string) ([]apitype.InputFile, error) {
	var files []apitype.InputFile
	seen := map[string]string{}
	for _, spec := range specs {
		p, name := spec, ""
		if i := strings.LastIndex(spec, "="); i >= 0 {
			p, name = spec[:i], spec[i+1:]
			if _, err := os.Stat(p); err != nil {
				if _, werr := os.Stat(spec); werr == nil {
					p, name = spec, ""
				}
			}
			if p != spec && name == "" {
				return nil, usageErrorf("--file %s: the NAME after \"=\" is empty; give --file PATH or --file PATH=NAME", spec)
			}
		}
		if p == "" {
			return nil, usageErrorf("--file %s: the PATH is empty; give --file PATH or --file PATH=NAME", spec)
		}
		if name == "" {
			name = filepath.Base(p)
		}
		if err := sandbox.CheckFileName(name); err != nil {
			return nil, usageErrorf("--file %s: %v; give another with --file PATH=NAME", spec, err)
		}
		if prev, ok := seen[name]; ok {
			return nil, usageErrorf("--file %s: --file %s is also named %q in the run's directory; give one another name with --file PATH=NAME", spec, prev, name)
		}
		seen[name] = spec
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, usageErrorf("--file %s: %v", spec, err)
		}
		files = append(files, client.InputFileOf(name, b))
	}
	return files, nil
}

// outputFlags are the flags that save a run's output files: --output-dir and --force.
type outputFlags struct {
	dir   string
	force bool
}

func (f *outputFlags) register(fs *pflag.FlagSet, what string) {
	fs.StringVar(&f.dir, "output-dir", "", "write "+what+" into this directory (made if missing; subdirectories as the names say)")
	fs.BoolVar(&f.force, "force", false, "with --output-dir, replace files that exist there (without it, an existing file is refused and nothing is written)")
}

// prepare makes --output-dir (when given) before the run, so that a directory that cannot be
// made (a file of that name, no permission) is found before anything runs. Which files it
// will hold is known only after the run.
func (f *outputFlags) prepare() error {
	if f.dir == "" {
		return nil
	}
	if err := os.MkdirAll(f.dir, 0o755); err != nil {
		return usageErrorf("--output-dir: %v; nothing was run: give a directory that can be made", err)
	}
	return nil
}

// fileSource opens the bytes of an output file.
type fileSource func(ctx context.Context, f apitype.File) (io.ReadCloser, error)

// daemonFiles reads execution id's output files from the daemon: from inline when the answer
// carried them, else with GET /v1/executions/{id}/files/{name}.
func daemonFiles(c *client.Client, id string, inline map[string][]byte) fileSource {
	return func(ctx context.Context, f apitype.File) (io.ReadCloser, error) {
		if b, ok := inline[f.Name]; ok {
			return io.NopCloser(strings.NewReader(string(b))), nil
		}
		body, _, err := c.OpenFile(ctx, id, f.Name)
		return body, err
	}
}

// saveFiles writes files beneath dir (made when missing), each from open, and prints a line
// per file saved on w. Every name is checked again with sandbox.CheckFileName and written
// through an os.Root of dir, so no name (absolute, with "..", through a symbolic link) can
// place a file outside dir, even one sent by a compromised daemon. Without force, a name that
// exists in dir refuses the whole set before anything is written; with it, each file replaces
// what is there (a file written whole to a temporary name, then renamed over it). Bytes that
// do not match a file's size and SHA-256 are not kept. Names that are not data (runnablePath)
// are skipped with a line, unless named says the person named each file.
func saveFiles(ctx context.Context, w io.Writer, dir string, force, named bool, files []apitype.File, open fileSource) error {
	if len(files) == 0 {
		fmt.Fprintf(w, "sandpit: no output files; nothing was written to %s\n", dir)
		return nil
	}
	seen := map[string]bool{}
	for _, f := range files {
		if err := sandbox.CheckFileName(f.Name); err != nil {
			return fmt.Errorf("the daemon listed an output file that cannot be saved: %v; nothing was written to %s", err, dir)
		}
		if seen[f.Name] {
			return fmt.Errorf("the daemon listed the output file %q twice; nothing was written to %s", f.Name, dir)
		}
		seen[f.Name] = true
	}
	files = slices.DeleteFunc(slices.Clone(files), func(f apitype.File) bool {
		if !named && runnablePath(f.Name) {
			fmt.Fprintf(w, "sandpit: skipped %q: --output-dir writes data files (.csv, .json, .png, .html, …) unless named, not code, build, configuration or hidden files, which a tool run there could execute; sandpit exec files ID NAME --output-dir DIR writes it\n", f.Name)
			return true
		}
		return false
	})
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return usageErrorf("--output-dir: %v", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return usageErrorf("--output-dir: %v", err)
	}
	defer root.Close()
	// Every name is checked before anything is written: one that exists is replaced only with
	// force; one whose path cannot be written (a part of it is a file, or a symbolic link
	// leading out of dir, which the os.Root refuses to follow) refuses the whole set.
	var there, blocked []string
	for _, f := range files {
		_, err := root.Lstat(filepath.FromSlash(f.Name))
		switch {
		case err == nil:
			there = append(there, f.Name)
		case errors.Is(err, fs.ErrNotExist):
		default:
			blocked = append(blocked, fmt.Sprintf("%q (%v)", f.Name, errors.Unwrap(err)))
		}
	}
	if len(blocked) > 0 {
		return usageErrorf("--output-dir %s cannot hold %s: a directory on its path is a file or a symbolic link leading out of it; nothing was written: give another --output-dir",
			dir, strings.Join(blocked, ", "))
	}
	if len(there) > 0 && !force {
		return usageErrorf("--output-dir %s already holds %s; nothing was written: add --force to replace them, or give another --output-dir",
			dir, strings.Join(quoteAll(there), ", "))
	}
	for _, f := range files {
		if err := saveFile(ctx, root, f, open); err != nil {
			return err
		}
		fmt.Fprintf(w, "sandpit: saved %s (%s, %s)\n", sandbox.EscapeName(filepath.Join(dir, filepath.FromSlash(f.Name))), sandbox.EscapeName(f.MediaType), humanSize(f.SizeBytes))
	}
	return nil
}

// dataExtensions are the extensions of the files --output-dir writes without being asked:
// data, documents, images, sound, video and archives, which tools open but do not execute.
// Every other name is skipped unless named: code (tasks.py, noxfile.py, build.gradle, run.sh,
// json.py, which shadows a module), build, task runner and CI files, which mostly have no
// extension (Makefile, Gemfile, Dockerfile, Jenkinsfile, Vagrantfile) or a configuration's
// (compose.yaml, pyproject.toml, tox.ini, pom.xml, *.code-workspace), and whatever a tool may
// yet pick up. Allowing the data a run makes, rather than refusing the files tools run, holds
// for tools no list names.
var dataExtensions = []string{
	"csv", "tsv", "json", "jsonl", "ndjson", "geojson", "parquet", "feather", "arrow", "avro", "orc",
	"xlsx", "xls", "ods", "h5", "hdf5", "nc", "npy", "npz", "pkl", "pickle", "joblib", "mat", "sav", "dta", "sqlite", "db",
	"txt", "log", "md", "html", "htm", "pdf", "docx", "pptx", "odt",
	"png", "jpg", "jpeg", "gif", "webp", "svg", "bmp", "tif", "tiff", "ico", "eps",
	"wav", "mp3", "ogg", "flac", "mp4", "webm", "mov", "avi",
	"zip", "gz", "bz2", "xz", "zst", "tar", "tgz",
}

// toolManifests are the names with a data extension that tools read commands from: npm's,
// Composer's and Deno's scripts, the CMake project an editor configures when it opens the
// directory, and the requirements pip installs (an index, a package built by its setup.py).
var toolManifests = []string{"package.json", "composer.json", "deno.json", "cmakelists.txt", "requirements.txt"}

// shortName matches an NTFS 8.3 short name such as GIT~1, which names .git (or .vscode,
// .github) where the filesystem keeps short names.
var shortName = regexp.MustCompile(`~[0-9]`)

// runnablePath says whether --output-dir must not write name unless it is named: a part of
// it is hidden (a dot first: .git, .envrc, .bashrc, .vscode/tasks.json, .github/workflows,
// where version control, shells, editors and CI read commands) or an 8.3 short name, or its
// file is no data file (dataExtensions) or a tool's manifest (toolManifests). Parts are
// compared as git compares .git in a checkout (CVE-2014-9390): without case, without the
// trailing dots and spaces Windows drops, and without the code points HFS+ ignores. Output
// files are named by the run's code; one written where a tool reads commands (a repository's
// .git/config, a Makefile, a conftest.py) would run them on the host.
func runnablePath(name string) bool {
	parts := strings.Split(name, "/")
	for i, part := range parts {
		part = strings.Map(func(r rune) rune {
			if (r >= 0x200b && r <= 0x200f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2060 && r <= 0x206f) || r == 0xfeff {
				return -1
			}
			return r
		}, part)
		part = strings.ToLower(strings.TrimRight(strings.TrimLeft(part, " "), ". "))
		if strings.HasPrefix(part, ".") || shortName.MatchString(part) {
			return true
		}
		if i == len(parts)-1 {
			dot := strings.LastIndex(part, ".")
			return dot < 0 || !slices.Contains(dataExtensions, part[dot+1:]) || slices.Contains(toolManifests, part)
		}
	}
	return false
}

// saveFile writes f beneath root: to a temporary name in its directory, checked against its
// size and SHA-256, then renamed to its name.
func saveFile(ctx context.Context, root *os.Root, f apitype.File, open fileSource) error {
	name := filepath.FromSlash(f.Name)
	if d := path.Dir(f.Name); d != "." {
		if err := root.MkdirAll(filepath.FromSlash(d), 0o755); err != nil {
			return fmt.Errorf("saving output file %q: %w", f.Name, err)
		}
	}
	body, err := open(ctx, f)
	if err != nil {
		return fmt.Errorf("fetching output file %q: %w", f.Name, err)
	}
	defer body.Close()
	tmp := filepath.Join(filepath.Dir(name), "."+filepath.Base(name)+".sandpit-"+rand.Text()[:8])
	out, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("saving output file %q: %w", f.Name, err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(body, f.SizeBytes+1))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = checkListed(f, n, h.Sum(nil))
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return fmt.Errorf("saving output file %q: %w", f.Name, err)
	}
	return nil
}

// writeChecked writes f's bytes to w once they are all read and match its size and SHA-256, so
// that a file cut short or altered writes nothing.
func writeChecked(ctx context.Context, w io.Writer, f apitype.File, open fileSource) error {
	body, err := open(ctx, f)
	if err != nil {
		return fmt.Errorf("fetching output file %q: %w", f.Name, err)
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, f.SizeBytes+1))
	if err != nil {
		return fmt.Errorf("fetching output file %q: %w", f.Name, err)
	}
	sum := sha256.Sum256(b)
	if err := checkListed(f, int64(len(b)), sum[:]); err != nil {
		return fmt.Errorf("output file %q: %w; nothing was written", f.Name, err)
	}
	_, err = w.Write(b)
	return err
}

// checkListed says why n bytes of SHA-256 sum are not f's as the daemon listed it, or nil.
func checkListed(f apitype.File, n int64, sum []byte) error {
	if n != f.SizeBytes || !strings.EqualFold(hex.EncodeToString(sum), f.SHA256) {
		return fmt.Errorf("its bytes (%d, sha256 %x) are not those listed (%d, sha256 %s)", n, sum, f.SizeBytes, f.SHA256)
	}
	return nil
}

func quoteAll(names []string) []string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return q
}

// printSkipped reports on w the output files a run could not return.
func printSkipped(w io.Writer, res apitype.Result) {
	for _, s := range res.FilesSkipped {
		fmt.Fprintf(w, "sandpit: output file %q skipped: %s\n", s.Name, sandbox.EscapeName(s.Reason))
	}
	if res.FilesTruncated {
		fmt.Fprintln(w, "sandpit: more output files were left out than are listed (a cap on output files was reached)")
	}
}

// humanSize writes n bytes for a person: "312 bytes", "18.3 KiB", "2.0 MiB".
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	v, suffix := float64(n)/unit, "KiB"
	for _, s := range []string{"MiB", "GiB", "TiB"} {
		if v < unit {
			break
		}
		v, suffix = v/unit, s
	}
	return fmt.Sprintf("%.1f %s", v, suffix)
}
