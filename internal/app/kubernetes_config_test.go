package app_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/sandpit-dev/sandpit/internal/app"
	"github.com/sandpit-dev/sandpit/internal/config"
)

// TestKubernetesConfig checks how the configuration becomes the runtime's: limits, placement
// from the settings and the pod template file, and the file's strict decoding.
func TestKubernetesConfig(t *testing.T) {
	cfg := config.Default()
	cfg.Runtime = config.RuntimeKubernetes
	cfg.MemoryBytes, cfg.CPUs, cfg.Slots = 256<<20, 0.5, 3
	k := &cfg.Kubernetes
	k.Namespace, k.Image, k.ImagePullPolicy, k.RuntimeClassName = "agents", "reg.example.com/s:1", "Always", "gvisor"
	k.NodeSelector = map[string]string{"pool": "sandbox"}
	k.Tolerations = []config.Toleration{{Key: "sandbox", Operator: "Exists", Effect: "NoSchedule"}}
	tmpl := filepath.Join(t.TempDir(), "pod.yaml")
	if err := os.WriteFile(tmpl, []byte(`
metadata: {labels: {team: a}, annotations: {note: b}}
spec:
  priorityClassName: sandboxes
  nodeSelector: {zone: z1}
  tolerations: [{key: gpu, operator: Exists}]
  affinity: {nodeAffinity: {requiredDuringSchedulingIgnoredDuringExecution: {nodeSelectorTerms: [{matchExpressions: [{key: zone, operator: In, values: [z1]}]}]}}}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	k.PodTemplateFile = tmpl
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rc, err := app.KubernetesConfig(cfg, "d1")
	if err != nil {
		t.Fatal(err)
	}
	if rc.Namespace != "agents" || rc.Image != "reg.example.com/s:1" || rc.ImagePullPolicy != corev1.PullAlways || !rc.GVisor ||
		rc.Slots != 3 || rc.DaemonID != "d1" || rc.Box.MemoryBytes != 256<<20 || rc.Box.NanoCPUs != 5e8 {
		t.Errorf("runtime config = %+v", rc)
	}
	if rc.NodeSelector["pool"] != "sandbox" || rc.NodeSelector["zone"] != "z1" || len(rc.Tolerations) != 2 || rc.Tolerations[1].Key != "gpu" ||
		rc.PriorityClassName != "sandboxes" || rc.PodLabels["team"] != "a" || rc.PodAnnotations["note"] != "b" ||
		rc.Affinity == nil || rc.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms[0].MatchExpressions[0].Values[0] != "z1" {
		t.Errorf("placement = %+v", rc)
	}
	if err := os.WriteFile(tmpl, []byte(`spec: {affinity: {nodeAffinity: {requiredDuringScheduling: {}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := app.KubernetesConfig(cfg, "d1"); err == nil || !strings.Contains(err.Error(), "spec.affinity") {
		t.Errorf("a misspelt affinity field = %v, want an error naming spec.affinity", err)
	}
}
