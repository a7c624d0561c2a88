// Package metrics exposes the daemon's Prometheus metrics from a private registry: executions
// by source and outcome, their durations and install times, agent.* calls, job fires by
// status, slots busy, queue depth and sandbox resets. It observes the daemon by wrapping the
// ledger's recorder and the job store, so no other package knows about it.
package metrics

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/jobs"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/session"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// Metrics holds the registry and its collectors.
type Metrics struct {
	reg      *prometheus.Registry
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	install  prometheus.Histogram
	calls    *prometheus.CounterVec
	fires    *prometheus.CounterVec
	starts   *prometheus.CounterVec
	egress   *prometheus.CounterVec
	egressB  *prometheus.CounterVec
	secrets  *prometheus.CounterVec
}

// New returns the metrics, with the Go runtime's and the process's own collectors.
func New() *Metrics {
	m := &Metrics{
		reg: prometheus.NewRegistry(),
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandpit_executions_total",
			Help: "Finished executions, by source (api, cli, mcp, job) and outcome."}, []string{"source", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "sandpit_execution_duration_seconds",
			Help:    "Wall-clock duration of finished executions' programs, by source.",
			Buckets: []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}}, []string{"source"}),
		install: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "sandpit_dependency_install_seconds",
			Help:    "Time executions spent checking and installing their dependencies.",
			Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandpit_agent_calls_total",
			Help: "agent.* calls made by programs, by method and result (ok, error)."}, []string{"method", "result"}),
		fires: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandpit_job_fires_total",
			Help: "Job fires, by status (started, skipped, queued, missed, failed)."}, []string{"status"}),
		starts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandpit_execution_starts_total",
			Help: "Programs started, by how: fork (from the fork server, modules preloaded) or cold (a fresh interpreter)."}, []string{"start"}),
	}
	m.egress = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandpit_egress_connections_total",
		Help: "Outbound connections runs asked the sandbox's proxy for (network allowlist), by result (allowed, refused)."}, []string{"result"})
	m.egressB = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandpit_egress_bytes_total",
		Help: "Bytes runs' outbound connections carried through the proxy, by direction (sent, received)."}, []string{"direction"})
	m.secrets = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sandpit_secret_uses_total",
		Help: "Requests of runs that carried a secret's placeholder to a host, by whether the egress proxy added the value (added: true, false); never a secret's name or value."}, []string{"added"})
	m.reg.MustRegister(m.runs, m.duration, m.install, m.calls, m.fires, m.starts, m.egress, m.egressB, m.secrets,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Watch registers gauges read from the running daemon: slots busy and queue depth (stats),
// and sandbox resets.
func (m *Metrics) Watch(stats func() engine.Stats, resets func() int64) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandpit_slots_busy", Help: "Slots running an execution now."},
			func() float64 { return float64(stats().Busy) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandpit_slots", Help: "Slots of the sandbox."},
			func() float64 { return float64(stats().Slots) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandpit_queue_depth", Help: "Requests waiting for a free slot now."},
			func() float64 { return float64(stats().Waiting) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sandpit_sandbox_resets_total",
			Help: "Times the sandbox was lost (its container or executor died or hung) and brought back."},
			func() float64 { return float64(resets()) }),
	)
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Recorder wraps next (the ledger) and counts every finished execution.
func (m *Metrics) Recorder(next sandbox.Recorder) sandbox.Recorder { return recorder{m, next} }

type recorder struct {
	m    *Metrics
	next sandbox.Recorder
}

func (r recorder) Begin(ctx context.Context, spec sandbox.Spec, head sandbox.Result) error {
	return r.next.Begin(ctx, spec, head)
}

func (r recorder) Discard(ctx context.Context, id string) error { return r.next.Discard(ctx, id) }

func (r recorder) Finish(ctx context.Context, res sandbox.Result) error {
	r.m.runs.WithLabelValues(string(res.Source), string(res.Outcome)).Inc()
	r.m.duration.WithLabelValues(string(res.Source)).Observe((time.Duration(res.DurationMS) * time.Millisecond).Seconds())
	if res.Start == sandbox.StartFork || res.Start == sandbox.StartCold {
		r.m.starts.WithLabelValues(string(res.Start)).Inc()
	}
	if len(res.Dependencies) > 0 {
		r.m.install.Observe((time.Duration(res.InstallMS) * time.Millisecond).Seconds())
	}
	for _, c := range res.Calls {
		result := "ok"
		if !c.OK {
			result = "error"
		}
		r.m.calls.WithLabelValues(methodLabel(c.Method), result).Inc()
	}
	for _, c := range res.Egress {
		result := "refused"
		if c.Allowed {
			result = "allowed"
		}
		r.m.egress.WithLabelValues(result).Inc()
		r.m.egressB.WithLabelValues("sent").Add(float64(c.BytesSent))
		r.m.egressB.WithLabelValues("received").Add(float64(c.BytesReceived))
	}
	if res.EgressOmitted > 0 {
		r.m.egress.WithLabelValues("omitted").Add(float64(res.EgressOmitted))
	}
	for _, u := range res.SecretUses {
		r.m.secrets.WithLabelValues(strconv.FormatBool(u.Added)).Inc()
	}
	return r.next.Finish(ctx, res)
}

// JobStore wraps the job store and counts fires as they are recorded.
func (m *Metrics) JobStore(next jobs.Store) jobs.Store { return jobStore{Store: next, m: m} }

type jobStore struct {
	jobs.Store
	m *Metrics
}

func (s jobStore) ClaimFires(ctx context.Context, jobID string, expected, next time.Time, fires []store.Fire) ([]store.Fire, bool, error) {
	out, claimed, err := s.Store.ClaimFires(ctx, jobID, expected, next, fires)
	if claimed && err == nil {
		for _, f := range out {
			s.m.fires.WithLabelValues(f.Status).Inc()
		}
	}
	return out, claimed, err
}

func (s jobStore) AddFire(ctx context.Context, f store.Fire) (store.Fire, error) {
	out, err := s.Store.AddFire(ctx, f)
	if err == nil {
		s.m.fires.WithLabelValues(out.Status).Inc()
	}
	return out, err
}

func (s jobStore) SetFire(ctx context.Context, id int64, status, executionID, reason string) error {
	err := s.Store.SetFire(ctx, id, status, executionID, reason)
	if err == nil && status == store.FireFailed {
		s.m.fires.WithLabelValues(status).Inc()
	}
	return err
}

// methodLabel bounds the method label to the known methods: a program may call any name.
func methodLabel(m string) string {
	if slices.Contains(sandbox.CallMethods, m) {
		return m
	}
	return "other"
}

// WatchE2B reports the E2B API's running and warm sandboxes.
func (m *Metrics) WatchE2B(running, warm func() int) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandpit_e2b_sandboxes", Help: "Sandboxes of the E2B API now (running or paused)."},
			func() float64 { return float64(running()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandpit_e2b_warm_sandboxes",
			Help: "Warm sessions ready to hand out, to E2B sandboxes as to every door's (the session pool's, e2b_pool)."},
			func() float64 { return float64(warm()) }),
	)
}

// WatchCapacity reports how many more sandboxes fit now (the Kubernetes runtime's
// ResourceQuotas and nodes); NaN when that is unknown. Each scrape asks room, which reads
// the cluster at most every 10 s.
func (m *Metrics) WatchCapacity(room func(context.Context) apitype.Capacity) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandpit_sandboxes_fit",
		Help: "More sandboxes that fit now, beside those running (the Kubernetes runtime's ResourceQuotas and nodes); NaN when unknown."},
		func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if c := room(ctx); c.Fit != nil {
				return float64(*c.Fit)
			}
			return math.NaN()
		}))
}

// WatchKubernetesAPI reports the Kubernetes runtime's requests to the API server
// (kubernetes.Runtime.APIRequests): what the sandboxes cost the control plane.
func (m *Metrics) WatchKubernetesAPI(requests func() uint64) {
	m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sandpit_kubernetes_api_requests_total",
		Help: "Requests the Kubernetes runtime sent the API server (each watch and exec stream counted once)."},
		func() float64 { return float64(requests()) }))
}

// WatchPool reports the warm session pool (e2b_pool, session_pool_max): the sessions ready,
// its target now, and the creations it served and missed.
func (m *Metrics) WatchPool(stats func() session.PoolStats) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandpit_session_pool_ready", Help: "Warm sessions ready to claim, their interpreter started."},
			func() float64 { return float64(stats().Ready) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandpit_session_pool_target", Help: "Warm sessions the pool aims to keep now (raised while creations outrun it)."},
			func() float64 { return float64(stats().Target) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sandpit_session_pool_claims_total", Help: "Session creations served from the warm pool."},
			func() float64 { return float64(stats().Claims) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "sandpit_session_pool_misses_total", Help: "Session creations that found the warm pool empty."},
			func() float64 { return float64(stats().Misses) }),
	)
}

// WatchTemplatePools adds the templates' warm pools (template_pools), each labelled with its
// template (OWNER/NAME): warm sessions ready, and creations served from the pool.
func (m *Metrics) WatchTemplatePools(stats func() map[string]session.PoolStats) {
	m.reg.MustRegister(templatePools{stats: stats})
}

var (
	templatePoolReady = prometheus.NewDesc("sandpit_template_pool_ready",
		"Warm sessions of a template (template_pools) ready to claim, its start command run.", []string{"template"}, nil)
	templatePoolClaims = prometheus.NewDesc("sandpit_template_pool_claims_total",
		"Session creations of a template served from its warm pool.", []string{"template"}, nil)
)

// templatePools collects the templates' warm pools' counts, one series per template.
type templatePools struct {
	stats func() map[string]session.PoolStats
}

func (templatePools) Describe(ch chan<- *prometheus.Desc) {
	ch <- templatePoolReady
	ch <- templatePoolClaims
}

func (t templatePools) Collect(ch chan<- prometheus.Metric) {
	for key, st := range t.stats() {
		ch <- prometheus.MustNewConstMetric(templatePoolReady, prometheus.GaugeValue, float64(st.Ready), key)
		ch <- prometheus.MustNewConstMetric(templatePoolClaims, prometheus.CounterValue, float64(st.Claims), key)
	}
}

// WatchSessions adds the stateful sessions' gauges: active (running), paused and hibernated
// sessions, the bytes each budget holds (sessions_paused_max_bytes, hibernated_max_bytes),
// and the warm session sandboxes ready to claim (warm).
func (m *Metrics) WatchSessions(stats func() session.Stats, warm func() int) {
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandpit_warm_sessions",
			Help: "Warm session sandboxes ready to claim, their executors started (warm_sessions)."},
			func() float64 { return float64(warm()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandpit_sessions_live", Help: "Sessions with a container now (running or paused)."},
			func() float64 { return float64(stats().Active) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandpit_sessions_paused", Help: "Paused sessions now."},
			func() float64 { return float64(stats().Paused) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandpit_sessions_paused_bytes",
			Help: "Memory the paused sessions count against sessions_paused_max_bytes."},
			func() float64 { return float64(stats().PausedBytes) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandpit_sessions_hibernated", Help: "Hibernated sessions now."},
			func() float64 { return float64(stats().Hibernated) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sandpit_sessions_hibernated_bytes",
			Help: "Bytes of the hibernation files, against hibernated_max_bytes."},
			func() float64 { return float64(stats().HibernatedBytes) }),
	)
}
