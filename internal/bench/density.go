package bench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/client"
)

// Density is what idle sandboxes cost on the Kubernetes daemon's cluster
// (KubernetesOptions.Density): how many idle sessions it holds at once, and what each costs the
// daemon and the API server.
type Density struct {
	// Sessions is how many idle sessions were open at once: up to KubernetesOptions.Density,
	// fewer when the cluster had no room for the next.
	Sessions int `json:"sessions"`
	// Refusal is the daemon's answer to the session after the last ("" when the cap came
	// first): its words on what bounds the room.
	Refusal string `json:"refusal,omitempty"`
	// WindowSeconds is the length of each idle window the requests were counted over.
	WindowSeconds float64 `json:"window_seconds"`
	// APIRequestsIdle and APIRequestsSessions are the daemon's requests to the API server per
	// minute (sandpit_kubernetes_api_requests_total), idle with no session and idle with
	// Sessions open; APIRequestsPerSandbox is their difference per session.
	APIRequestsIdle       float64 `json:"api_requests_per_minute_idle"`
	APIRequestsSessions   float64 `json:"api_requests_per_minute_sessions"`
	APIRequestsPerSandbox float64 `json:"api_requests_per_minute_per_sandbox"`
	// OpenRequestsPerSandbox is the requests of the opens, the warm pool's refills among them,
	// per session.
	OpenRequestsPerSandbox float64 `json:"open_requests_per_sandbox"`
	// DaemonRSSIdleMiB and DaemonRSSSessionsMiB are the daemon's resident memory with no
	// session and with Sessions open, in MiB; DaemonKiBPerSandbox their difference per
	// session, in KiB.
	DaemonRSSIdleMiB     float64 `json:"daemon_rss_idle_mib"`
	DaemonRSSSessionsMiB float64 `json:"daemon_rss_sessions_mib"`
	DaemonKiBPerSandbox  float64 `json:"daemon_kib_per_sandbox"`
}

// apiRequests reads the daemon's count of requests to the Kubernetes API server.
func (in *instance) apiRequests(ctx context.Context) (float64, error) {
	m, err := in.rest.metrics(ctx)
	if err != nil {
		return 0, err
	}
	n, ok := m["sandpit_kubernetes_api_requests_total"]
	if !ok {
		return 0, errors.New("the daemon's /metrics has no sandpit_kubernetes_api_requests_total")
	}
	return n, nil
}

// measureDensity counts the daemon's API requests and memory over window idle, opens up to max
// sessions one after the other, each of an agent of its own (stopping at the first the daemon
// refuses: 429, no room or sessions_max), counts them again over window with those open, and
// closes them.
func (b *bench) measureDensity(ctx context.Context, in *instance, max int, window time.Duration) (*Density, error) {
	d := &Density{WindowSeconds: window.Seconds()}
	perMinute := func() (float64, error) {
		r0, err := in.apiRequests(ctx)
		if err != nil {
			return 0, err
		}
		select {
		case <-ctx.Done():
			return 0, context.Cause(ctx)
		case <-time.After(window):
		}
		r1, err := in.apiRequests(ctx)
		return (r1 - r0) / window.Minutes(), err
	}
	var err error
	if d.APIRequestsIdle, err = perMinute(); err != nil {
		return nil, err
	}
	rss, err := readRSS(in.daemon.pid())
	if err != nil {
		return nil, err
	}
	d.DaemonRSSIdleMiB = round(float64(rss)/(1<<20), 1)

	api := in.rest.api
	var ids []string // session i is agent density-i's (sessions_per_agent does not bound it)
	defer func() {
		for i, id := range ids {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			if _, err := api.CloseSession(cctx, densityAgent(i), id); err != nil {
				b.say("warning: closing the bench's session %s: %v", id, err)
			}
			cancel()
		}
	}()
	before, err := in.apiRequests(ctx)
	if err != nil {
		return nil, err
	}
	for len(ids) < max {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		s, err := api.CreateSession(cctx, densityAgent(len(ids)), apitype.SessionCreate{})
		cancel()
		var apiErr *client.APIError
		if errors.As(err, &apiErr) && apiErr.Status == http.StatusTooManyRequests {
			d.Refusal = apiErr.Message
			break
		}
		if err != nil {
			return nil, fmt.Errorf("opening idle session %d: %w", len(ids)+1, err)
		}
		ids = append(ids, s.ID)
	}
	d.Sessions = len(ids)
	if d.Sessions == 0 {
		return nil, fmt.Errorf("the cluster took no idle session: %s", d.Refusal)
	}
	after, err := in.apiRequests(ctx)
	if err != nil {
		return nil, err
	}
	d.OpenRequestsPerSandbox = round((after-before)/float64(d.Sessions), 1)
	b.say("kubernetes: %d idle sessions open (%s); counting over %s", d.Sessions, func() string {
		if d.Refusal != "" {
			return "the next refused: " + d.Refusal
		}
		return "the cap"
	}(), window)
	if d.APIRequestsSessions, err = perMinute(); err != nil {
		return nil, err
	}
	if rss, err = readRSS(in.daemon.pid()); err != nil {
		return nil, err
	}
	d.DaemonRSSSessionsMiB = round(float64(rss)/(1<<20), 1)
	d.DaemonKiBPerSandbox = round((d.DaemonRSSSessionsMiB-d.DaemonRSSIdleMiB)*1024/float64(d.Sessions), 0)
	d.APIRequestsPerSandbox = round((d.APIRequestsSessions-d.APIRequestsIdle)/float64(d.Sessions), 2)
	d.APIRequestsIdle, d.APIRequestsSessions = round(d.APIRequestsIdle, 1), round(d.APIRequestsSessions, 1)
	return d, nil
}

func densityAgent(i int) string { return "density-" + strconv.Itoa(i) }
