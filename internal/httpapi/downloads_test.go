package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/httpapi/httpapitest"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
	"github.com/sandpit-dev/sandpit/internal/testenv/pgtest"
)

// H51: 80 clients download an 8 MiB output file kept in PostgreSQL and stop reading after the
// headers. Before, each download read the whole bytea into the daemon's heap and held it while
// its client stalled: 80 of them held 640 MiB and more (1 GB in the attack). Now a download
// holds one part of 256 KiB at a time: the heap's peak stays under 1 MiB a download. Measured:
// the Go heap's peak (heapGrowth), never a time.
func TestStalledDownloadsAreBounded(t *testing.T) {
	const clients, size = 80, 8 << 20
	ctx := t.Context()
	st, err := store.OpenPostgres(ctx, pgtest.URL(t), 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	files, err := st.OpenFiles(ctx, "", 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Now().UTC()
	head := sandbox.Result{ID: sandbox.NewID(), Agent: "a", TimeoutMS: 1000, StartedAt: at, Origin: sandbox.Origin{Source: "api"}}
	if err := st.Begin(ctx, sandbox.Spec{ID: head.ID, Code: "x", Input: json.RawMessage("null"), TimeoutMS: 1000}, head); err != nil {
		t.Fatal(err)
	}
	file := sandbox.File{Name: "out.bin", SizeBytes: size, MediaType: "application/octet-stream"}
	if err := files.Put(ctx, head.ID, file, []byte(strings.Repeat("x", size))); err != nil {
		t.Fatal(err)
	}
	res := head
	res.Outcome, res.Files = sandbox.OutcomeOK, []sandbox.File{file}
	if err := st.Finish(ctx, res); err != nil {
		t.Fatal(err)
	}
	fake := &httpapitest.Executor{Cfg: engine.DefaultConfig()}
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Backend{Executor: fake, Ledger: st, Files: files}, nil))
	defer srv.Close()

	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	_, growth := heapGrowth(t, func() {
		for range clients {
			c, err := net.Dial("tcp", srv.Listener.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			conns = append(conns, c)
			fmt.Fprintf(c, "GET /v1/executions/%s/files/out.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", head.ID)
		}
		// Each answer has begun (its headers are read): its handler has opened the file.
		for _, c := range conns {
			resp, err := http.ReadResponse(bufio.NewReaderSize(c, 4096), nil)
			if err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("a download: %v, %v", resp, err)
			}
		}
	})
	t.Logf("heap peak %.1f MiB above idle for %d stalled downloads of %d MiB", float64(growth)/(1<<20), clients, size>>20)
	if most := int64(clients) << 20; growth > most {
		t.Errorf("the heap rose %d MiB under %d stalled downloads; want under 1 MiB each (%d MiB)", growth>>20, clients, most>>20)
	}
}
