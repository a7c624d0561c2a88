package suggest

import "testing"

func TestNearest(t *testing.T) {
	fields := []string{"code", "input", "timeout_ms", "agent"}
	cases := map[string]string{
		"tiemout_ms": "timeout_ms", // transposition
		"Code":       "code",
		"inptu":      "input",
		"timeout":    "timeout_ms", // prefix
		"zzz":        "",
	}
	for name, want := range cases {
		if got := Nearest(name, fields, 2); got != want {
			t.Errorf("Nearest(%q) = %q, want %q", name, got, want)
		}
	}
	if d := Distance("ab", "ba"); d != 1 {
		t.Errorf("Distance(ab, ba) = %d, want 1", d)
	}
}

func TestDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"code", "code", 0}, {"tiemout_ms", "timeout_ms", 1}, {"timeout", "timeout_ms", 3},
		{"cdoe", "code", 1}, {"agnet", "agent", 1}, {"abc", "", 3}, {"inptu", "input", 1},
	}
	for _, tt := range tests {
		if got := Distance(tt.a, tt.b); got != tt.want {
			t.Errorf("Distance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
