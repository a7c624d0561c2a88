package executor

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func feed(limit int64, chunks ...string) (string, bool, int) {
	var out strings.Builder
	limits := 0
	c := &capture{limit: limit, emit: func(s string) { out.WriteString(s) }, onLimit: func() { limits++ }}
	for _, ch := range chunks {
		c.write([]byte(ch))
	}
	c.close()
	return out.String(), c.truncated, limits
}

func TestCapture(t *testing.T) {
	cases := []struct {
		name      string
		limit     int64
		chunks    []string
		want      string
		truncated bool
	}{
		{"plain", 0, []string{"ab", "c\n"}, "abc\n", false},
		{"character split across reads", 0, []string{"\xe6", "\xb5\x8b", "\xe8\xaf\x95"}, "测试", false},
		{"emoji split in four", 0, []string{"\xf0", "\x9f", "\x98", "\x80"}, "😀", false},
		{"invalid bytes replaced", 0, []string{"a\xffb"}, "a\uFFFDb", false},
		{"incomplete at the end replaced", 0, []string{"a\xe6\xb5"}, "a\uFFFD", false},
		{"cap exact", 3, []string{"abc"}, "abc", false},
		{"cap passed", 3, []string{"ab", "cd", "ef"}, "abc", true},
		{"cap cuts before a split character", 2, []string{"a", "é"}, "a", true},
		{"cap inside a character", 4, []string{"éé", "é"}, "éé", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, truncated, limits := feed(c.limit, c.chunks...)
			if got != c.want || truncated != c.truncated {
				t.Fatalf("got %q truncated=%v, want %q truncated=%v", got, truncated, c.want, c.truncated)
			}
			if truncated && limits != 1 {
				t.Fatalf("onLimit called %d times, want once", limits)
			}
		})
	}
}

// FuzzCapture: whatever the bytes and however they are split, the output is valid UTF-8,
// within the cap, and equal to (a prefix of) the input made valid.
func FuzzCapture(f *testing.F) {
	f.Add([]byte("测试 😀\n"), uint8(3), uint16(5))
	f.Add([]byte("a\xffb\xe6\xb5"), uint8(1), uint16(0))
	f.Add([]byte("ééééé"), uint8(2), uint16(3))
	f.Fuzz(func(t *testing.T, data []byte, split uint8, limit uint16) {
		step := int(split)%7 + 1
		var chunks []string
		for i := 0; i < len(data); i += step {
			chunks = append(chunks, string(data[i:min(i+step, len(data))]))
		}
		got, _, _ := feed(int64(limit), chunks...)
		if !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8 out: %q", got)
		}
		if limit > 0 && len(got) > int(limit) {
			t.Fatalf("%d bytes out, cap %d", len(got), limit)
		}
		if utf8.Valid(data) && !strings.HasPrefix(string(data), got) {
			t.Fatalf("output %q is not a prefix of the valid input %q", got, data)
		}
	})
}
