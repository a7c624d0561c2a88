package config

import (
	"strings"
	"testing"
)

func TestNetworkAllowSettings(t *testing.T) {
	c := Default()
	if err := c.Set("network_allow", "api.example.com, *.example.org:443,10.0.0.0/8"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.NetworkAllow, "|"); got != "api.example.com|*.example.org:443|10.0.0.0/8" {
		t.Fatalf("network_allow = %q", got)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("valid allowlist refused: %v", err)
	}
	for _, tc := range []struct {
		mutate func(*Config)
		want   string
	}{
		{func(c *Config) { c.Network = "some" }, `"full", "none" or "allowlist"`},
		{func(c *Config) { c.NetworkAllow = []string{"*.com"} }, "network_allow"},
		{func(c *Config) { c.NetworkAllow = []string{"a.example.com:http"} }, "port"},
		{func(c *Config) { c.Network, c.NetworkAllow = "full", []string{"a.example.com"} }, `only with network "allowlist"`},
		{func(c *Config) { c.EgressMaxConnections = 0 }, "egress_max_connections"},
		{func(c *Config) { c.EgressMaxBytesReceived = 10 }, "egress_max_bytes_received"},
		{func(c *Config) { c.EgressConnectionTimeoutMS = 5 }, "egress_connection_timeout_ms"},
	} {
		c := Default()
		tc.mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate() = %v, want an error with %q", err, tc.want)
		}
	}
	eg := Default().Egress()
	if len(eg.IndexURLs) != 1 || eg.IndexURLs[0] != "" || eg.Limits.MaxConnections != 256 {
		t.Errorf("Egress() = %+v", eg)
	}
}
