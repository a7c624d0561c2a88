package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandpit-dev/sandpit/internal/console"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// The sessions of these tests, all agent "sam"'s: one active with a few files, one
// hibernated and an ended fork of it. (The engine's own LookFiles and LookFile are tested with
// the real engine in internal/app.)
const (
	activeID = "se_activeactiveactiveactivea"
	hibID    = "se_hibernatedhibernatedhiber"
	endedID  = "se_forkforkforkforkforkforkfo"
)

// hostileFile is a file name and text that would be markup if not escaped.
const (
	hostileFileName = `<img src=x onerror="window.__pwned=1">.txt`
	hostileText     = "<script>window.__pwned=1</script>\nsecond line\n"
)

// fakeSessions holds agent "sam"'s sessions and the active one's files.
type fakeSessions struct{}

var sessionTime = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// fakeFiles are the active session's files by path ("" content: a directory).
var fakeFiles = map[string]string{
	"/home/user/notes":              "",
	"/home/user/notes/todo.md":      "# todo\n- browse files\n",
	"/home/user/" + hostileFileName: hostileText,
	"/home/user/bin.dat":            "\x00\x01\x02binary",
	"/home/user/big.log":            strings.Repeat("0123456789abcdef", 1<<16) + "é", // 1 MiB and 2 bytes
	"/home/user/esc.txt":            "a\x1b]0;title\x07b\bc\x7fd\u0085e\tf\n",
}

// manyEntries is how many files /home/user/many holds: more than a page shows.
const manyEntries = 1200

func init() {
	fakeFiles["/home/user/many"] = ""
	for i := range manyEntries {
		fakeFiles[fmt.Sprintf("/home/user/many/f%04d", i)] = "x"
	}
}

func (fakeSessions) Agents() []string { return []string{"sam"} }

func (fakeSessions) List(agent string) []sandbox.SessionInfo {
	if agent != "sam" {
		return nil
	}
	at := sessionTime
	active := sandbox.SessionInfo{ID: activeID, Agent: "sam", State: sandbox.SessionActive, Calls: 1, CreatedAt: at, MaxLifetimeMS: 3_600_000}
	active.RanMS = 192_000
	hib := sandbox.SessionInfo{ID: hibID, Agent: "sam", State: sandbox.SessionHibernated, Calls: 3, CreatedAt: at}
	hib.PausedAt, hib.RanMS = &at, 1234
	hib.Hibernation = &sandbox.Hibernation{Bytes: 40960, SHA256: "89ba03832c45", At: at}
	hib.AddEvent(at, "created", "")
	hib.AddEvent(at, "paused", "auto_pause: idle for its idle timeout")
	hib.AddEvent(at, "hibernated", "paused for session_hibernate_after_ms (600000 ms)")
	ended := sandbox.SessionInfo{ID: endedID, Agent: "sam", State: sandbox.SessionEnded, EndReason: sandbox.EndLost,
		Reason: "its hibernation file was altered on disk", CreatedAt: at}
	ended.ForkedFrom = hib.ID
	return []sandbox.SessionInfo{active, hib, ended}
}

// elsewhereID is a session another daemon sharing the ledger holds.
const elsewhereID = "se_elsewhereelsewhereelsewhe"

func (f fakeSessions) Info(_ context.Context, agent, id string) (sandbox.SessionInfo, error) {
	if id == elsewhereID {
		return sandbox.SessionInfo{}, errclass.Wrap(errclass.NotFound, &store.ElsewhereError{What: "session " + id, Daemon: "daemon-b", Address: "10.0.0.2:8765"})
	}
	for _, s := range f.List(agent) {
		if s.ID == id {
			return s, nil
		}
	}
	return sandbox.SessionInfo{}, errclass.New(errclass.NotFound, "agent "+agent+" has no session "+id)
}

func (f fakeSessions) active(agent, id string) error {
	s, err := f.Info(context.Background(), agent, id)
	if err == nil && s.State != sandbox.SessionActive {
		err = errclass.New(errclass.Conflict, "session "+id+" is "+s.State)
	}
	return err
}

func entryOf(p string) sandbox.FileEntry {
	e := sandbox.FileEntry{Path: p, Name: path.Base(p), Type: "file", SizeBytes: int64(len(fakeFiles[p])), ModifiedAt: sessionTime}
	if fakeFiles[p] == "" {
		e.Type, e.SizeBytes = "dir", 0
	}
	return e
}

// Look returns the session's files (fakeFiles) while it is active.
func (f fakeSessions) Look(_ context.Context, agent, id string) (console.Files, error) {
	if err := f.active(agent, id); err != nil {
		return nil, err
	}
	return fakeFilesOf{}, nil
}

type fakeFilesOf struct{}

func (fakeFilesOf) LookFiles(_ context.Context, p string, depth int) (sandbox.FileListing, error) {
	if p != "/home/user" && !strings.HasPrefix(p, "/home/user/") {
		return sandbox.FileListing{}, errclass.New(errclass.Invalid, "path "+p+" must lie under /home/user")
	}
	if c, ok := fakeFiles[p]; ok && c != "" {
		return sandbox.FileListing{}, errclass.New(errclass.Conflict, p+" is not a directory")
	} else if !ok && p != "/home/user" {
		return sandbox.FileListing{}, errclass.New(errclass.NotFound, p+" does not exist")
	}
	var l sandbox.FileListing
	for name := range fakeFiles {
		if path.Dir(name) == p {
			l.Entries = append(l.Entries, entryOf(name))
		}
	}
	slices.SortFunc(l.Entries, func(a, b sandbox.FileEntry) int { return strings.Compare(a.Path, b.Path) })
	return l, nil
}

func (fakeFilesOf) LookFile(_ context.Context, p string, offset, length int64) (sandbox.FileContent, error) {
	if !strings.HasPrefix(p, "/home/user/") {
		return sandbox.FileContent{}, errclass.New(errclass.Invalid, "path "+p+" must lie under /home/user")
	}
	c, ok := fakeFiles[p]
	if !ok {
		return sandbox.FileContent{}, errclass.New(errclass.NotFound, p+" does not exist")
	}
	b := []byte(c)
	if length > 0 && int64(len(b)) > length {
		b = b[:length]
	}
	return sandbox.FileContent{Entry: entryOf(p), Content: b}, nil
}

// TestSessionsPage: the sessions page shows each session's state, its hibernation and its
// history, and why an ended one ended, each linking to its own page.
func TestSessionsPage(t *testing.T) {
	h := newHarness(t, "")
	status, body, _ := get(t, client(t), h, "/ui/sessions?agent=sam", nil)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	for _, want := range []string{"se_hibernatedhibernatedhiber", ">hibernated<", "40960 bytes", "89ba03832c45", `ran <span title="1234 ms">1.2 s</span>`,
		"<b>paused</b> auto_pause: idle for its idle timeout", ">ended<", "lost", "its hibernation file was altered on disk",
		"forked from <code>se_hibernatedhibernatedhiber</code>", `href="/ui/sessions"`, `href="/ui/sessions/sam/` + activeID + `"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if _, body, _ := get(t, client(t), h, "/ui/sessions?agent=nobody", nil); !strings.Contains(body, "Agent nobody has no sessions.") {
		t.Errorf("an agent without sessions: %s", body)
	}
}

// TestSessionPage: a session's page shows its calls from the ledger (its own only), its
// recorded commands (escaped), and its files: a directory listed, a text file shown escaped, a
// large one cut at 1 MiB, a binary one not shown; a download has the file's name and the
// protective headers. An ended or hibernated session says why its files are not browsable;
// another agent's session is not found.
func TestSessionPage(t *testing.T) {
	h := newHarness(t, "")
	c := client(t)
	call := h.add(t, record{agent: "sam", session: activeID, code: "x = 1", stdout: "in the session\n"})
	other := h.add(t, record{agent: "sam", code: "y = 2"})
	h.command(t, "sam", activeID, "echo '<b>hi</b>'; exit 3", 3)
	h.command(t, "sam", activeID, "ls", 0)

	base := "/ui/sessions/sam/" + activeID
	status, body, _ := get(t, c, h, base, nil)
	if status != 200 {
		t.Fatalf("%d %s", status, body)
	}
	for _, want := range []string{call, "in the session", "echo &#39;&lt;b&gt;hi&lt;/b&gt;&#39;; exit 3", ">3</td>", "<code class=\"cmdline\">ls</code>",
		`href="/ui/sessions/sam/` + activeID + `?path=%2Fhome%2Fuser%2Fnotes#files"`, "notes/</a>",
		`href="/ui/sessions/sam/` + activeID + `/download?path=%2Fhome%2Fuser%2Fbin.dat"`, "&lt;img src=x onerror=&#34;window.__pwned=1&#34;&gt;.txt"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if strings.Contains(body, other) || strings.Contains(body, "<img src=x") || strings.Contains(body, "<b>hi</b>") {
		t.Errorf("the page shows another call or unescaped text: %s", body)
	}
	if strings.Index(body, "<code class=\"cmdline\">ls</code>") > strings.Index(body, "exit 3") {
		t.Errorf("the commands are not newest first")
	}

	for _, c2 := range []struct {
		path, says, not string
		status          int
	}{
		{"notes", "todo.md", "hello", 200},
		{"/home/user/notes/todo.md", "# todo\n- browse files\n", "Not text", 200},
		{"/home/user/" + hostileFileName, "&lt;script&gt;window.__pwned=1&lt;/script&gt;\nsecond line", "<script>window", 200},
		{"/home/user/bin.dat", "Not text (not UTF-8, or holds NUL bytes)", "file-text", 200},
		{"/home/user/big.log", "The first 1.0 MiB shown", "é", 200},
		{"/home/user/missing", "/home/user/missing does not exist", "file-text", http.StatusNotFound},
		{"/etc/passwd", "must lie under /home/user", "root:", http.StatusBadRequest},
	} {
		status, body, _ := get(t, c, h, base+"?path="+strings.ReplaceAll(c2.path, " ", "%20"), nil)
		if !strings.Contains(body, c2.says) || strings.Contains(body, c2.not) {
			t.Errorf("path %s: the page lacks %q or has %q", c2.path, c2.says, c2.not)
		}
		if status != c2.status {
			t.Errorf("path %s: HTTP %d, want %d (as REST answers)", c2.path, status, c2.status)
		}
	}

	status, body, resp := get(t, c, h, base+"/download?path=/home/user/notes/todo.md", nil)
	hdr := resp.Header
	if status != 200 || body != fakeFiles["/home/user/notes/todo.md"] || hdr.Get("Content-Type") != "application/octet-stream" ||
		hdr.Get("Content-Disposition") != "attachment; filename=todo.md" || !strings.HasPrefix(hdr.Get("Content-Security-Policy"), "sandbox") ||
		hdr.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatalf("download: %d %q %v", status, body, hdr)
	}
	if status, _, _ := get(t, c, h, base+"/download?path=/home/user/nothere", nil); status != http.StatusNotFound {
		t.Errorf("downloading a missing file: %d", status)
	}

	for id, says := range map[string]string{
		hibID:   "This session is hibernated: its files are saved in its hibernation file",
		endedID: "This session has ended (lost): its box and its files were removed with it.",
	} {
		status, body, _ := get(t, c, h, "/ui/sessions/sam/"+id+"?path=notes", nil)
		if status != 200 || !strings.Contains(body, says) || strings.Contains(body, "todo.md") {
			t.Errorf("session %s: %d, want it to say %q", id, status, says)
		}
		if status, body, _ := get(t, c, h, "/ui/sessions/sam/"+id+"/download?path=notes/todo.md", nil); status != http.StatusConflict || !strings.Contains(body, says) {
			t.Errorf("a download from session %s: %d", id, status)
		}
	}
	for _, p := range []string{"/ui/sessions/bob/" + activeID, "/ui/sessions/bob/" + activeID + "/download?path=notes/todo.md", "/ui/sessions/NOT%20AN%20AGENT/" + activeID} {
		if status, body, _ := get(t, c, h, p, nil); status != http.StatusNotFound || strings.Contains(body, "todo.md") {
			t.Errorf("%s: %d %s", p, status, body)
		}
	}
}

// TestSessionControlCharacters: control characters in a command line show visibly (escaped,
// as file names are), never deleted, so a hidden part of a command shows; in a file's text
// they show as U+FFFD (tabs and newlines kept).
func TestSessionControlCharacters(t *testing.T) {
	h := newHarness(t, "")
	c := client(t)
	h.command(t, "sam", activeID, "ls \"\x1b]0;rm -rf x\x07\"\nrm -rf y", 0)
	base := "/ui/sessions/sam/" + activeID
	_, body, _ := get(t, c, h, base, nil)
	if want := `<code class="cmdline">ls &#34;\x1b]0;rm -rf x\a&#34;\nrm -rf y</code>`; !strings.Contains(body, want) {
		t.Errorf("the commands table lacks %q", want)
	}
	if strings.ContainsAny(body, "\x1b\x07") {
		t.Errorf("the page holds raw control characters")
	}
	if strings.Contains(body, "cut at 4096 bytes") {
		t.Errorf("a whole command is marked cut")
	}
	h.command(t, "sam", activeID, "echo "+strings.Repeat("y", 5000), 0)
	_, body, _ = get(t, c, h, base, nil)
	if !strings.Contains(body, "✂ cut at 4096 bytes</small>") {
		t.Errorf("a command line the ledger cut is not marked")
	}
	_, body, _ = get(t, c, h, base+"?path=/home/user/esc.txt", nil)
	if want := "a\uFFFD]0;title\uFFFDb\uFFFDc\uFFFDd\uFFFDe\tf\n"; !strings.Contains(body, want) {
		t.Errorf("the file's text lacks %q: %q", want, body)
	}
	if strings.ContainsAny(body, "\x1b\x07\b\x7f\u0085") {
		t.Errorf("the file's text holds raw control characters")
	}
}

// TestSessionManyEntries: a directory's listing shows at most 1,000 entries and says how many
// more there are and how to list them.
func TestSessionManyEntries(t *testing.T) {
	h := newHarness(t, "")
	c := client(t)
	_, body, _ := get(t, c, h, "/ui/sessions/sam/"+activeID+"?path=many", nil)
	if n := strings.Count(body, `<tr class="t-file">`); n != 1000 {
		t.Errorf("the page shows %d entries; want 1000", n)
	}
	if !strings.Contains(body, "f0999") || strings.Contains(body, "f1000") {
		t.Errorf("the page does not show the first 1000 entries")
	}
	if want := "200 more not shown. List them all with <code>sandpit session ls " + activeID + " /home/user/many</code>"; !strings.Contains(body, want) {
		t.Errorf("the page lacks %q", want)
	}
}

// TestSessionHeldByAnotherDaemon: a session another daemon sharing the ledger holds is not
// "missing": the page says which daemon holds it and where, as REST does (a user found the
// console saying the live session did not exist).
func TestSessionHeldByAnotherDaemon(t *testing.T) {
	h := newHarness(t, "")
	status, body, _ := get(t, client(t), h, "/ui/sessions/sam/"+elsewhereID, nil)
	if status != http.StatusNotFound || !strings.Contains(body, "daemon-b") || !strings.Contains(body, "10.0.0.2:8765") || strings.Contains(body, "has no session") {
		t.Fatalf("%d %s", status, body)
	}
}

// TestSessionsPageAgentsAndSteps: the sessions page opens on an agent that has sessions (not on
// "default", which has none here), lists the agents that have, says durations as people do,
// and has the buttons of each session's next steps: forms that post, with the page's CSRF
// token, to the console, which sends them through the REST API and shows its refusals.
// Before, it opened on "default" with no list of agents, showed "ran 192000 ms of 3600000",
// and had no buttons.
func TestSessionsPageAgentsAndSteps(t *testing.T) {
	var (
		mu     sync.Mutex
		called []string
		refuse bool
	)
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		called = append(called, r.Method+" "+r.URL.Path)
		no := refuse
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if no {
			w.WriteHeader(http.StatusConflict)
			fmt.Fprint(w, `{"error":{"message":"session is busy: a call runs"}}`)
			return
		}
		fmt.Fprint(w, `{}`)
	})
	ui, err := console.New(console.Config{Token: "correct-horse-battery", API: api, Engine: noEngine{}, Sessions: fakeSessions{}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", ui)
	srv := httptest.NewServer(httpapi.Guard(mux, nil))
	defer srv.Close()
	h := &harness{srv: srv}
	c := client(t)
	if st, _, _ := post(t, c, h, "/ui/login", srv.URL, url.Values{"token": {"correct-horse-battery"}}); st != http.StatusSeeOther {
		t.Fatalf("sign-in: %d", st)
	}

	status, body, resp := get(t, c, h, "/ui/sessions", nil)
	if status != 200 || resp.Header.Get("Content-Security-Policy") != console.CSP {
		t.Fatalf("%d, CSP %q", status, resp.Header.Get("Content-Security-Policy"))
	}
	base := "/ui/sessions/sam/"
	for _, want := range []string{`Agents with sessions: <a href="/ui/sessions?agent=sam" aria-current="page">sam</a>`, activeID,
		`ran <span title="192000 ms">3 min 12 s</span> of <span title="3600000 ms">1 h</span>`,
		`action="` + base + activeID + `/pause"`, `action="` + base + activeID + `/hibernate"`, `action="` + base + activeID + `/close"`,
		`action="` + base + hibID + `/resume"`, `action="` + base + hibID + `/close"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	for _, unwanted := range []string{base + activeID + "/resume", base + hibID + "/hibernate", base + hibID + "/pause", base + endedID + "/"} {
		if strings.Contains(body, `action="`+unwanted) {
			t.Errorf("the page offers %s, which the session's state does not allow", unwanted)
		}
	}
	m := csrfPattern.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("no CSRF token on the page")
	}
	csrf := m[1]

	// Without the token, or from another origin, nothing reaches the API.
	if st, _, _ := post(t, c, h, base+activeID+"/pause", srv.URL, url.Values{}); st != http.StatusForbidden {
		t.Errorf("a pause without the CSRF token: %d, want 403", st)
	}
	if st, _, _ := post(t, c, h, base+activeID+"/pause", "http://evil.example", url.Values{"csrf": {csrf}}); st != http.StatusForbidden {
		t.Errorf("a pause from another origin: %d, want 403", st)
	}
	mu.Lock()
	if len(called) != 0 {
		t.Errorf("refused forms reached the API: %v", called)
	}
	mu.Unlock()

	for action, want := range map[string]string{"pause": "POST /v1/agents/sam/sessions/" + activeID + "/pause",
		"hibernate": "POST /v1/agents/sam/sessions/" + activeID + "/hibernate", "resume": "POST /v1/agents/sam/sessions/" + activeID + "/resume",
		"close": "DELETE /v1/agents/sam/sessions/" + activeID} {
		mu.Lock()
		called = nil
		mu.Unlock()
		st, _, resp := post(t, c, h, base+activeID+"/"+action, srv.URL, url.Values{"csrf": {csrf}})
		mu.Lock()
		got := fmt.Sprint(called)
		mu.Unlock()
		if st != http.StatusSeeOther || got != "["+want+"]" || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/sessions?agent=sam&done=") {
			t.Errorf("%s: %d to %q, the API got %s; want a redirect to the list after %s", action, st, resp.Header.Get("Location"), got, want)
		}
	}
	if _, body, _ := get(t, c, h, "/ui/sessions?agent=sam&done="+url.QueryEscape(activeID+" paused"), nil); !strings.Contains(body, "Session "+activeID+" paused.") {
		t.Error("the list does not say what was done")
	}

	// The API's refusal is shown with its status and words.
	mu.Lock()
	refuse = true
	mu.Unlock()
	if st, body, _ := post(t, c, h, base+activeID+"/pause", srv.URL, url.Values{"csrf": {csrf}}); st != http.StatusConflict ||
		!strings.Contains(body, "could not be paused: session is busy: a call runs") {
		t.Errorf("a refused pause: %d %s", st, body)
	}
}
