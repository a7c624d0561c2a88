package executor

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"
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

// pipePending is what the bootstrap's _pipe_pending reads: the bytes waiting in a pipe.
func pipePending(t *testing.T, f *os.File) int {
	var n int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); e != 0 {
		t.Fatal(e)
	}
	return int(n)
}

// A writer that, before writing to one stream after the other, waits until the other's pipe
// has been read (as the bootstrap's sys.stdout and sys.stderr do) gets its writes passed on
// in the order it made them.
func TestPumpStreamsKeepsTheWritersOrder(t *testing.T) {
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	capture := func(stream string) *capture {
		return &capture{emit: func(s string) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, stream+" "+s)
		}}
	}
	done := make(chan struct{})
	go func() {
		pumpStreams(outR, errR, capture("out"), capture("err"), nil)
		close(done)
	}()
	var want []string
	pipes := map[string][2]*os.File{"out": {outR, outW}, "err": {errR, errW}}
	last := "out"
	for i := range 300 {
		stream := []string{"out", "err"}[i%2]
		if stream != last {
			for pipePending(t, pipes[last][1]) > 0 {
				time.Sleep(50 * time.Microsecond)
			}
			last = stream
		}
		line := fmt.Sprintf("%d\n", i)
		if _, err := pipes[stream][1].WriteString(line); err != nil {
			t.Fatal(err)
		}
		want = append(want, stream+" "+line)
	}
	outW.Close()
	errW.Close()
	<-done
	if !slices.Equal(got, want) {
		t.Fatalf("passed on %q,\nwant %q", got, want)
	}
}
