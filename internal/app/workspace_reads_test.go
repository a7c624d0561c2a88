package app_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// TestWorkspaceRESTLargeReads: six parallel reads of a 32 MiB file of a real session all
// answer the whole file, and the session survives them (its box serves them one at a time:
// parallel ones used to exhaust its memory and end it sandbox_error).
func TestWorkspaceRESTLargeReads(t *testing.T) {
	_, s, base := waltSession(t)
	const size = 32 << 20
	if status, body := httpCall(t, "POST", base+"/commands", fmt.Sprintf(`{"cmd": "head -c %d /dev/urandom > big32"}`, size)); status != 200 {
		t.Fatalf("make the file: %d %s", status, body)
	}
	const reads = 6
	var wg sync.WaitGroup
	errs := make(chan error, reads)
	for range reads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(base + "/files?path=big32")
			if err != nil {
				errs <- err
				return
			}
			defer resp.Body.Close()
			n, err := io.Copy(io.Discard, resp.Body)
			if err == nil && (resp.StatusCode != 200 || n != size) {
				err = fmt.Errorf("HTTP %d, %d bytes", resp.StatusCode, n)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a read: %v", err)
		}
	}
	status, body := httpCall(t, "POST", base+"/commands", `{"cmd": "echo alive"}`)
	var res apitype.CommandResult
	if status != 200 || json.Unmarshal(body, &res) != nil || res.Stdout != "alive\n" {
		t.Fatalf("the session after the reads: %d %s", status, body)
	}
	status, body = httpCall(t, "GET", base, "")
	if status != 200 || json.Unmarshal(body, &s) != nil || s.State != "active" {
		t.Fatalf("the session after the reads: %d %s", status, body)
	}
}
