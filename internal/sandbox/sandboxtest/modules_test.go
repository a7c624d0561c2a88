package sandboxtest

import "testing"

// TestKnownModulesAsksOnceForAFoundModule: a module found is not asked for again; one found
// missing is, each time.
func TestKnownModulesAsksOnceForAFoundModule(t *testing.T) {
	asked := map[string]int{}
	has := knownModules(func(name string) bool {
		asked[name]++
		return name == "IPython"
	})
	for range 3 {
		if !has("IPython") || has("nope") {
			t.Fatal("the answers changed")
		}
	}
	if asked["IPython"] != 1 || asked["nope"] != 3 {
		t.Errorf("asked %v, want IPython once and nope three times", asked)
	}
}
