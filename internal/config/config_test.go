package config

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// envMap is an os.LookupEnv-style lookup over a map.
func envMap(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// writeFile writes content to a config file in a new temporary directory.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// baseEnv has a HOME with no config file in it, so no real file is read.
func baseEnv(t *testing.T, extra map[string]string) map[string]string {
	m := map[string]string{"HOME": t.TempDir()}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

func wantErrContains(t *testing.T, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
}

func TestDefaults(t *testing.T) {
	t.Setenv("HOME", "/home/test")
	t.Setenv("XDG_DATA_HOME", "")
	c := Default()
	if err := c.Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
	if c.DataDir != "/home/test/.local/share/sandpit" {
		t.Errorf("DataDir = %q", c.DataDir)
	}
	if got, want := c.Sandbox(), engine.DefaultConfig(); !reflect.DeepEqual(got, want) {
		t.Errorf("Default().Sandbox() = %+v, want engine.DefaultConfig() %+v", got, want)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"listen", c.Listen, "127.0.0.1:8765"},
		{"base_image", c.BaseImage, ""},
		{"packages", c.Packages, []string{"pandas", "numpy", "matplotlib", "scipy", "requests", "beautifulsoup4", "Pillow", "ipython"}},
		{"image_repository", c.ImageRepository, "sandpit-sandbox"},
		{"memory_bytes", c.MemoryBytes, int64(512 << 20)},
		{"memory_swap", c.MemorySwap(), int64(512 << 20)},
		{"nano_cpus", c.NanoCPUs(), int64(1e9)},
		{"tmp_bytes", c.TmpBytes, int64(128 << 20)},
		{"run_dir_bytes", c.RunDirBytes, int64(128 << 20)},
		{"pids_limit", c.PidsLimit, int64(512)},
		{"network", c.Network, "allowlist"},
		{"log", c.LogLevel + "/" + c.LogFormat, "info/text"},
		{"docker_host", c.DockerHost, ""},
		{"executor_path", c.ExecutorPath, ""},
		{"quotas", c.Quotas(), store.Quotas{ResultsMaxBytes: 64 << 20, ResultsMaxVersions: 100, JobsPerAgent: 50, JobsMax: 500, JobFilesMaxBytes: 256 << 20}},
		{"retention", c.Retention(), store.Retention{MaxAge: 30 * 24 * time.Hour, MaxCount: 100_000, MaxBytes: 2 << 30}},
	}
	for _, ch := range checks {
		if !reflect.DeepEqual(ch.got, ch.want) {
			t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
		}
	}
	// Default must not share its slice between calls.
	c.Packages[0] = "changed"
	if Default().Packages[0] != "pandas" {
		t.Error("Default shares its Packages slice")
	}
}

func TestDataDirDefault(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"HOME": "/h", "XDG_DATA_HOME": "/xdg"}, "/xdg/sandpit"},
		{map[string]string{"HOME": "/h"}, "/h/.local/share/sandpit"},
		{map[string]string{"HOME": "/h", "XDG_DATA_HOME": "relative"}, "/h/.local/share/sandpit"},
		{map[string]string{}, ""},
	}
	for _, tt := range tests {
		if got := defaults(envMap(tt.env)).DataDir; got != tt.want {
			t.Errorf("env %v: DataDir = %q, want %q", tt.env, got, tt.want)
		}
	}
	err := defaults(envMap(nil)).Validate()
	wantErrContains(t, err, "data_dir", "HOME")
}

func TestLayering(t *testing.T) {
	file := `{
		"base_image": "python:3.12-slim",
		"slots": 8,
		"queue_length": 3,
		"memory_bytes": "1GiB",
		"stdout_bytes": 2048,
		"cpus": 2.5,
		"network": "none"
	}`
	tests := []struct {
		name  string
		env   map[string]string
		sets  [][2]string
		check func(t *testing.T, c Config)
	}{
		{
			name: "file overrides defaults",
			check: func(t *testing.T, c Config) {
				if c.BaseImage != "python:3.12-slim" || c.Slots != 8 || c.QueueLength != 3 ||
					c.MemoryBytes != 1<<30 || c.StdoutBytes != 2048 || c.CPUs != 2.5 || c.Network != "none" {
					t.Errorf("file not applied: %+v", c)
				}
				if c.MaxTimeoutMS != 600000 || c.Listen != "127.0.0.1:8765" {
					t.Errorf("defaults lost: %+v", c)
				}
			},
		},
		{
			name: "env overrides file",
			env: map[string]string{
				"SANDPIT_SLOTS": "12", "SANDPIT_BASE_IMAGE": "python:3.13", "SANDPIT_NETWORK": "full",
				"SANDPIT_MEMORY_BYTES": "768MiB", "SANDPIT_CPUS": "0.5", "SANDPIT_PACKAGES": "numpy, pandas,,",
				"SANDPIT_DEFAULT_TIMEOUT_MS": "1000",
			},
			check: func(t *testing.T, c Config) {
				if c.Slots != 12 || c.BaseImage != "python:3.13" || c.Network != "full" ||
					c.MemoryBytes != 768<<20 || c.CPUs != 0.5 || c.DefaultTimeoutMS != 1000 {
					t.Errorf("env not applied: %+v", c)
				}
				if !slices.Equal(c.Packages, []string{"numpy", "pandas"}) {
					t.Errorf("packages = %q", c.Packages)
				}
				if c.QueueLength != 3 {
					t.Errorf("file value lost: queue_length = %d", c.QueueLength)
				}
			},
		},
		{
			name: "Set overrides env",
			env:  map[string]string{"SANDPIT_SLOTS": "12", "SANDPIT_LOG_LEVEL": "warn"},
			sets: [][2]string{{"slots", "2"}, {"queue-length", "0"}, {"run_memory_bytes", "128MiB"}},
			check: func(t *testing.T, c Config) {
				if c.Slots != 2 || c.QueueLength != 0 || c.RunMemoryBytes != 128<<20 || c.LogLevel != "warn" {
					t.Errorf("Set not applied: %+v", c)
				}
				if got := c.Sandbox().Limits.MemoryBytes; got != 128<<20 {
					t.Errorf("Sandbox().Limits.MemoryBytes = %d", got)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, file)
			c, err := LoadLookup(path, envMap(baseEnv(t, tt.env)))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.sets {
				if err := c.Set(s[0], s[1]); err != nil {
					t.Fatal(err)
				}
			}
			tt.check(t, c)
			if err := c.Validate(); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
}

func TestFileLocation(t *testing.T) {
	xdg := t.TempDir()
	if err := os.MkdirAll(filepath.Join(xdg, "sandpit"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(xdg, "sandpit", "config.json"), []byte(`{"slots": 5}`), 0o600); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	if err := os.MkdirAll(filepath.Join(home, ".config", "sandpit"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".config", "sandpit", "config.json"), []byte(`{"slots": 6}`), 0o600); err != nil {
		t.Fatal(err)
	}
	named := writeFile(t, `{"slots": 7}`)
	explicit := writeFile(t, `{"slots": 9}`)
	missing := filepath.Join(t.TempDir(), "nope.json")

	tests := []struct {
		name    string
		path    string
		env     map[string]string
		want    int
		wantErr string
	}{
		{"XDG_CONFIG_HOME", "", map[string]string{"HOME": home, "XDG_CONFIG_HOME": xdg}, 5, ""},
		{"HOME fallback", "", map[string]string{"HOME": home}, 6, ""},
		{"no default file", "", map[string]string{"HOME": t.TempDir()}, 4, ""},
		{"no HOME", "", map[string]string{}, 4, ""},
		{"SANDPIT_CONFIG", "", map[string]string{"HOME": home, "SANDPIT_CONFIG": named}, 7, ""},
		{"path wins over SANDPIT_CONFIG", explicit, map[string]string{"HOME": home, "SANDPIT_CONFIG": named}, 9, ""},
		{"missing explicit file", missing, map[string]string{"HOME": home}, 0, "nope.json"},
		{"missing SANDPIT_CONFIG file", "", map[string]string{"HOME": home, "SANDPIT_CONFIG": missing}, 0, "nope.json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := LoadLookup(tt.path, envMap(tt.env))
			if tt.wantErr != "" {
				wantErrContains(t, err, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Slots != tt.want {
				t.Errorf("slots = %d, want %d", c.Slots, tt.want)
			}
		})
	}
	if got := defaultFile(envMap(map[string]string{"HOME": "/h"})); got != "/h/.config/sandpit/config.json" {
		t.Errorf("defaultFile = %q", got)
	}
}

func TestFileErrors(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    []string
	}{
		{"unknown key", "{\n  \"slots\": 4,\n  \"slot\": 4\n}", []string{`unknown key "slot"`, `did you mean "slots"`, "line 3"}},
		{"unknown key far from any", `{"frobnicate": 1}`, []string{`unknown key "frobnicate"`, "queue_length"}},
		{"bad JSON", "{\n  \"slots\": 4,\n  \"queue_length\": 16,,\n}", []string{"config.json", "line 3", "invalid JSON"}},
		{"truncated JSON", "{\n  \"slots\": 4", []string{"config.json", "line 2"}},
		{"trailing data", `{"slots": 4} {}`, []string{"config.json", "invalid JSON"}},
		{"not an object", `["slots"]`, []string{"config.json", "JSON object"}},
		{"empty", "  \n", []string{"config.json", "empty"}},
		{"wrong type", "{\n\"slots\": \"four\"}", []string{"line 2", "slots", "whole number", `"four"`}},
		{"fraction for int", `{"slots": 1.5}`, []string{"slots", "whole number"}},
		{"number for string", `{"network": 1}`, []string{"network", "expected a string"}},
		{"string for list", `{"packages": "numpy"}`, []string{"packages", "list of strings"}},
		{"bad size", `{"memory_bytes": "12XB"}`, []string{"memory_bytes", "12XB", "KiB, MiB or GiB"}},
		{"negative size", `{"memory_bytes": -1}`, []string{"memory_bytes", "size"}},
		{"null", `{"slots": null}`, []string{"slots", "null"}},
		{"duplicate", "{\"slots\": 4,\n\"slots\": 5}", []string{`"slots" is given twice`, "line 1"}},
		{"several at once", `{"slot": 1, "cpus": "x", "network": 2}`, []string{`"slot"`, "cpus", "network"}},
		// A trial's: the wrongly typed value hid the invalid ones that did load.
		{"wrong type and invalid values", `{"slots": 0, "network": "some", "memory_bytes": "lots"}`, []string{"memory_bytes", "slots", "network"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := writeFile(t, tt.content)
			_, err := LoadLookup(path, envMap(baseEnv(t, nil)))
			wantErrContains(t, err, tt.want...)
			if !strings.Contains(err.Error(), path) {
				t.Errorf("error %q does not name the file %s", err, path)
			}
		})
	}
}

func TestEnvErrors(t *testing.T) {
	tests := []struct {
		env  map[string]string
		want []string
	}{
		{map[string]string{"SANDPIT_SLOTS": "abc"}, []string{"SANDPIT_SLOTS", "abc", "whole number"}},
		{map[string]string{"SANDPIT_CPUS": "lots"}, []string{"SANDPIT_CPUS", "number"}},
		{map[string]string{"SANDPIT_CPUS": "NaN"}, []string{"SANDPIT_CPUS", "number"}},
		{map[string]string{"SANDPIT_MEMORY_BYTES": "12XB"}, []string{"SANDPIT_MEMORY_BYTES", "size"}},
		{map[string]string{"SANDPIT_MEMORY_BYTES": "512MB"}, []string{"SANDPIT_MEMORY_BYTES", "did you mean 512MiB?"}},
		{map[string]string{"SANDPIT_QUEUE_LENGTH": "99999999999999999999"}, []string{"SANDPIT_QUEUE_LENGTH", "too large"}},
		{map[string]string{"SANDPIT_SLOTS": ""}, []string{"SANDPIT_SLOTS", "unset it"}},
		{map[string]string{"SANDPIT_SLOTS": "x", "SANDPIT_GRACE_MS": "y"}, []string{"SANDPIT_SLOTS", "SANDPIT_GRACE_MS"}},
		{map[string]string{"SANDPIT_LEDGER_MAX_BYTES": "2GB"}, []string{"SANDPIT_LEDGER_MAX_BYTES", "did you mean 2GiB?"}},
	}
	for _, tt := range tests {
		_, err := LoadLookup("", envMap(baseEnv(t, tt.env)))
		wantErrContains(t, err, tt.want...)
	}
}

func TestLedgerMaxBytesFromTheEnvironment(t *testing.T) {
	c, err := LoadLookup("", envMap(baseEnv(t, map[string]string{"SANDPIT_LEDGER_MAX_BYTES": "5 GiB"})))
	if err != nil || c.Retention().MaxBytes != 5<<30 {
		t.Fatalf("LoadLookup = %v, MaxBytes %d; want 5 GiB", err, c.Retention().MaxBytes)
	}
	c, err = LoadLookup("", envMap(baseEnv(t, map[string]string{"SANDPIT_LEDGER_MAX_BYTES": "0"})))
	if err != nil || c.Retention().MaxBytes != 0 {
		t.Fatalf("LoadLookup(0) = %v, MaxBytes %d; want 0, no byte limit", err, c.Retention().MaxBytes)
	}
}

func TestSet(t *testing.T) {
	c := defaults(envMap(map[string]string{"HOME": "/h"}))
	wantErrContains(t, c.Set("slotz", "4"), `unknown configuration key "slotz"`, `"slots"`)
	wantErrContains(t, c.Set("slots", "four"), "slots", "four", "whole number")
	wantErrContains(t, c.Set("tmp_bytes", "1.5GiB"), "tmp_bytes", "size")
	if err := c.Set("tmp-bytes", "1 GiB"); err != nil || c.TmpBytes != 1<<30 {
		t.Errorf("Set(tmp-bytes) = %v, TmpBytes = %d", err, c.TmpBytes)
	}
	// A map is replaced whole, its keys the user's.
	if err := c.Set("template_pools", `{"alice/tools": 2, "bob/x": 1}`); err != nil || len(c.TemplatePools) != 2 {
		t.Errorf("Set(template_pools) = %v, %v", err, c.TemplatePools)
	}
	if err := c.Set("template_pools", `{"carol/y": 1}`); err != nil || len(c.TemplatePools) != 1 || c.TemplatePools["carol/y"] != 1 {
		t.Errorf("Set(template_pools) again = %v, %v; want only carol/y", err, c.TemplatePools)
	}
	wantErrContains(t, c.Set("template_pools", `{"alice/tools": "two"}`), "template_pools")
	wantErrContains(t, c.Set("template_pools", `3`), "template_pools", "expected a JSON object")
	if err := c.Set("docker_host", "unix:///run/docker.sock"); err != nil || c.DockerHost != "unix:///run/docker.sock" {
		t.Errorf("Set(docker_host) = %v, %q", err, c.DockerHost)
	}
	if err := c.Set("packages", ""); err != nil || c.Packages == nil || len(c.Packages) != 0 {
		t.Errorf("Set(packages, \"\") = %v, %#v", err, c.Packages)
	}
}

// Every key can be read with Get and written back with Set and through its environment
// variable, so a new field is reachable without more code.
func TestEveryKeyRoundTrips(t *testing.T) {
	if n := reflect.TypeFor[Config]().NumField(); len(Keys()) != n {
		t.Fatalf("Keys() has %d keys for %d fields", len(Keys()), n)
	}
	c := defaults(envMap(map[string]string{"HOME": "/h"}))
	env := map[string]string{"HOME": "/h"}
	for _, k := range Keys() {
		v, err := c.Get(k)
		if err != nil {
			t.Fatal(err)
		}
		env[EnvName(k)] = v
		d := c
		if err := d.Set(k, v); err != nil {
			t.Errorf("Set(%q, %q): %v", k, v, err)
		}
		if !reflect.DeepEqual(d, c) {
			t.Errorf("Set(%q, Get(%q)) changed the config", k, k)
		}
	}
	got, err := LoadLookup("", envMap(env))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		t.Errorf("loading every key from the environment:\n got %+v\nwant %+v", got, c)
	}
	// Environ carries a configuration that differs from the defaults to a process that
	// loads its own (the daemon tests run sandpit serve that way).
	c.Slots, c.E2BPool, c.ForkServer, c.Packages, c.Token = 3, 0, !c.ForkServer, []string{"a", "b"}, ""
	env = map[string]string{"HOME": "/h", EnvName("slots"): "7"}
	for _, kv := range c.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	if got, err := LoadLookup("", envMap(env)); err != nil || !reflect.DeepEqual(got, c) {
		t.Errorf("loading Environ():\n got %+v, %v\nwant %+v", got, err, c)
	}
	if _, err := c.Get("nope"); err == nil {
		t.Error("Get(nope) succeeded")
	}
}

func TestEnvName(t *testing.T) {
	for key, want := range map[string]string{
		"slots": "SANDPIT_SLOTS", "base_image": "SANDPIT_BASE_IMAGE", "queue-length": "SANDPIT_QUEUE_LENGTH",
	} {
		if got := EnvName(key); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", key, got, want)
		}
	}
	got := UnknownEnv([]string{"SANDPIT_SLOT=4", "SANDPIT_SLOTS=4", "SANDPIT_CONFIG=x", "PATH=/bin"})
	if !slices.Equal(got, []string{"SANDPIT_SLOT"}) {
		t.Errorf("UnknownEnv = %q", got)
	}
	for name, want := range map[string]string{"SANDPIT_SLOT": "SANDPIT_SLOTS", "SANDPIT_NETWORK_ALOW": "SANDPIT_NETWORK_ALLOW", "SANDPIT_ZZZZZZZZZZ": ""} {
		if got := NearestEnv(name); got != want {
			t.Errorf("NearestEnv(%s) = %q, want %q", name, got, want)
		}
	}
}

func TestPackages(t *testing.T) {
	tests := []struct {
		name string
		file string // "" for no file
		env  map[string]string
		want []string
	}{
		{"absent from file", `{"slots": 4}`, nil, DefaultPackages()},
		{"empty list in file", `{"packages": []}`, nil, []string{}},
		{"list in file", `{"packages": ["numpy", "requests[socks]>=2"]}`, nil, []string{"numpy", "requests[socks]>=2"}},
		{"SANDPIT_PACKAGES empty means none", `{"packages": ["numpy"]}`, map[string]string{"SANDPIT_PACKAGES": ""}, []string{}},
		{"SANDPIT_PACKAGES list", "", map[string]string{"SANDPIT_PACKAGES": " scipy ,numpy"}, []string{"scipy", "numpy"}},
		{"SANDPIT_PACKAGES only commas", "", map[string]string{"SANDPIT_PACKAGES": ","}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := ""
			if tt.file != "" {
				path = writeFile(t, tt.file)
			}
			c, err := LoadLookup(path, envMap(baseEnv(t, tt.env)))
			if err != nil {
				t.Fatal(err)
			}
			if c.Packages == nil || !slices.Equal(c.Packages, tt.want) {
				t.Errorf("packages = %#v, want %#v", c.Packages, tt.want)
			}
		})
	}
}

// With a nil lookup the process environment is looked up with os.LookupEnv, and
// SANDPIT_PACKAGES="" means none.
func TestLoadEmptyPackagesEnv(t *testing.T) {
	t.Setenv("HOME", t.TempDir())
	t.Setenv("XDG_CONFIG_HOME", "")
	t.Setenv("SANDPIT_CONFIG", "")
	t.Setenv("SANDPIT_PACKAGES", "")
	c, err := LoadLookup("", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.Packages == nil || len(c.Packages) != 0 {
		t.Errorf("LoadLookup(\"\", nil) with SANDPIT_PACKAGES=\"\": packages = %#v, want none", c.Packages)
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{"0", 0, false},
		{"1048576", 1 << 20, false},
		{"64KiB", 64 << 10, false},
		{"512MiB", 512 << 20, false},
		{"1GiB", 1 << 30, false},
		{" 2 GiB ", 2 << 30, false},
		{"8589934591GiB", 8589934591 << 30, false},
		{"8589934592GiB", 0, true}, // overflows int64
		{"12XB", 0, true},
		{"512MB", 0, true},
		{"1m", 0, true},
		{"1G", 0, true},
		{"1TiB", 0, true},
		{"1.5GiB", 0, true},
		{"-1", 0, true},
		{"-1MiB", 0, true},
		{"MiB", 0, true},
		{"", 0, true},
		{"1e6", 0, true},
		{"512mib", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
	_, err := ParseSize("12XB")
	wantErrContains(t, err, `"12XB"`, "KiB, MiB or GiB")
	for _, n := range []int64{0, 1, 1023, 1024, 3 << 20, 5 << 30, 1<<20 + 1} {
		if got, err := ParseSize(FormatSize(n)); err != nil || got != n {
			t.Errorf("ParseSize(FormatSize(%d) = %q) = %d, %v", n, FormatSize(n), got, err)
		}
	}
	if got := FormatSize(512 << 20); got != "512MiB" {
		t.Errorf("FormatSize(512MiB) = %q", got)
	}
}

func TestValidate(t *testing.T) {
	valid := defaults(envMap(map[string]string{"HOME": "/h"}))
	tests := []struct {
		name   string
		mutate func(c *Config)
		want   []string // each must appear; nil means valid
	}{
		{"defaults", func(c *Config) {}, nil},
		{"edges", func(c *Config) {
			c.Slots, c.QueueLength, c.DefaultTimeoutMS, c.MaxTimeoutMS = 64, 0, 86_400_000, 86_400_000
			c.MemoryBytes, c.MemorySwapBytes, c.RunMemoryBytes, c.CPUs = 64<<20, 64<<20, 64<<20, 64
			c.Packages, c.Network, c.Listen, c.LogLevel, c.LogFormat = []string{}, "none", ":0", "debug", "json"
			c.FileSizeBytes, c.OpenFiles, c.Processes = 0, 0, 0
		}, nil},
		{"several problems", func(c *Config) {
			c.Slots, c.QueueLength, c.CPUs, c.Network, c.MemoryBytes = 0, -1, 0, "host", 1<<20
			c.LogLevel, c.LogFormat, c.BaseImage, c.Listen = "verbose", "xml", "python:3.11 slim", "localhost"
		}, []string{
			"slots is 0; allowed range is 1 to 64", "SANDPIT_SLOTS", "queue_length is -1",
			"cpus is 0", `network is "host"`, "memory_bytes is 1MiB; it must be at least 64MiB",
			`log_level is "verbose"`, `log_format is "xml"`, `base_image is "python:3.11 slim", which contains white space`, `listen is "localhost"`,
		}},
		{"timeouts", func(c *Config) { c.DefaultTimeoutMS, c.MaxTimeoutMS = 5000, 1000 },
			[]string{"default_timeout_ms is 5000", "raise max_timeout_ms"}},
		{"max timeout too large", func(c *Config) { c.MaxTimeoutMS = 86_400_001 }, []string{"max_timeout_ms"}},
		{"run memory above box", func(c *Config) { c.RunMemoryBytes = 1 << 30 }, []string{"run_memory_bytes is 1GiB"}},
		{"swap below memory", func(c *Config) { c.MemorySwapBytes = 256 << 20 }, []string{"memory_swap_bytes"}},
		{"output caps", func(c *Config) { c.StdoutBytes, c.StderrBytes, c.OutputBytes = 0, 0, 0 },
			[]string{"stdout_bytes", "stderr_bytes", "output_bytes"}},
		{"pids", func(c *Config) { c.PidsLimit = 8 }, []string{"pids_limit is 8"}},
		{"relative data dir", func(c *Config) { c.DataDir = "~/sandpit" }, []string{"data_dir", "absolute"}},
		{"bad port", func(c *Config) { c.Listen = "127.0.0.1:http" }, []string{"listen", "port"}},
		{"docker host", func(c *Config) { c.DockerHost = "/var/run/docker.sock" }, []string{"docker_host", "unix://"}},
		{"package option", func(c *Config) { c.Packages = []string{"numpy", "--index-url=http://evil"} }, []string{"packages", "option"}},
		{"repository tag", func(c *Config) { c.ImageRepository = "sandpit:latest" }, []string{"image_repository", "tag"}},
		{"repository with registry port", func(c *Config) { c.ImageRepository = "localhost:5000/sandpit" }, nil},
		{"open files", func(c *Config) { c.OpenFiles = 3 }, []string{"open_files is 3"}},
		{"build egress", func(c *Config) {
			c.TemplateAptHosts, c.TemplateBuildAllow = []string{"deb.debian.org:http"}, []string{"github.com", "https://nodejs.org/"}
		}, []string{`template_apt_hosts entry "deb.debian.org:http" has a port`, `template_build_allow entry "https://nodejs.org/"`}},
		{"grace", func(c *Config) { c.GraceMS = 0 }, []string{"grace_ms is 0"}},
		// pip ignores a plain-HTTP index that is not trusted: refused, naming the setting to add.
		{"untrusted plain-HTTP index", func(c *Config) { c.IndexURL = "http://mirror.example:8080/simple/" },
			[]string{`index_url has "http://mirror.example:8080/simple/", a plain-HTTP index whose host is not in trusted_hosts`, `add "mirror.example" to trusted_hosts`}},
		{"untrusted plain-HTTP extra index", func(c *Config) {
			c.IndexURL, c.ExtraIndexURLs, c.TrustedHosts = "http://a.example/simple/", []string{"http://b.example:81/simple/"}, []string{"a.example", "b.example:82"}
		}, []string{`extra_index_urls has "http://b.example:81/simple/"`, `add "b.example" to trusted_hosts`}},
		{"trusted plain-HTTP indexes", func(c *Config) {
			c.IndexURL, c.ExtraIndexURLs, c.TrustedHosts = "http://172.17.0.1:8080/simple/", []string{"http://b.example:81/simple/"}, []string{"172.17.0.1", "B.example:81"}
		}, nil},
		// The container's loopback is the container itself: an index there is never reached.
		{"loopback index", func(c *Config) {
			c.IndexURL, c.ExtraIndexURLs = "http://127.0.0.1:8080/simple/", []string{"https://localhost/simple/", "http://[::1]:3141/"}
		}, []string{`index_url has "http://127.0.0.1:8080/simple/", but pip runs inside the sandbox's container, where 127.0.0.1 is the container itself`,
			"host.docker.internal", "bridge's gateway", `extra_index_urls has "https://localhost/simple/"`, `extra_index_urls has "http://[::1]:3141/"`}},
		{"quotas", func(c *Config) { c.ResultsMaxBytes, c.ResultsMaxVersions = 1023, 0 },
			[]string{"results_max_bytes is 1023; allowed range is 1024", "results_max_versions is 0"}},
		{"files at their edges", func(c *Config) {
			c.MaxInputFiles, c.MaxInputFileBytes, c.MaxInputFilesBytes = 0, 0, 0
			c.OutputFiles, c.OutputFileBytes, c.OutputFilesBytes, c.FilesMaxBytes = 10_000, 32<<20, 32<<20, 32<<20
		}, nil},
		{"input files", func(c *Config) { c.MaxInputFiles, c.MaxInputFileBytes, c.MaxInputFilesBytes = -1, 20<<20, 33<<20 },
			[]string{"max_input_files is -1; allowed range is 0 to 10000", "max_input_files_bytes is 33MiB; allowed range is 0 to 32MiB", "SANDPIT_MAX_INPUT_FILES_BYTES"}},
		{"input file over the total", func(c *Config) { c.MaxInputFileBytes, c.MaxInputFilesBytes = 2<<20, 1<<20 },
			[]string{"max_input_file_bytes is 2MiB; allowed range is 0 to 1MiB (max_input_files_bytes)"}},
		{"output files", func(c *Config) { c.OutputFiles, c.OutputFileBytes, c.OutputFilesBytes = 10_001, 40<<20, 1<<20 },
			[]string{"output_files is 10001", "output_file_bytes is 40MiB; allowed range is 0 to 32MiB", "output_files_bytes is 1MiB, less than output_file_bytes"}},
		{"warm sessions off", func(c *Config) { c.WarmSessions = 0 }, nil},
		{"warm sessions too many", func(c *Config) { c.WarmSessions = 65 },
			[]string{"warm_sessions is 65; allowed range is 0 to 64 session containers kept started and unclaimed (0 turns the pool off)", "SANDPIT_WARM_SESSIONS"}},
		{"warm sessions negative", func(c *Config) { c.WarmSessions = -1 }, []string{"warm_sessions is -1"}},
		{"template pools", func(c *Config) { c.TemplatePools = map[string]int{"alice/tools": 2, "bob/report-1": 1} }, nil},
		{"template pools named badly", func(c *Config) { c.TemplatePools = map[string]int{"tools": 1, "alice/Tools": 1, "alice/x": 0} },
			[]string{`template_pools has key "tools"; name each template OWNER/NAME`, `template_pools has key "alice/Tools"`,
				`template_pools gives "alice/x" 0 warm sessions; allowed range is 1 to sessions_per_agent (8)`}},
		{"template pools over sessions_max", func(c *Config) { c.TemplatePools = map[string]int{"a/x": 8, "b/y": 8} },
			[]string{"template_pools with e2b_pool keeps 17 warm sessions; all of them must stay below sessions_max (16)"}},
		{"ledger without a byte limit", func(c *Config) { c.LedgerMaxBytes = 0 }, nil},
		{"ledger bytes at their edges", func(c *Config) { c.LedgerMaxBytes = 64 << 20 }, nil},
		{"ledger bytes too few", func(c *Config) { c.LedgerMaxBytes = 1 << 20 },
			[]string{"ledger_max_bytes is 1MiB; give 0 (no byte limit) or 64MiB to 65536GiB (64 TiB)", "SANDPIT_LEDGER_MAX_BYTES"}},
		{"ledger bytes too many", func(c *Config) { c.LedgerMaxBytes = 65 << 40 }, []string{"ledger_max_bytes is 66560GiB"}},
		{"ledger bytes negative", func(c *Config) { c.LedgerMaxBytes = -1 }, []string{"ledger_max_bytes is -1"}},
		{"files quota", func(c *Config) { c.FilesMaxBytes = 1 << 20 },
			[]string{"files_max_bytes is 1MiB; allowed range is output_files_bytes (16MiB) to 1TiB"}},
		{"shared database", func(c *Config) {
			c.DatabaseURL, c.DaemonID = "postgres://sandpit:secret@db.internal:5432/sandpit?sslmode=verify-full", "sandpit-1.eu_west"
		}, nil},
		// The password never shows in the message.
		{"not a PostgreSQL URL", func(c *Config) { c.DatabaseURL, c.DaemonID = "mysql://u:hunter2@db/x", "two words" },
			[]string{"database_url is mysql://u:xxxxx@db/x, which is not a PostgreSQL URL", `daemon_id is "two words"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			c.Packages = slices.Clone(valid.Packages)
			tt.mutate(&c)
			err := c.Validate()
			if tt.want == nil {
				if err != nil {
					t.Errorf("Validate() = %v, want nil", err)
				}
				return
			}
			wantErrContains(t, err, tt.want...)
		})
	}

	// Every problem is its own joined error.
	c := valid
	c.Slots, c.CPUs, c.Network = 0, -1, "x"
	err := c.Validate()
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 3 {
		t.Errorf("Validate() = %v, want 3 joined errors", err)
	}
}

func TestSandboxConversion(t *testing.T) {
	c := defaults(envMap(map[string]string{"HOME": "/h"}))
	c.DefaultTimeoutMS, c.MaxTimeoutMS, c.GraceMS = 1500, 2500, 250
	c.MemoryBytes, c.RunMemoryBytes = 1<<30, 0
	s := c.Sandbox()
	if s.DefaultTimeout != 1500*time.Millisecond || s.MaxTimeout != 2500*time.Millisecond || s.Grace != 250*time.Millisecond {
		t.Errorf("durations = %v %v %v", s.DefaultTimeout, s.MaxTimeout, s.Grace)
	}
	if s.Limits.MemoryBytes != 1<<30 {
		t.Errorf("Limits.MemoryBytes = %d, want memory_bytes when run_memory_bytes is 0", s.Limits.MemoryBytes)
	}
	c.MaxInputFiles, c.MaxInputFileBytes, c.MaxInputFilesBytes, c.Charts = 3, 4, 5, false
	c.OutputFiles, c.OutputFileBytes, c.OutputFilesBytes = 6, 7, 8
	s = c.Sandbox()
	if s.MaxInputFiles != 3 || s.MaxInputFileBytes != 4 || s.MaxInputFilesBytes != 5 || s.Charts ||
		s.Limits.OutputFiles != 6 || s.Limits.OutputFileBytes != 7 || s.Limits.OutputFilesBytes != 8 {
		t.Errorf("files settings %+v", s)
	}
	if d, sb := defaults(envMap(map[string]string{"HOME": "/h"})).Sandbox(), engine.DefaultConfig(); d.MaxInputFiles != sb.MaxInputFiles ||
		d.MaxInputFilesBytes != sb.MaxInputFilesBytes || d.Limits.OutputFilesBytes != sb.Limits.OutputFilesBytes || !d.Charts {
		t.Errorf("default files settings %+v, want the sandbox's defaults", d)
	}
	c.CPUs = 0.25
	if c.NanoCPUs() != 250_000_000 {
		t.Errorf("NanoCPUs = %d", c.NanoCPUs())
	}
}

func TestExecutor(t *testing.T) {
	c := Config{ExecutorPath: "/opt/x"}
	if p, err := c.Executor(); err != nil || p != "/opt/x" {
		t.Errorf("Executor() = %q, %v", p, err)
	}
	c.ExecutorPath = ""
	p, err := c.Executor()
	if err != nil || filepath.Base(p) != ExecutorName || !filepath.IsAbs(p) {
		t.Errorf("Executor() = %q, %v", p, err)
	}
}

func TestLogger(t *testing.T) {
	var b strings.Builder
	c := Config{LogLevel: "warn", LogFormat: "json"}
	l := c.Logger(&b)
	l.Info("hidden")
	l.Warn("shown")
	if out := b.String(); strings.Contains(out, "hidden") || !strings.Contains(out, `"msg":"shown"`) {
		t.Errorf("log output %q", out)
	}
}
