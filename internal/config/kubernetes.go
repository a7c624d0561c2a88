package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/distribution/reference"
	"sigs.k8s.io/yaml"
)

// RuntimeKubernetes is the runtime value that puts sandboxes in pods of a Kubernetes cluster
// (configured by the kubernetes object) instead of containers of the Docker engine.
const RuntimeKubernetes = "kubernetes"

// Kubernetes configures the Kubernetes runtime (runtime "kubernetes"): where the cluster is,
// the namespace the daemon's pods live in, the sandbox image the nodes run, and how pods are
// placed. In the config file it is one JSON object under the key "kubernetes"; in the
// environment (SANDPIT_KUBERNETES) and Set it is that object's JSON text. Unknown keys are
// errors. See docs/kubernetes.md.
type Kubernetes struct {
	// Kubeconfig is the path of the kubeconfig file the daemon uses (its current context).
	// Default empty: the in-cluster service account (the daemon runs in a pod).
	Kubeconfig string `json:"kubeconfig"`
	// Namespace is the namespace of the daemon's pods and NetworkPolicy; it must exist.
	// Default "sandpit".
	Namespace string `json:"namespace"`
	// Image is the sandbox image the pods run, as the nodes name it (a registry reference such
	// as registry.example.com/sandpit-sandbox:3f9c…, or an image imported into the nodes'
	// containerd). Required with runtime "kubernetes": `sandpit image build --push REF` builds
	// and pushes it.
	Image string `json:"image"`
	// ImagePullPolicy is the pods' imagePullPolicy: "IfNotPresent", "Always" or "Never" (the
	// image must already be on the node, as after an import). Default "IfNotPresent".
	ImagePullPolicy string `json:"image_pull_policy"`
	// RuntimeClassName is the pods' RuntimeClass, such as "gvisor". Default empty: the
	// cluster's default runtime.
	RuntimeClassName string `json:"runtime_class_name"`
	// NodeSelector restricts the pods to nodes with these labels. Default none.
	NodeSelector map[string]string `json:"node_selector"`
	// Tolerations let the pods run on nodes with matching taints. Default none.
	Tolerations []Toleration `json:"tolerations"`
	// PodTemplateFile is a YAML or JSON file of a partial pod (metadata and spec) whose
	// metadata.labels, metadata.annotations, spec.nodeSelector, spec.affinity, spec.tolerations
	// and spec.priorityClassName are added to every sandbox pod. Nothing else may be set there:
	// the pods' security settings are sandpit's and cannot be loosened. Default empty.
	PodTemplateFile string `json:"pod_template_file"`
	// WarmSessions is how many session pods are kept started and unclaimed, so that a session
	// is created without waiting for a pod. Default 1; 0 to 64.
	WarmSessions int `json:"warm_sessions"`
	// Requests is what each pod reserves on its node (its resource requests); its limits stay
	// memory_bytes and cpus. Requests below the limits let a node hold more sandboxes than it
	// could run at full use at once (pods of QoS class Burstable).
	Requests Requests `json:"requests"`
	// TemplateRegistry is the repository a built template's sandbox image is pushed to, for
	// nodes that pull from a registry (registry.example.com/team/sandpit-template): each image
	// goes there tagged with its own tag (a hash of its content), with the Docker client's
	// `docker login` credentials. Templates on runtime "kubernetes" are built by the Docker
	// engine the daemon reaches (docker_host) and need this or TemplateImportCommand; with
	// neither the daemon has no templates. Default empty.
	TemplateRegistry string `json:"template_registry"`
	// TemplateImportCommand is a command (argv, no shell) that makes a built template's
	// sandbox image known to every node, run with the image's tag as its last argument, such
	// as ["scripts/kube-cluster.sh", "import-image"] for the test cluster (docker save into
	// the nodes' containerd); pods then run it as tagged, with image_pull_policy. It must exit
	// 0 within the build's time. Default empty.
	TemplateImportCommand []string `json:"template_import_command"`
}

// Templates says whether templates reach the nodes (TemplateRegistry or
// TemplateImportCommand is set).
func (k Kubernetes) Templates() bool {
	return k.TemplateRegistry != "" || len(k.TemplateImportCommand) > 0
}

// Requests is a pod's resource requests: what the scheduler reserves for it on a node. Zero
// values take the defaults (PodRequests).
type Requests struct {
	// CPUs is the CPU request in CPUs (0.1: a tenth); default 0.1, at most cpus.
	CPUs float64 `json:"cpus"`
	// MemoryBytes is the memory request in bytes; default 256 MiB, at most memory_bytes.
	MemoryBytes int64 `json:"memory_bytes"`
}

// PodRequests returns what each sandbox pod requests: kubernetes.requests, where a zero field is
// its default (a tenth of a CPU, 256 MiB) held within the limits (cpus, memory_bytes).
func (c Config) PodRequests() (cpus float64, memoryBytes int64) {
	r := c.Kubernetes.Requests
	if cpus = r.CPUs; cpus == 0 {
		cpus = min(0.1, c.CPUs)
	}
	if memoryBytes = r.MemoryBytes; memoryBytes == 0 {
		memoryBytes = min(256<<20, c.MemoryBytes)
	}
	return cpus, memoryBytes
}

// Toleration is one of the pods' tolerations, as in a pod's spec.tolerations.
type Toleration struct {
	// Key is the taint's key; empty with operator "Exists" tolerates every taint.
	Key string `json:"key,omitempty"`
	// Operator is "Equal" (the default when empty) or "Exists".
	Operator string `json:"operator,omitempty"`
	// Value is the taint's value with operator "Equal".
	Value string `json:"value,omitempty"`
	// Effect is the taint effect matched: "NoSchedule", "PreferNoSchedule", "NoExecute", or
	// empty for all.
	Effect string `json:"effect,omitempty"`
	// TolerationSeconds, with effect "NoExecute", is how long the pod stays after the taint
	// appears; nil: forever.
	TolerationSeconds *int64 `json:"toleration_seconds,omitempty"`
}

// DefaultKubernetes returns the kubernetes object's defaults.
func DefaultKubernetes() Kubernetes {
	return Kubernetes{Namespace: "sandpit", ImagePullPolicy: "IfNotPresent", NodeSelector: map[string]string{},
		Tolerations: []Toleration{}, WarmSessions: 1}
}

// PodOverrides is what a pod template file may set: the only parts of a sandbox pod that
// configuration adds to. Affinity is kept as the file's JSON, to be decoded into the
// Kubernetes API's type by the runtime.
type PodOverrides struct {
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	NodeSelector      map[string]string `json:"nodeSelector,omitempty"`
	Affinity          json.RawMessage   `json:"affinity,omitempty"`
	Tolerations       json.RawMessage   `json:"tolerations,omitempty"`
	PriorityClassName string            `json:"priorityClassName,omitempty"`
}

// The keys a pod template file may hold, by level.
var (
	templateTop      = []string{"apiVersion", "kind", "metadata", "spec"}
	templateMetadata = []string{"labels", "annotations"}
	templateSpec     = []string{"nodeSelector", "affinity", "tolerations", "priorityClassName"}
)

// LoadPodOverrides reads a pod template file (YAML or JSON, a Pod or a partial one: metadata
// and spec at the top) and returns what it sets. Any key but metadata.labels,
// metadata.annotations, spec.nodeSelector, spec.affinity, spec.tolerations and
// spec.priorityClassName is an error naming it; security fields (securityContext,
// hostNetwork, containers, volumes, serviceAccountName, ...) say that sandpit's pod security
// cannot be loosened.
func LoadPodOverrides(path string) (PodOverrides, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return PodOverrides{}, fmt.Errorf("reading the pod template file: %w", err)
	}
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return PodOverrides{}, fmt.Errorf("pod template file %s is not YAML or JSON: %w", path, err)
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(js, &top); err != nil || top == nil {
		return PodOverrides{}, fmt.Errorf("pod template file %s must hold one object with metadata and spec, such as a Pod", path)
	}
	var errs []error
	section := func(name string, allowed []string) map[string]json.RawMessage {
		raw, ok := top[name]
		if !ok {
			return nil
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s must be an object", path, name))
			return nil
		}
		for _, k := range sortedKeys(m) {
			if !slices.Contains(allowed, k) {
				errs = append(errs, fmt.Errorf("pod template file %s sets %s.%s, %s", path, name, k, refusal(k, allowed)))
			}
		}
		return m
	}
	for _, k := range sortedKeys(top) {
		if !slices.Contains(templateTop, k) {
			errs = append(errs, fmt.Errorf("pod template file %s sets %s, %s", path, k, refusal(k, templateTop)))
		}
	}
	meta := section("metadata", templateMetadata)
	spec := section("spec", templateSpec)
	var out PodOverrides
	decode := func(m map[string]json.RawMessage, key string, into any) {
		if raw, ok := m[key]; ok {
			dec := json.NewDecoder(bytes.NewReader(raw))
			if err := dec.Decode(into); err != nil {
				errs = append(errs, fmt.Errorf("pod template file %s: %s: %w", path, key, err))
			}
		}
	}
	decode(meta, "labels", &out.Labels)
	decode(meta, "annotations", &out.Annotations)
	decode(spec, "nodeSelector", &out.NodeSelector)
	decode(spec, "priorityClassName", &out.PriorityClassName)
	if raw, ok := spec["affinity"]; ok {
		out.Affinity = raw
	}
	if raw, ok := spec["tolerations"]; ok {
		var list []map[string]any
		if err := json.Unmarshal(raw, &list); err != nil {
			errs = append(errs, fmt.Errorf("pod template file %s: spec.tolerations must be a list of objects", path))
		}
		out.Tolerations = raw
	}
	for k := range out.Labels {
		if strings.HasPrefix(k, "sandpit.dev/") {
			errs = append(errs, fmt.Errorf("pod template file %s sets the label %s: labels under sandpit.dev/ are the daemon's own (they select its pods)", path, k))
		}
	}
	return out, errors.Join(errs...)
}

// refusal says why key may not be set in a pod template file.
func refusal(key string, allowed []string) string {
	switch key {
	case "securityContext", "containers", "initContainers", "ephemeralContainers", "volumes", "hostNetwork", "hostPID",
		"hostIPC", "hostUsers", "serviceAccountName", "serviceAccount", "automountServiceAccountToken", "runtimeClassName",
		"enableServiceLinks", "shareProcessNamespace", "dnsPolicy", "dnsConfig", "hostAliases", "os", "resources", "overhead":
		return "which sandpit sets itself: the sandbox pods' security (and their containers, volumes, network, " +
			"service account and runtime) cannot be loosened or changed by a template; remove it " +
			"(choose the RuntimeClass with runtime_class_name)"
	}
	return fmt.Sprintf("which a template may not set; it may set only %s there", strings.Join(allowed, ", "))
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var (
	// dns1123Label is a namespace's or RuntimeClass's name.
	dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	// dns1123Subdomain is a priority class's or RuntimeClass's name.
	dns1123Subdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`)
	// labelName is a label's name part (after an optional DNS prefix and '/').
	labelName = regexp.MustCompile(`^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$`)
)

// checkKubernetes checks the kubernetes object: with runtime "kubernetes" it must name an
// image, a valid namespace, and only valid placement; every problem names its key as
// kubernetes.<field>.
func (c Config) checkKubernetes(report *problems) {
	k := c.Kubernetes
	bad := func(field, format string, args ...any) {
		report.errs = append(report.errs, fmt.Errorf("kubernetes.%s %s (set it in the \"kubernetes\" object of the config file or %s)",
			field, fmt.Sprintf(format, args...), EnvName("kubernetes")))
	}
	if k.Kubeconfig != "" && !filepath.IsAbs(k.Kubeconfig) {
		bad("kubeconfig", "is %q, which is not an absolute path; give the kubeconfig file's full path, or leave it empty for the in-cluster service account", k.Kubeconfig)
	}
	if len(k.Namespace) > 63 || !dns1123Label.MatchString(k.Namespace) {
		bad("namespace", "is %q; give a namespace name (lower-case letters, digits and '-', at most 63), such as sandpit", k.Namespace)
	}
	if strings.IndexFunc(k.Image, func(r rune) bool { return r <= ' ' }) >= 0 {
		bad("image", "is %q, which contains white space; give an image reference such as registry.example.com/sandpit-sandbox:TAG", k.Image)
	}
	if c.Runtime == RuntimeKubernetes && k.Image == "" {
		bad("image", "is empty, but runtime is \"kubernetes\": name the sandbox image as the nodes pull it (`sandpit image build --push REGISTRY/sandpit-sandbox` prints it), or one imported into the nodes (see docs/kubernetes.md)")
	}
	if !slices.Contains([]string{"IfNotPresent", "Always", "Never"}, k.ImagePullPolicy) {
		bad("image_pull_policy", "is %q; it must be \"IfNotPresent\", \"Always\" or \"Never\"", k.ImagePullPolicy)
	}
	if k.RuntimeClassName != "" && (len(k.RuntimeClassName) > 253 || !dns1123Subdomain.MatchString(k.RuntimeClassName)) {
		bad("runtime_class_name", "is %q, which is not a RuntimeClass name; give one such as gvisor, or leave it empty for the cluster's default", k.RuntimeClassName)
	}
	for _, key := range sortedKeys(k.NodeSelector) {
		if !validLabelKey(key) {
			bad("node_selector", "has the label key %q, which is not a Kubernetes label name (such as kubernetes.io/arch or pool)", key)
		}
	}
	for i, t := range k.Tolerations {
		switch {
		case t.Operator != "" && t.Operator != "Equal" && t.Operator != "Exists":
			bad("tolerations", "entry %d has operator %q; it must be \"Equal\" or \"Exists\"", i+1, t.Operator)
		case t.Operator == "Exists" && t.Value != "":
			bad("tolerations", "entry %d has operator \"Exists\" and a value; drop the value", i+1)
		case t.Key == "" && t.Operator != "Exists":
			bad("tolerations", "entry %d has no key; an empty key needs operator \"Exists\" (tolerating every taint)", i+1)
		}
		if t.Effect != "" && !slices.Contains([]string{"NoSchedule", "PreferNoSchedule", "NoExecute"}, t.Effect) {
			bad("tolerations", "entry %d has effect %q; it must be \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\" or empty", i+1, t.Effect)
		}
		if t.TolerationSeconds != nil && t.Effect != "NoExecute" {
			bad("tolerations", "entry %d has toleration_seconds without effect \"NoExecute\"; it applies only there", i+1)
		}
	}
	if k.PodTemplateFile != "" {
		if _, err := LoadPodOverrides(k.PodTemplateFile); err != nil {
			bad("pod_template_file", "is not usable: %v", err)
		}
	}
	if r := k.Requests.CPUs; r != 0 && (r < 0.001 || r > c.CPUs) {
		bad("requests.cpus", "is %g; allowed range is 0.001 to cpus (%g): what each pod reserves may not pass what it may use (0: the default, 0.1)", r, c.CPUs)
	}
	if r := k.Requests.MemoryBytes; r != 0 && (r < 16<<20 || r > c.MemoryBytes) {
		bad("requests.memory_bytes", "is %d; allowed range is %d (16 MiB) to memory_bytes (%d): what each pod reserves may not pass what it may use (0: the default, 256 MiB)", r, 16<<20, c.MemoryBytes)
	}
	switch {
	case k.TemplateRegistry != "" && len(k.TemplateImportCommand) > 0:
		bad("template_registry", "and kubernetes.template_import_command are both set; templates reach the nodes one way: keep one")
	case k.TemplateRegistry != "" && !validRepository(k.TemplateRegistry):
		bad("template_registry", "is %q, which is not a repository; give one without a tag, such as registry.example.com/team/sandpit-template", k.TemplateRegistry)
	case len(k.TemplateImportCommand) > 0 && strings.TrimSpace(k.TemplateImportCommand[0]) == "":
		bad("template_import_command", "starts with an empty program; give the command as a list, such as [\"scripts/kube-cluster.sh\", \"import-image\"]")
	}
	if k.WarmSessions < 0 || k.WarmSessions > 64 {
		bad("warm_sessions", "is %d; allowed range is 0 to 64 pods", k.WarmSessions)
	}
	if c.Runtime == RuntimeKubernetes && c.MemorySwapBytes != 0 && c.MemorySwapBytes != c.MemoryBytes {
		report.bad("memory_swap_bytes", "is %s, but runtime is \"kubernetes\", whose pods have no swap; leave it 0", FormatSize(c.MemorySwapBytes))
	}
}

// validRepository says whether ref names an image repository without a tag or digest.
func validRepository(ref string) bool {
	named, err := reference.ParseNormalizedNamed(ref)
	return err == nil && reference.IsNameOnly(named)
}

// validLabelKey says whether key is a label key: an optional DNS subdomain prefix and '/',
// then a name of at most 63 characters.
func validLabelKey(key string) bool {
	prefix, name, ok := strings.Cut(key, "/")
	if !ok {
		name, prefix = prefix, ""
	} else if prefix == "" || len(prefix) > 253 || !dns1123Subdomain.MatchString(prefix) {
		return false
	}
	return len(name) <= 63 && labelName.MatchString(name)
}
