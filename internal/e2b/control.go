package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/secrets"
)

// newSandbox is the body of POST /sandboxes (E2B's NewSandbox).
type newSandbox struct {
	TemplateID          string                  `json:"templateID"`
	Timeout             *int64                  `json:"timeout"`
	AutoPause           bool                    `json:"autoPause"`
	AutoResume          *struct{ Enabled bool } `json:"autoResume"`
	Secure              *bool                   `json:"secure"`
	AllowInternetAccess *bool                   `json:"allow_internet_access"`
	Network             *networkConfig          `json:"network"`
	Metadata            map[string]string       `json:"metadata"`
	EnvVars             map[string]string       `json:"envVars"`
	MCP                 map[string]any          `json:"mcp"`
	IAM                 map[string]any          `json:"iam"`
	VolumeMounts        []any                   `json:"volumeMounts"`
}

// networkConfig is E2B's SandboxNetworkConfig.
type networkConfig struct {
	AllowPublicTraffic *bool          `json:"allowPublicTraffic,omitempty"`
	AllowOut           []string       `json:"allowOut,omitempty"`
	DenyOut            []string       `json:"denyOut,omitempty"`
	MaskRequestHost    string         `json:"maskRequestHost,omitempty"`
	EgressProxy        map[string]any `json:"egressProxy,omitempty"`
	Rules              map[string]any `json:"rules,omitempty"`
}

// sandboxJSON is E2B's Sandbox: the answer to create and connect.
type sandboxJSON struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	Alias              string  `json:"alias,omitempty"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken"`
	TrafficAccessToken string  `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// detailJSON is E2B's SandboxDetail and ListedSandbox.
type detailJSON struct {
	TemplateID          string            `json:"templateID"`
	Alias               string            `json:"alias,omitempty"`
	SandboxID           string            `json:"sandboxID"`
	ClientID            string            `json:"clientID"`
	StartedAt           time.Time         `json:"startedAt"`
	EndAt               time.Time         `json:"endAt"`
	EnvdVersion         string            `json:"envdVersion"`
	EnvdAccessToken     string            `json:"envdAccessToken,omitempty"`
	AllowInternetAccess *bool             `json:"allowInternetAccess,omitempty"`
	Domain              *string           `json:"domain"`
	CPUCount            int               `json:"cpuCount"`
	MemoryMB            int               `json:"memoryMB"`
	DiskSizeMB          int               `json:"diskSizeMB"`
	Metadata            map[string]string `json:"metadata"`
	State               string            `json:"state"`
	Network             *networkConfig    `json:"network,omitempty"`
}

// clientID is the deprecated clientID E2B still requires.
const clientID = "sandpit"

// defaultTimeout is E2B's default sandbox timeout, in seconds.
const defaultTimeout = 15

// controlRoutes is the control plane: E2B's spec/openapi.yml.
func (s *Server) controlRoutes() http.Handler {
	mux := http.NewServeMux()
	authed := func(h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			agent, ok := s.authenticate(w, r)
			if ok {
				h(w, r, agent)
			}
		}
	}
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("POST /sandboxes", authed(s.create))
	mux.HandleFunc("GET /sandboxes", authed(s.listV1))
	mux.HandleFunc("GET /v2/sandboxes", authed(s.list))
	mux.HandleFunc("GET /sandboxes/{id}", authed(s.get))
	mux.HandleFunc("DELETE /sandboxes/{id}", authed(s.kill))
	mux.HandleFunc("POST /sandboxes/{id}/timeout", authed(s.setTimeout))
	mux.HandleFunc("POST /sandboxes/{id}/refreshes", authed(s.refresh))
	mux.HandleFunc("POST /sandboxes/{id}/connect", authed(s.connect))
	mux.HandleFunc("POST /sandboxes/{id}/pause", authed(s.pause))
	mux.HandleFunc("POST /sandboxes/{id}/resume", authed(s.resumeRoute))
	mux.HandleFunc("GET /sandboxes/{id}/metrics", authed(s.metrics))
	mux.HandleFunc("GET /sandboxes/metrics", authed(s.metricsOfMany))
	s.templateRoutes(mux, authed)
	for _, u := range []struct{ pattern, feature string }{
		{"POST /sandboxes/{id}/fork", "forks of sandboxes"},
		{"/sandboxes/{id}/snapshots", "snapshots"},
		{"/snapshots", "snapshots"},
		{"/snapshots/", "snapshots"},
		{"PUT /sandboxes/{id}/network", "network changes of a running sandbox"},
		{"GET /sandboxes/{id}/logs", "sandbox logs"},
		{"GET /v2/sandboxes/{id}/logs", "sandbox logs"},
		{"/volumes", "volumes"},
		{"/volumes/", "volumes"},
		{"/secrets", "secrets"},
		{"/secrets/", "secrets"},
		{"/teams", "teams"},
		{"/teams/", "teams"},
		{"/api-keys", "API keys managed over the API (use `sandpit keys`)"},
		{"/api-keys/", "API keys managed over the API (use `sandpit keys`)"},
		{"/access-tokens", "access tokens"},
		{"/access-tokens/", "access tokens"},
		{"/nodes", "cluster nodes"},
		{"/nodes/", "cluster nodes"},
		{"/admin/", "admin operations"},
	} {
		mux.Handle(u.pattern, authed(func(w http.ResponseWriter, r *http.Request, _ string) { unsupported(u.feature)(w, r) }))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("%s %s is not a route of the E2B API; sandbox traffic needs the E2b-Sandbox-Id and E2b-Sandbox-Port headers", r.Method, r.URL.Path))
	})
	return mux
}

// authenticate returns the agent of the request's X-API-Key, or answers 401.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (string, bool) {
	key := r.Header.Get("X-API-Key")
	if key == "" {
		writeError(w, http.StatusUnauthorized, "an API key is required: send X-API-Key (E2B_API_KEY) with a key from `sandpit keys create --agent NAME`")
		return "", false
	}
	agent, err := s.keys.APIKeyAgent(r.Context(), key)
	if err != nil {
		writeError(w, http.StatusUnauthorized, "the API key (X-API-Key) is not valid: it was revoked or never issued by this daemon; `sandpit keys list` shows the keys")
		return "", false
	}
	return agent, true
}

// lookup returns agent's running sandbox id, or answers 404.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, agent string) *box {
	id := r.PathValue("id")
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	if b == nil || b.agent != agent || s.state(b) == "" {
		writeError(w, http.StatusNotFound, fmt.Sprintf("sandbox %q not found: it was killed, timed out, or never existed for this API key", id))
		return nil
	}
	return b
}

func (s *Server) create(w http.ResponseWriter, r *http.Request, agent string) {
	var req newSandbox
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	switch {
	case len(req.VolumeMounts) > 0:
		unsupported("volume mounts")(w, r)
		return
	case len(req.MCP) > 0:
		unsupported("MCP gateways in sandboxes")(w, r)
		return
	case len(req.IAM) > 0:
		unsupported("sandbox IAM settings")(w, r)
		return
	}
	// The e2b_templates are the daemon's own image; any other templateID is a template of the
	// key's agent (or AGENT/NAME of a shared one), built with POST /v1/templates.
	// NAME:TAG starts a tagged version (NAME:VERSION a kept one); E2B's NAME:default is NAME.
	tmpl := req.TemplateID
	if name, tag, ok := strings.Cut(tmpl, ":"); ok && currentTag(tag) {
		tmpl = name
	}
	if slices.Contains(s.cfg.Templates, tmpl) {
		tmpl = ""
	} else if tmpl == "" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("templateID is empty: use one of %s (the daemon's e2b_templates) or a template's name",
			strings.Join(s.cfg.Templates, ", ")))
		return
	}
	timeout := int64(defaultTimeout)
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	if timeout < 1 || time.Duration(timeout)*time.Second > s.cfg.MaxLifetime {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout is %d; allowed range is 1 to %d seconds (the daemon's session_max_lifetime_ms)",
			timeout, int64(s.cfg.MaxLifetime/time.Second)))
		return
	}
	netAllow, herr := s.narrow(req.AllowInternetAccess, req.Network)
	if herr != nil {
		writeError(w, herr.status, herr.msg)
		return
	}
	if err := sandbox.CheckEnv("envVars", req.EnvVars); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	env, names, err := splitSecrets(req.EnvVars)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	// No deadline while it is made (its maximum lifetime bounds it): the timeout counts from
	// the moment it is handed out, as E2B's does, so a creation slowed by a busy engine or a
	// template's start command does not eat into it, nor end it before it is answered.
	sreq := sessionRequest(agent, s.cfg.MaxLifetime)
	sreq.NetworkAllow, sreq.Env, sreq.Template, sreq.Secrets = netAllow, env, tmpl, names
	sreq.AutoPause, sreq.AutoResume = &req.AutoPause, req.AutoResume != nil && req.AutoResume.Enabled
	sess, err := s.sessions.Create(r.Context(), sreq) // from the warm pool when it has one
	if fe, ok := errors.AsType[*sandbox.FieldError](err); ok && fe.Field == "template" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("templateID %q is not one of %s (the daemon's e2b_templates), nor a template this key's agent may start: %s",
			req.TemplateID, strings.Join(s.cfg.Templates, ", "), fe.Message))
		return
	}
	if err != nil {
		writeEngineError(w, "creating the sandbox", err)
		return
	}
	if err := sess.SetDeadline(endAfter(sess, timeout)); err != nil {
		if _, cerr := sess.Close(context.WithoutCancel(r.Context())); cerr != nil {
			s.log.Warn("closing a sandbox whose timeout could not be set", "sandbox", sess.ID(), "error", cerr)
		}
		writeEngineError(w, "setting the sandbox's timeout", err)
		return
	}
	b := &box{sess: sess, id: sess.ID(), agent: agent, template: req.TemplateID, token: newToken(), metadata: req.Metadata, env: env,
		allowInternet: req.AllowInternetAccess, network: req.Network,
		contexts: map[string]*codeContext{}, procs: map[uint32]*proc{}, tags: map[string]uint32{}}
	if b.metadata == nil {
		b.metadata = map[string]string{}
	}
	s.mu.Lock()
	s.boxes[b.id] = b
	s.mu.Unlock()
	go s.watch(b)
	s.log.Info("e2b sandbox created", "sandbox", b.id, "agent", agent, "template", b.template, "timeout_s", timeout, "warm", sess.FromPool())
	writeJSON(w, http.StatusCreated, s.sandboxJSON(b))
}

func (s *Server) sandboxJSON(b *box) sandboxJSON {
	return sandboxJSON{TemplateID: b.template, SandboxID: b.id, Alias: b.template, ClientID: clientID, EnvdVersion: EnvdVersion,
		EnvdAccessToken: b.token, TrafficAccessToken: b.token, Domain: s.domain()}
}

// domain is the sandboxes' domain as E2B answers it: null when the daemon has none.
func (s *Server) domain() *string {
	if s.cfg.Domain == "" {
		return nil
	}
	return &s.cfg.Domain
}

func (s *Server) detail(b *box, token bool) detailJSON {
	info := b.sess.Info()
	state := s.state(b)
	if state == "" {
		state = "running" // it ended just now
	}
	end := info.EndedAt
	switch {
	case info.Deadline != nil:
		end = info.Deadline
	case info.ExpiresAt != nil:
		end = info.ExpiresAt
	}
	d := detailJSON{TemplateID: b.template, Alias: b.template, SandboxID: b.id, ClientID: clientID, StartedAt: info.CreatedAt.UTC(),
		EnvdVersion: EnvdVersion, AllowInternetAccess: b.allowInternet, CPUCount: s.cfg.CPUs,
		MemoryMB: s.cfg.MemoryMB, DiskSizeMB: s.cfg.DiskMB, Metadata: b.metadata, State: state, Network: b.network, Domain: s.domain()}
	if end != nil {
		d.EndAt = end.UTC()
	}
	if token {
		d.EnvdAccessToken = b.token
	}
	return d
}

func (s *Server) get(w http.ResponseWriter, r *http.Request, agent string) {
	if b := s.lookup(w, r, agent); b != nil {
		writeJSON(w, http.StatusOK, s.detail(b, true))
	}
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request, agent string) {
	b := s.lookup(w, r, agent)
	if b == nil {
		return
	}
	s.forget(b)
	s.closeContexts(r.Context(), b, s.takeContexts(b))
	if _, err := b.sess.Close(r.Context()); err != nil {
		writeEngineError(w, "killing the sandbox", err)
		return
	}
	s.log.Info("e2b sandbox killed", "sandbox", b.id, "agent", agent)
	w.WriteHeader(http.StatusNoContent)
}

// extend sets b's end to now+seconds (only later than its present end when onlyLater), within
// its maximum lifetime; it answers the error when seconds is out of range.
func (s *Server) extend(w http.ResponseWriter, b *box, seconds int64, onlyLater bool) bool {
	end := time.Now().Add(time.Duration(seconds) * time.Second)
	latest := b.sess.LatestDeadline()
	if seconds < 0 || end.After(latest) {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout is %d; this sandbox may live at most until %s, %d seconds from now (the daemon's session_max_lifetime_ms counts from its creation, paused time left out)",
			seconds, latest.UTC().Format(time.RFC3339), int64(time.Until(latest)/time.Second)))
		return false
	}
	if d := b.sess.Info().Deadline; onlyLater && d != nil && !end.After(*d) {
		return true
	}
	if err := b.sess.SetDeadline(end); err != nil {
		writeEngineError(w, "setting the sandbox's timeout", err)
		return false
	}
	return true
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request, agent string) {
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if req.Timeout == nil {
		writeError(w, http.StatusBadRequest, "timeout is required: the sandbox's new time to live in seconds, from now")
		return
	}
	if b := s.lookup(w, r, agent); b != nil && s.extend(w, b, *req.Timeout, false) {
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) refresh(w http.ResponseWriter, r *http.Request, agent string) {
	var req struct {
		Duration *int64 `json:"duration"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	d := int64(defaultTimeout)
	if req.Duration != nil {
		d = *req.Duration
	}
	if b := s.lookup(w, r, agent); b != nil && s.extend(w, b, d, true) {
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) connect(w http.ResponseWriter, r *http.Request, agent string) {
	var req struct {
		Timeout *int64 `json:"timeout"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	b := s.lookup(w, r, agent)
	if b == nil {
		return
	}
	if s.state(b) == "paused" {
		timeout := int64(defaultTimeout)
		if req.Timeout != nil {
			timeout = *req.Timeout
		}
		if err := s.resume(r.Context(), b, timeout); err != nil {
			writeEngineError(w, "resuming the sandbox", err)
			return
		}
		writeJSON(w, http.StatusCreated, s.sandboxJSON(b))
		return
	}
	if req.Timeout != nil && !s.extend(w, b, *req.Timeout, true) {
		return
	}
	writeJSON(w, http.StatusOK, s.sandboxJSON(b))
}

// pause is POST /sandboxes/{id}/pause: the session is paused (frozen, its memory kept); it
// does not time out while paused. 409 when it is paused already.
func (s *Server) pause(w http.ResponseWriter, r *http.Request, agent string) {
	b := s.lookup(w, r, agent)
	if b == nil {
		return
	}
	if s.state(b) == "paused" {
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %q is paused already", b.id))
		return
	}
	info, err := b.sess.Pause(r.Context())
	if err == nil && info.State == sandbox.SessionHibernated {
		// A pod cannot be frozen: the session layer hibernates it (its files kept, its memory
		// not); the sandbox reads "paused" and resumes as one does, and the header says so.
		w.Header().Set("X-Sandpit-Paused-As", "hibernated")
	}
	if err != nil {
		writeEngineError(w, "pausing the sandbox", err)
		return
	}
	s.log.Info("e2b sandbox paused", "sandbox", b.id, "agent", agent, "state", b.sess.Info().State)
	w.WriteHeader(http.StatusNoContent)
}

// resumeRoute is the deprecated POST /sandboxes/{id}/resume: 201 with the sandbox, 409 when it
// is not paused.
func (s *Server) resumeRoute(w http.ResponseWriter, r *http.Request, agent string) {
	var req struct {
		Timeout   *int64 `json:"timeout"`
		AutoPause *bool  `json:"autoPause"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	b := s.lookup(w, r, agent)
	if b == nil {
		return
	}
	if s.state(b) != "paused" {
		writeError(w, http.StatusConflict, fmt.Sprintf("sandbox %q is not paused", b.id))
		return
	}
	timeout := int64(defaultTimeout)
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	if req.AutoPause != nil {
		b.sess.SetAutoPause(*req.AutoPause)
	}
	if err := s.resume(r.Context(), b, timeout); err != nil {
		writeEngineError(w, "resuming the sandbox", err)
		return
	}
	writeJSON(w, http.StatusCreated, s.sandboxJSON(b))
}

// sessionRequest is the session of a sandbox of agent: it lives until its deadline (E2B's
// timeout), so its idle timeout is its maximum lifetime, life.
func sessionRequest(agent string, life time.Duration) sandbox.SessionRequest {
	ms := life.Milliseconds()
	off := false
	req := sandbox.SessionRequest{Agent: agent, IdleTimeoutMS: &ms, MaxLifetimeMS: &ms}
	req.AutoPause = &off
	return req
}

// listV1 is the deprecated GET /sandboxes: the running ones, filtered by metadata.
func (s *Server) listV1(w http.ResponseWriter, r *http.Request, agent string) {
	filter, err := parseMetadataQuery(r.URL.Query().Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	list := s.mine(agent, filter)
	out := make([]detailJSON, len(list))
	for i, b := range list {
		out[i] = s.detail(b, false)
	}
	writeJSON(w, http.StatusOK, out)
}

// list is GET /v2/sandboxes: metadata, state and template filters, newest first (order=asc:
// oldest), pages of limit (default and at most 100) with X-Next-Token.
func (s *Server) list(w http.ResponseWriter, r *http.Request, agent string) {
	q := r.URL.Query()
	filter, err := parseMetadataQuery(q.Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	states := map[string]bool{}
	for _, v := range q["state"] {
		for st := range strings.SplitSeq(v, ",") {
			if st != "running" && st != "paused" {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("state %q is not a sandbox state: use running or paused", st))
				return
			}
			states[st] = true
		}
	}
	limit := 100
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 || limit > 100 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit is %q; allowed range is 1 to 100", v))
			return
		}
	}
	asc := q.Get("order") == "asc"
	if o := q.Get("order"); o != "" && o != "asc" && o != "desc" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("order is %q: use asc or desc", o))
		return
	}
	var after time.Time
	if v := q.Get("startedAfter"); v != "" {
		if after, err = time.Parse(time.RFC3339, v); err != nil {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("startedAfter is %q, not an RFC 3339 time", v))
			return
		}
	}
	cursor, err := decodeToken(q.Get("nextToken"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	var list []*box
	for _, b := range s.mine(agent, filter) {
		if (q.Get("template") == "" || q.Get("template") == b.template) && !b.sess.Info().CreatedAt.Before(after) &&
			(len(states) == 0 || states[s.state(b)]) {
			list = append(list, b)
		}
	}
	if asc {
		slices.Reverse(list)
	}
	out := []detailJSON{}
	for _, b := range list {
		if cursor != "" && !passed(b, cursor, asc) {
			continue
		}
		if len(out) == limit {
			w.Header().Set("X-Next-Token", encodeToken(out[len(out)-1]))
			break
		}
		out = append(out, s.detail(b, false))
	}
	writeJSON(w, http.StatusOK, out)
}

// mine returns agent's running sandboxes whose metadata has every pair of filter, newest
// first.
func (s *Server) mine(agent string, filter map[string]string) []*box {
	s.mu.Lock()
	var list []*box
	for _, b := range s.boxes {
		if b.agent == agent && matches(b.metadata, filter) {
			list = append(list, b)
		}
	}
	s.mu.Unlock()
	list = slices.DeleteFunc(list, func(b *box) bool { return s.state(b) == "" })
	slices.SortFunc(list, func(a, b *box) int {
		if c := b.sess.Info().CreatedAt.Compare(a.sess.Info().CreatedAt); c != 0 {
			return c
		}
		return strings.Compare(b.id, a.id)
	})
	return list
}

func matches(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// parseMetadataQuery parses the metadata filter "k=v&k2=v2" (each key and value URL-encoded).
func parseMetadataQuery(q string) (map[string]string, error) {
	vals, err := url.ParseQuery(q)
	if err != nil {
		return nil, fmt.Errorf("metadata is %q, not a query of the form key=value&key2=value2 (each URL-encoded): %v", q, err)
	}
	out := map[string]string{}
	for k, v := range vals {
		out[k] = v[0]
	}
	return out, nil
}

// The page token names the last sandbox of the page before: its start and ID.
func encodeToken(d detailJSON) string {
	return base64.RawURLEncoding.EncodeToString([]byte(d.StartedAt.Format(time.RFC3339Nano) + " " + d.SandboxID))
}

func decodeToken(tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	raw, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || !strings.Contains(string(raw), " ") {
		return "", fmt.Errorf("nextToken %q is not a token this API gave (X-Next-Token of the page before)", tok)
	}
	return string(raw), nil
}

// passed reports whether b comes after the cursor's sandbox in the listing's order.
func passed(b *box, cursor string, asc bool) bool {
	at, id, _ := strings.Cut(cursor, " ")
	t, _ := time.Parse(time.RFC3339Nano, at)
	c := b.sess.Info().CreatedAt.UTC().Compare(t)
	if c == 0 {
		c = strings.Compare(b.id, id)
	}
	if asc {
		return c > 0
	}
	return c < 0
}

type httpError struct {
	status int
	msg    string
}

// narrow turns a sandbox's network settings into a narrowing of the daemon's policy: nil
// leaves the policy as it is, an empty list lets nothing out. Settings that would widen the
// policy, or that sandpit cannot express, are refused.
func (s *Server) narrow(allowInternet *bool, n *networkConfig) ([]string, *httpError) {
	var allow []string
	if n != nil {
		if len(n.EgressProxy) > 0 || len(n.Rules) > 0 || n.MaskRequestHost != "" {
			return nil, &httpError{http.StatusNotImplemented, "network.egressProxy, network.rules and network.maskRequestHost are not supported by sandpit's E2B API"}
		}
		for _, d := range n.DenyOut {
			if d != "0.0.0.0/0" {
				return nil, &httpError{http.StatusNotImplemented, fmt.Sprintf("network.denyOut %q is not supported: sandpit's egress is an allowlist, so denyOut may only be 0.0.0.0/0 (nothing out but allowOut)", d)}
			}
		}
		if len(n.DenyOut) > 0 {
			allow = []string{}
		}
		if len(n.AllowOut) > 0 {
			allow = append(allow[:0:0], n.AllowOut...)
		}
	}
	if allowInternet != nil && !*allowInternet && allow == nil {
		allow = []string{}
	}
	if allow == nil {
		return nil, nil
	}
	switch s.cfg.Network {
	case sandbox.NetworkNone:
		if len(allow) > 0 {
			return nil, &httpError{http.StatusBadRequest, fmt.Sprintf("network.allowOut %s would widen the daemon's network \"none\": a sandbox may only narrow it", strings.Join(allow, ", "))}
		}
		return nil, nil // nothing goes out anyway
	case sandbox.NetworkAllowlist:
		return allow, nil // each entry is checked against network_allow when the sandbox runs code
	default:
		return nil, &httpError{http.StatusBadRequest, fmt.Sprintf("the daemon's network is %q, which a sandbox cannot narrow: send allow_internet_access and network only when its network is \"allowlist\" or \"none\"", s.cfg.Network)}
	}
}

// splitSecrets takes out of a sandbox's envVars those that name a sandpit secret
// (docs/secrets.md), NAME: "sandpit-secret:NAME", the placeholder its code then sees: E2B has
// no secrets of its own, and this is the form an agent reads back. It returns the plain
// variables and the secrets' names (sorted); a placeholder under another variable's name is
// an error.
func splitSecrets(envVars map[string]string) (map[string]string, []string, error) {
	var env map[string]string
	var names []string
	for k, v := range envVars {
		name, ok := strings.CutPrefix(v, secrets.PlaceholderPrefix)
		if !ok {
			if env == nil {
				env = map[string]string{}
			}
			env[k] = v
			continue
		}
		if name != k {
			return nil, nil, fmt.Errorf("envVars.%s names the secret %q: a secret's variable is its own name; send envVars {%q: %q}",
				k, name, name, secrets.Placeholder(name))
		}
		names = append(names, name)
	}
	slices.Sort(names)
	return env, names, nil
}
