package executor

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// TestDrainEndsOnSilenceNotOnTime: after the program's end, a control line that keeps bringing
// data is read to its end even when that takes longer than drainIdle in all (a loaded machine
// once cut a 2 MiB OUTPUT short after one second, and the run ended "not JSON" instead of
// output_limit), and a line that goes silent ends after about drainIdle.
func TestDrainEndsOnSilenceNotOnTime(t *testing.T) {
	ours, theirs := net.Pipe()
	defer theirs.Close()
	c := &drainConn{Conn: ours}
	c.drain()
	const chunks = 6
	go func() {
		for range chunks {
			time.Sleep(drainIdle / 3)
			if _, err := theirs.Write([]byte("0123456789")); err != nil {
				return
			}
		}
		// Then silence, the line still open.
	}()
	start := time.Now()
	got, err := io.ReadAll(c)
	elapsed := time.Since(start)
	if len(got) != chunks*10 {
		t.Fatalf("read %d bytes, want %d: the drain ended while data still came (%v after %v)", len(got), chunks*10, err, elapsed)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the silent line ended with %v, want its deadline", err)
	}
}
