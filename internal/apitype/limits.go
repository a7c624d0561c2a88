package apitype

// Limits is the answer of GET /v1/limits: the limits in force. Sizes are in bytes, times in
// milliseconds; the names are the config keys.
type Limits struct {
	Slots       int `json:"slots"`
	QueueLength int `json:"queue_length"`
	// ExecutionsPerAgent caps one agent's executions in slots plus queued (the value in force:
	// the default is computed from slots and queue_length).
	ExecutionsPerAgent int    `json:"executions_per_agent"`
	DefaultTimeoutMS   int64  `json:"default_timeout_ms"`
	MaxTimeoutMS       int64  `json:"max_timeout_ms"`
	MaxCodeBytes       int    `json:"max_code_bytes"`
	MaxInputBytes      int    `json:"max_input_bytes"`
	MaxBodyBytes       int64  `json:"max_body_bytes"`
	Network            string `json:"network"`
	// NetworkAllow is what runs may reach with network "allowlist" (network_allow), and
	// NetworkAllowInstall what installs may reach: the package index's hosts (absent otherwise).
	NetworkAllow        []string  `json:"network_allow,omitempty"`
	NetworkAllowInstall []string  `json:"network_allow_install,omitempty"`
	Limits              RunLimits `json:"limits"`
	// InstallTimeoutMS bounds each dependency's install; MaxDependencies the requirements of
	// one request or saved code.
	InstallTimeoutMS int64 `json:"install_timeout_ms"`
	MaxDependencies  int   `json:"max_dependencies"`
	// MaxCalls, MaxCallBytes and CallTimeoutMS bound a run's agent.* calls: their number, the
	// size of each request and answer, the time for each.
	MaxCalls      int   `json:"max_calls"`
	MaxCallBytes  int   `json:"max_call_bytes"`
	CallTimeoutMS int64 `json:"call_timeout_ms"`
	// PackageIndex is where dependencies come from (passwords in URLs redacted).
	PackageIndex PackageIndex `json:"package_index"`
	// Quotas bound what each agent may store (absent when the server has no knowledge store).
	Quotas *Quotas `json:"quotas,omitempty"`
	// MaxValidationCost is the most work checking one input or OUTPUT against a saved code's
	// schema may need, in schema evaluations.
	MaxValidationCost int64 `json:"max_validation_cost"`
	// MaxInputFiles caps a request's input files, MaxInputFileBytes each one's bytes and
	// MaxInputFilesBytes their total.
	MaxInputFiles      int   `json:"max_input_files"`
	MaxInputFileBytes  int64 `json:"max_input_file_bytes"`
	MaxInputFilesBytes int64 `json:"max_input_files_bytes"`
	// OutputFiles caps the output files a run returns, OutputFileBytes each one's bytes and
	// OutputFilesBytes their total (also in limits).
	OutputFiles      int   `json:"output_files"`
	OutputFileBytes  int64 `json:"output_file_bytes"`
	OutputFilesBytes int64 `json:"output_files_bytes"`
	// Charts says whether runs save open figures and shown images as output files by default.
	Charts bool `json:"charts"`
	// MaxInlineFileBytes is the largest output file an answer holds inline (inline_files), and
	// MaxInlineBytes the most bytes of files one answer holds inline.
	MaxInlineFileBytes int64 `json:"max_inline_file_bytes"`
	MaxInlineBytes     int64 `json:"max_inline_bytes"`
	// FilesMaxBytes is the quota on all runs' kept output files (files_max_bytes), and
	// FilesUsedBytes what they take now (absent without a file store).
	FilesMaxBytes  int64 `json:"files_max_bytes,omitempty"`
	FilesUsedBytes int64 `json:"files_used_bytes,omitempty"`
	// Sessions bounds stateful sessions (absent when the daemon has none).
	Sessions *SessionLimits `json:"sessions,omitempty"`
	// Capacity says how many more sandboxes fit now (absent when the runtime does not know:
	// Docker's).
	Capacity *Capacity `json:"capacity,omitempty"`
	// Ledger bounds the execution ledger (absent when the server keeps none).
	Ledger *LedgerLimits `json:"ledger,omitempty"`
}

// LedgerLimits are the execution ledger's retention (Limits.Ledger): records older than
// LedgerMaxAgeDays, beyond the newest LedgerMaxExecutions, and the oldest while all take more
// than LedgerMaxBytes are pruned. The names are the config keys; 0 means no bound of that kind.
type LedgerLimits struct {
	LedgerMaxAgeDays    int64 `json:"ledger_max_age_days"`
	LedgerMaxExecutions int   `json:"ledger_max_executions"`
	LedgerMaxBytes      int64 `json:"ledger_max_bytes"`
	// UsedBytes is what the records take now, with their kept output files, as the daemon
	// counts them against ledger_max_bytes.
	UsedBytes int64 `json:"used_bytes"`
}

// RunLimits are the per-run limits the executor enforces inside the box (Limits.Limits).
// Sizes are in bytes; 0 means no limit of this kind, except OutputFiles (0: none collected).
type RunLimits struct {
	MemoryBytes      int64 `json:"memory_bytes"`
	StdoutBytes      int64 `json:"stdout_bytes"`
	StderrBytes      int64 `json:"stderr_bytes"`
	OutputBytes      int64 `json:"output_bytes"`
	FileSizeBytes    int64 `json:"file_size_bytes"`
	OpenFiles        int64 `json:"open_files"`
	OutputFiles      int   `json:"output_files"`
	OutputFileBytes  int64 `json:"output_file_bytes"`
	OutputFilesBytes int64 `json:"output_files_bytes"`
	Processes        int64 `json:"processes"`
}

// PackageIndex is the daemon's pip settings (its config keys index_url, extra_index_urls,
// trusted_hosts and binary_only).
type PackageIndex struct {
	// IndexURL is the index pip uses; "" is pip's default, PyPI.
	IndexURL string `json:"index_url"`
	// ExtraIndexURLs are searched too.
	ExtraIndexURLs []string `json:"extra_index_urls"`
	// TrustedHosts may be reached over plain HTTP.
	TrustedHosts []string `json:"trusted_hosts"`
	// BinaryOnly means wheels only, no source builds.
	BinaryOnly bool `json:"binary_only"`
}

// Quotas bound what each agent may store under /v1/agents/{agent}/results. The names are the
// configuration keys.
type Quotas struct {
	// ResultsMaxBytes is the most bytes one agent's results may hold.
	ResultsMaxBytes int64 `json:"results_max_bytes"`
	// ResultsMaxVersions is the most versions one key of one agent may have.
	ResultsMaxVersions int `json:"results_max_versions"`
	// JobsPerAgent is the most jobs one agent may have; JobsMax the most in all.
	JobsPerAgent int `json:"jobs_per_agent"`
	JobsMax      int `json:"jobs_max"`
	// JobFilesMaxBytes is the most bytes all jobs' input files may hold together.
	JobFilesMaxBytes int64 `json:"job_files_max_bytes"`
}

// Capacity is how many more sandboxes fit now, beside those that run: with the Kubernetes
// runtime, under the namespace's ResourceQuotas and on the schedulable nodes (docs/kubernetes.md),
// read at most every 10 s.
type Capacity struct {
	// Fit is how many more sandbox pods fit; absent when neither the quotas nor the nodes
	// could be read.
	Fit *int `json:"fit,omitempty"`
	// Bound names what bounds Fit, with its numbers; absent when nothing does.
	Bound string `json:"bound,omitempty"`
	// NodesUnknown says why the nodes were not counted (absent when they were).
	NodesUnknown string `json:"nodes_unknown,omitempty"`
	// Error says why the capacity could not be read (absent when it was).
	Error string `json:"error,omitempty"`
}
