package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestKubernetesFromFileAndEnvironment(t *testing.T) {
	p := writeFile(t, `{"runtime": "kubernetes", "kubernetes": {"namespace": "agents", "image": "reg.example.com/sandpit-sandbox:abc",
		"runtime_class_name": "gvisor", "node_selector": {"pool": "sandbox"},
		"tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}]}}`)
	c, err := LoadLookup(p, envMap(baseEnv(t, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	k := c.Kubernetes
	want := Kubernetes{Namespace: "agents", Image: "reg.example.com/sandpit-sandbox:abc", ImagePullPolicy: "IfNotPresent",
		RuntimeClassName: "gvisor", NodeSelector: map[string]string{"pool": "sandbox"},
		Tolerations: []Toleration{{Key: "sandbox", Operator: "Exists", Effect: "NoSchedule"}}, WarmSessions: 1}
	if !reflect.DeepEqual(k, want) {
		t.Errorf("kubernetes = %+v, want %+v (keys left out keep their defaults)", k, want)
	}

	c, err = LoadLookup(p, envMap(baseEnv(t, map[string]string{"SANDPIT_KUBERNETES": `{"warm_sessions": 3, "image_pull_policy": "Never"}`})))
	if err != nil {
		t.Fatal(err)
	}
	if c.Kubernetes.WarmSessions != 3 || c.Kubernetes.ImagePullPolicy != "Never" || c.Kubernetes.Namespace != "agents" {
		t.Errorf("after SANDPIT_KUBERNETES: %+v, want warm_sessions 3 and Never over the file's namespace", c.Kubernetes)
	}
	got, _ := c.Get("kubernetes")
	var back Config
	back.Kubernetes = DefaultKubernetes()
	if err := back.Set("kubernetes", got); err != nil || !reflect.DeepEqual(back.Kubernetes, c.Kubernetes) {
		t.Errorf("Set(Get()) = %+v, %v; want %+v", back.Kubernetes, err, c.Kubernetes)
	}

	_, err = LoadLookup(writeFile(t, `{"kubernetes": {"namespase": "x"}}`), envMap(baseEnv(t, nil)))
	wantErrContains(t, err, `unknown key "namespase" in the kubernetes object`, `did you mean "namespace"`)
	_, err = LoadLookup(writeFile(t, `{"kubernetes": "x"}`), envMap(baseEnv(t, nil)))
	wantErrContains(t, err, "kubernetes", "expected a JSON object")
}

// A trial's misspelt key inside the kubernetes object discarded the whole object: the error
// said json's unknown field, and then "kubernetes.image is empty" of an image the file gave.
func TestKubernetesUnknownKey(t *testing.T) {
	file := writeFile(t, `{
  "runtime": "kubernetes",
  "kubernetes": {
    "image": "reg.example.com/sandpit-sandbox:abc",
    "runtime_clas_name": "gvisor",
    "tolerations": [{"key": "a"}, {"key": "b", "efect": "NoSchedule"}]
  }
}`)
	_, err := LoadLookup(file, envMap(baseEnv(t, nil)))
	wantErrContains(t, err, "config file "+file+", line 5, column 5: "+`unknown key "runtime_clas_name" in the kubernetes object (did you mean "runtime_class_name"?)`,
		"line 6, column 48: "+`unknown key "efect" in kubernetes.tolerations entry 2 (did you mean "effect"?)`)
	if strings.Contains(err.Error(), "image") {
		t.Errorf("error %q speaks of the image, which the file gives", err)
	}

	env := baseEnv(t, map[string]string{"SANDPIT_KUBERNETES": `{"image": "x", "nmespace": "agents", "warm_sessions": "3"}`})
	_, err = LoadLookup("", envMap(env))
	wantErrContains(t, err, `environment variable SANDPIT_KUBERNETES=`, `unknown key "nmespace" in the kubernetes object (did you mean "namespace"?)`,
		"kubernetes.warm_sessions: expected a JSON number, got string")

	var c Config
	c.Kubernetes = DefaultKubernetes()
	wantErrContains(t, c.Set("kubernetes", `{"frobnicate": 1}`), `unknown key "frobnicate" in the kubernetes object; its keys are kubeconfig, namespace`)
}

func TestKubernetesValidate(t *testing.T) {
	c := defaults(envMap(map[string]string{"HOME": "/home/t"}))
	c.Runtime = RuntimeKubernetes
	c.Kubernetes.Kubeconfig = "relative/kubeconfig"
	c.Kubernetes.Namespace = "Bad_NS"
	c.Kubernetes.ImagePullPolicy = "Sometimes"
	c.Kubernetes.RuntimeClassName = "g visor"
	c.Kubernetes.NodeSelector = map[string]string{"bad key!": "x"}
	c.Kubernetes.Tolerations = []Toleration{{Operator: "Equal"}, {Key: "a", Effect: "Never"}}
	c.Kubernetes.WarmSessions = 65
	err := c.Validate()
	wantErrContains(t, err, "kubernetes.kubeconfig", "kubernetes.namespace", `"Bad_NS"`, "kubernetes.image is empty",
		"sandpit image build --push", "kubernetes.image_pull_policy", "kubernetes.runtime_class_name", "kubernetes.node_selector",
		"entry 1 has no key", `entry 2 has effect "Never"`, "kubernetes.warm_sessions", "SANDPIT_KUBERNETES")

	// Templates reach the nodes one way, and a registry is a repository.
	c = defaults(envMap(map[string]string{"HOME": "/home/t"}))
	c.Kubernetes.TemplateRegistry, c.Kubernetes.TemplateImportCommand = "registry.example.com/t", []string{"import"}
	wantErrContains(t, c.Validate(), "kubernetes.template_registry and kubernetes.template_import_command are both set")
	c.Kubernetes.TemplateRegistry, c.Kubernetes.TemplateImportCommand = "registry.example.com/t:v1", nil
	wantErrContains(t, c.Validate(), `kubernetes.template_registry is "registry.example.com/t:v1", which is not a repository`)
	c.Kubernetes.TemplateRegistry, c.Kubernetes.TemplateImportCommand = "", []string{" "}
	wantErrContains(t, c.Validate(), "kubernetes.template_import_command starts with an empty program")
	// A template's warm pool on Kubernetes needs its images brought to the nodes.
	c.Runtime, c.Kubernetes.Image, c.TemplatePools = RuntimeKubernetes, "sandpit-sandbox:t", map[string]int{"alice/tools": 1}
	c.Kubernetes.TemplateImportCommand = nil
	wantErrContains(t, c.Validate(), "template_pools is set, but runtime \"kubernetes\" has templates only where")
	c.Kubernetes.TemplateImportCommand = []string{"scripts/kube-cluster.sh", "import-image"}
	if err := c.Validate(); err != nil || !c.Kubernetes.Templates() {
		t.Errorf("an import command: %v, templates %v", err, c.Kubernetes.Templates())
	}

	c = defaults(envMap(map[string]string{"HOME": "/home/t"}))
	c.Runtime = "kube"
	wantErrContains(t, c.Validate(), `runtime is "kube"`, `"kubernetes"`)
}

func TestPodTemplateFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", `
apiVersion: v1
kind: Pod
metadata:
  labels: {team: agents}
  annotations: {note: "x"}
spec:
  priorityClassName: sandboxes
  nodeSelector: {pool: sandbox}
  tolerations: [{key: sandbox, operator: Exists}]
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [a]}]}]
`)
	o, err := LoadPodOverrides(good)
	if err != nil {
		t.Fatal(err)
	}
	if o.Labels["team"] != "agents" || o.PriorityClassName != "sandboxes" || o.NodeSelector["pool"] != "sandbox" || len(o.Affinity) == 0 || len(o.Tolerations) == 0 {
		t.Errorf("overrides = %+v", o)
	}

	bad := write("bad.yaml", `
metadata: {name: x, labels: {sandpit.dev/owner: me}}
spec:
  hostNetwork: true
  securityContext: {runAsUser: 0}
  containers: [{name: c, image: x, securityContext: {privileged: true}}]
`)
	_, err = LoadPodOverrides(bad)
	wantErrContains(t, err, "spec.hostNetwork", "spec.securityContext", "spec.containers", "cannot be loosened", "metadata.name",
		"sandpit.dev/owner")

	c := defaults(envMap(map[string]string{"HOME": "/home/t"}))
	c.Kubernetes.PodTemplateFile = bad
	wantErrContains(t, c.Validate(), "kubernetes.pod_template_file", "spec.securityContext", "cannot be loosened")
}
