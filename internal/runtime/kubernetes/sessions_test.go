package kubernetes_test

import (
	"context"
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandpit-dev/sandpit/internal/runtime/kubernetes"
	"github.com/sandpit-dev/sandpit/internal/session/sessiontest"
	"github.com/sandpit-dev/sandpit/internal/testenv"
)

// TestSessionSuiteKubernetes runs the session conformance suite (internal/session/sessiontest)
// on session pods of the test cluster: a pod cannot be paused, so the suite checks that a
// pause hibernates the session and says so.
func TestSessionSuiteKubernetes(t *testing.T) {
	t.Parallel()
	sessionSuite(t, newEnv(t), "sess", false, nil)
}

// TestSessionSuiteKubernetesGVisor is TestSessionSuiteKubernetes with the pods under the test
// cluster's gVisor RuntimeClass.
func TestSessionSuiteKubernetesGVisor(t *testing.T) {
	t.Parallel()
	class := gvisorClass(t)
	sessionSuite(t, newEnv(t), "sess-gv", true, func(c *kubernetes.Config) { c.RuntimeClassName, c.GVisor = class, true })
}

// sessionSuite runs the suite on a runtime of daemon with one slot and one warm session pod
// (the suite's first session is claimed from the pool).
func sessionSuite(t *testing.T, e *env, daemon string, slow bool, mutate func(*kubernetes.Config)) {
	rt := e.start(t, e.config(daemon), func(c *kubernetes.Config) {
		c.Slots, c.WarmSessions = 1, 1
		if mutate != nil {
			mutate(c)
		}
	})
	sessiontest.Run(t, sessiontest.Harness{
		Runtime: rt,
		Slow:    slow,
		Sparse:  !slow,
		Sandboxes: func(ctx context.Context) (int, error) {
			names, err := rt.SessionPods(ctx)
			return len(names), err
		},
		Kill: func(ctx context.Context, id string) error {
			list, err := e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: kubernetes.LabelRole + "=" + kubernetes.RoleSession})
			if err != nil {
				return err
			}
			for _, p := range list.Items {
				if p.Annotations[kubernetes.AnnotationSession] == id {
					zero := int64(0)
					return e.client.CoreV1().Pods(e.ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
				}
			}
			return fmt.Errorf("no pod holds session %s", id)
		},
	}, testenv.Logger())
}
