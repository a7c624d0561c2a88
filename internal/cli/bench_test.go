package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

func TestBenchRefusesBadFlags(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--data-dir", "/tmp/x"}, "leave out --data-dir"},
		{[]string{"bench", "--runs", "0"}, "--runs and --slow-runs must be 1 to 100000"},
		{[]string{"bench", "--slow-runs", "-1"}, "--runs and --slow-runs must be 1 to 100000"},
		{[]string{"bench", "--runs", "2000000000"}, "--runs and --slow-runs must be 1 to 100000"},
		{[]string{"bench", "--duration", "1000h"}, "does not fit in --max-time"},
		{[]string{"bench", "--warmup", "-1"}, "--warmup must not be negative"},
		{[]string{"bench", "--duration", "0s"}, "is too short to count runs per second"},
		{[]string{"bench", "--duration", "1ns"}, "is too short to count runs per second"},
		{[]string{"bench", "--max-time", "-1m"}, "--max-time must be positive"},
		{[]string{"bench", "extra"}, "takes 0 argument(s)"},
		{[]string{"bench", "--kubernetes-density", "5"}, "goes with --kubernetes-config"},
		{[]string{"bench", "--kubernetes-density", "-1", "--kubernetes-config", "k.json"}, "--kubernetes-density must be 0 or more"},
		{[]string{"bench", "--kubernetes-density-window", "10ms"}, "too short to count requests"},
		{[]string{"run", "--timeout", "1000", "-c", "print(1)"}, "write a duration with its unit, e.g. 30s"},
		{[]string{"run", "--timeout", "abc", "-c", "print(1)"}, "write a duration with its unit, e.g. 30s"},
		{[]string{"run", "--timeout", "3x", "-c", "print(1)"}, "write a duration with its unit, e.g. 30s"},
		{[]string{"session", "wait", "se_x", "--timeout", "abc"}, "write a duration with its unit, e.g. 30s"},
	}
	for _, c := range cases {
		var stdout, stderr bytes.Buffer
		env := Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Lookup: func(string) (string, bool) { return "", false }}
		if code := Main(context.Background(), c.args, env); code != exitUsage {
			t.Errorf("%q: exit %d, want %d (stderr %q)", c.args, code, exitUsage, stderr.String())
		}
		if !strings.Contains(stderr.String(), c.want) {
			t.Errorf("%q: stderr %q, want it to contain %q", c.args, stderr.String(), c.want)
		}
		if stdout.Len() != 0 {
			t.Errorf("%q: stdout %q", c.args, stdout.String())
		}
	}
}

func TestBenchRefusesAKubernetesConfigOfAnotherRuntime(t *testing.T) {
	file := filepath.Join(t.TempDir(), "docker.json")
	if err := os.WriteFile(file, []byte(`{"runtime": "runc"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	home := t.TempDir()
	lookup := func(k string) (string, bool) { return home, k == "HOME" }
	env := Env{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr, Lookup: lookup}
	if code := Main(context.Background(), []string{"bench", "--kubernetes-config", file}, env); code != exitUsage {
		t.Errorf("exit %d, want %d (stderr %q)", code, exitUsage, stderr.String())
	}
	if want := `sets runtime "runc": it must set "runtime": "kubernetes"`; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr %q, want it to contain %q", stderr.String(), want)
	}
}

func TestConfigArgsPassesTheGivenSettingsOn(t *testing.T) {
	o := &options{configFile: "/etc/sandpit.json"}
	root := &cobra.Command{Use: "sandpit"}
	o.configFlag(root.PersistentFlags(), "base-image", "base_image", "")
	o.configFlag(root.PersistentFlags(), "network", "network", "")
	o.configFlag(root.PersistentFlags(), "docker-host", "docker_host", "")
	var got []string
	root.AddCommand(&cobra.Command{Use: "bench", RunE: func(cmd *cobra.Command, _ []string) error {
		got = o.configArgs(cmd)
		return nil
	}})
	root.SetArgs([]string{"bench", "--network", "none", "--base-image", "sandpit-base:bookworm-2"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	// In the order the settings were registered; settings not given are left to the
	// environment and the config file, which the daemon reads itself.
	want := []string{"--config=/etc/sandpit.json", "--base-image=sandpit-base:bookworm-2", "--network=none"}
	if !slices.Equal(got, want) {
		t.Errorf("configArgs = %q, want %q", got, want)
	}
}
