package console_test

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/console"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// get fetches path with c and returns the status, the body and the answer.
func get(t *testing.T, c *http.Client, h *harness, path string, header map[string]string) (int, string, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, h.srv.URL+path, nil)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp
}

// post sends a form to path with the given Origin ("" for none).
func post(t *testing.T, c *http.Client, h *harness, path, origin string, form url.Values) (int, string, *http.Response) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.srv.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp
}

var csrfPattern = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// bidiName reads "invoiceexe.pdf" where a right-to-left override takes effect.
const bidiName = "invoice\u202efdp.exe"

// TestSignIn: with a token, pages send a browser to the sign-in form; the right token sets an
// HttpOnly SameSite=Strict cookie for /ui only, which opens the console but not the API;
// POSTs need the same origin and the page's CSRF token; the bearer token opens the console too.
func TestSignIn(t *testing.T) {
	h := newHarness(t, "correct-horse-battery")
	c := client(t)
	origin := h.srv.URL

	status, _, resp := get(t, c, h, "/ui/", nil)
	if status != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/login?next=%2Fui%2F" {
		t.Fatalf("GET /ui/ signed out: %d to %q, want 303 to the sign-in page", status, resp.Header.Get("Location"))
	}
	if status, body, _ := post(t, c, h, "/ui/login", origin, url.Values{"token": {"wrong"}, "next": {"/ui/"}}); status != http.StatusUnauthorized || !strings.Contains(body, "not this daemon") {
		t.Fatalf("wrong token: %d %q", status, body)
	}
	if status, _, _ := post(t, c, h, "/ui/login", "http://evil.localhost:1", url.Values{"token": {h.token}}); status != http.StatusForbidden {
		t.Fatalf("sign-in from another origin: %d, want 403", status)
	}
	status, _, resp = post(t, c, h, "/ui/login", origin, url.Values{"token": {h.token}, "next": {"//evil.example/"}})
	if status != http.StatusSeeOther || resp.Header.Get("Location") != "/ui/" {
		t.Fatalf("sign-in: %d to %q, want 303 to /ui/ (never elsewhere)", status, resp.Header.Get("Location"))
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 || cookies[0].Name != console.CookieName || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].Path != "/ui" {
		t.Fatalf("cookie %+v, want one HttpOnly SameSite=Strict cookie for /ui", cookies)
	}

	status, body, resp := get(t, c, h, "/ui/", nil)
	if status != http.StatusOK || !strings.Contains(body, "Executions") {
		t.Fatalf("GET /ui/ signed in: %d", status)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); csp != console.CSP || strings.Contains(csp, "unsafe") {
		t.Fatalf("CSP %q", csp)
	}
	if strings.Contains(body, "<script>") || strings.Contains(body, " on") && regexp.MustCompile(`\son[a-z]+=`).MatchString(body) {
		t.Fatalf("a page holds inline script or event handlers:\n%s", body)
	}
	// The cookie opens /ui only: the API still wants the bearer token.
	req, _ := http.NewRequest(http.MethodGet, h.srv.URL+"/v1/executions", nil)
	req.AddCookie(cookies[0])
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /v1/executions with the console's cookie: %v %v, want 401", resp.StatusCode, err)
	}

	m := csrfPattern.FindStringSubmatch(body)
	if m == nil {
		t.Fatal("the page has no CSRF token")
	}
	if status, _, _ := post(t, c, h, "/ui/logout", origin, url.Values{}); status != http.StatusForbidden {
		t.Fatalf("POST without the CSRF token: %d, want 403", status)
	}
	if status, _, _ := post(t, c, h, "/ui/logout", "http://localhost:9", url.Values{"csrf": {m[1]}}); status != http.StatusForbidden {
		t.Fatalf("POST from another origin (localhost on another port): %d, want 403", status)
	}
	if status, _, _ := post(t, c, h, "/ui/logout", "", url.Values{"csrf": {m[1]}}); status != http.StatusForbidden {
		t.Fatalf("POST without Origin: %d, want 403", status)
	}
	if status, _, _ := post(t, c, h, "/ui/logout", origin, url.Values{"csrf": {m[1]}}); status != http.StatusSeeOther {
		t.Fatalf("sign out: %d, want 303", status)
	}
	if status, _, _ := get(t, c, h, "/ui/", nil); status != http.StatusSeeOther {
		t.Fatalf("GET /ui/ after signing out: %d, want 303", status)
	}
	if status, _, _ := get(t, client(t), h, "/ui/health", map[string]string{"Authorization": "Bearer " + h.token}); status != http.StatusOK {
		t.Fatalf("GET /ui/health with the bearer token: %d", status)
	}
	if status, _, _ := get(t, client(t), h, "/ui/", map[string]string{"Host": "evil.example"}); status == http.StatusOK {
		t.Fatal("a request for another host was served")
	}
}

// hostile is output that tries to become markup in many ways.
const (
	hostileStdout = "<script>window.__pwned=1</script>\n<img src=x onerror=\"window.__pwned=2\">\n" +
		"\x1b[31mred\x1b[0m \x1b[1;38;5;9mbright\x1b[0m " +
		"\x1b]8;;javascript:window.__pwned=3\x1b\\click me\x1b]8;;\x1b\\ " +
		"\x1b[31;\"><script>window.__pwned=4</script>m after \x1b]0;<title>\x07 end\n"
	hostileName = `"><img src=x onerror=window.__pwned=5>.txt`
)

// TestEscaping: program output, code, log lines and file names are text on the record page: no
// element or attribute comes from them, ANSI colours become the console's own classes, and
// OSC hyperlinks and titles are dropped.
func TestEscaping(t *testing.T) {
	h := newHarness(t, "")
	id := h.add(t, record{code: "print('<script>x</script>')  # </code></pre><script>", stdout: hostileStdout, stderr: "\x1b[33mwarn\x1b[0m <b>bold?</b>",
		files: map[string][]byte{hostileName: []byte("data"), "dir/a b#?.csv": []byte("x,y\n"), bidiName: []byte("MZ")}})
	c := client(t)
	status, body, _ := get(t, c, h, "/ui/executions/"+id, nil)
	if status != http.StatusOK {
		t.Fatalf("record page: %d\n%s", status, body)
	}
	for _, bad := range []string{"<script>window", "<img src=x", "javascript:", "title&gt;", "<b>bold", "<b>log", "</code></pre><script>"} {
		if strings.Contains(body, bad) {
			t.Errorf("the page holds %q unescaped", bad)
		}
	}
	for _, want := range []string{`<span class="ansi-fg1">red</span>`, `<span class="ansi-fg9 ansi-bold">bright</span>`, "click me", "&lt;script&gt;window.__pwned=1&lt;/script&gt;",
		`<span class="ansi-fg3">warn</span>`, "&lt;b&gt;log&lt;/b&gt; line"} {
		if !strings.Contains(body, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	// A name with a right-to-left override is shown with it escaped (H40), not reordered.
	if strings.ContainsRune(body, '\u202e') || !strings.Contains(body, `invoice\u202efdp.exe`) {
		t.Errorf("the page shows %q unescaped", bidiName)
	}
	// File links reach the files, whatever their names.
	for _, name := range []string{hostileName, "dir/a b#?.csv", bidiName} {
		link := console.FileURL(id, name)
		if !strings.Contains(body, strings.ReplaceAll(link, "&", "&amp;")) {
			t.Errorf("the page has no link %s", link)
		}
		status, got, resp := get(t, c, h, link, nil)
		if status != http.StatusOK || resp.Header.Get("Content-Disposition") == "" || !strings.HasPrefix(resp.Header.Get("Content-Security-Policy"), "sandbox") {
			t.Errorf("GET %s: %d %q, headers %v", link, status, got, resp.Header)
		}
	}
	// The live rows escape too.
	if _, rows, _ := get(t, c, h, "/ui/rows", nil); strings.Contains(rows, "<script>") || !strings.Contains(rows, id) {
		t.Errorf("rows: %s", rows)
	}
}

// TestFilters: the list filters by outcome, and a bad filter value says what is wrong.
func TestFilters(t *testing.T) {
	h := newHarness(t, "")
	ok := h.add(t, record{code: "pass"})
	bad := h.add(t, record{code: "1/0", outcome: sandbox.OutcomeError, agent: "other"})
	c := client(t)
	_, body, _ := get(t, c, h, "/ui/?outcome=error", nil)
	if !strings.Contains(body, bad) || strings.Contains(body, ok) {
		t.Errorf("outcome=error lists the wrong runs")
	}
	_, body, _ = get(t, c, h, "/ui/?agent=analyst&since=15m", nil)
	if strings.Contains(body, bad) || !strings.Contains(body, ok) {
		t.Errorf("agent=analyst lists the wrong runs")
	}
	status, body, _ := get(t, c, h, "/ui/?outcome=fine", nil)
	if status != http.StatusBadRequest || !strings.Contains(body, "outcome &#34;fine&#34; is not an outcome") {
		t.Errorf("outcome=fine: %d", status)
	}
	if status, body, _ := get(t, c, h, "/ui/health", nil); status != http.StatusOK || !strings.Contains(body, "1 of 4") {
		t.Errorf("health: %d\n%s", status, body)
	}
	if status, _, _ := get(t, c, h, "/ui/nothing", nil); status != http.StatusNotFound {
		t.Errorf("GET /ui/nothing: %d", status)
	}
}

// TestANSISpans: colours, resets, the 256-colour palette's first 16, and sequences that are
// dropped.
func TestANSISpans(t *testing.T) {
	got := console.ANSISpans("a\x1b[1;32mb\x1b[22mc\x1b[0md\x1b[2Ke\x1b]0;title\x07f\rg\r\nh\x00")
	want := []console.Span{{"", "a"}, {"ansi-fg2 ansi-bold", "b"}, {"ansi-fg2", "c"}, {"", "deg\nh\uFFFD"}}
	var joined []console.Span
	for _, s := range got {
		if n := len(joined); n > 0 && joined[n-1].Class == s.Class {
			joined[n-1].Text += s.Text
			continue
		}
		joined = append(joined, s)
	}
	if len(joined) != 4 || joined[0] != want[0] || joined[1] != want[1] || joined[2] != want[2] || joined[3].Text != "deg\nh\uFFFD" {
		t.Fatalf("ANSISpans = %q", got)
	}
}

var classPattern = regexp.MustCompile(`^((ansi-(fg|bg)(1[0-5]|[0-9])|ansi-bold|ansi-dim|ansi-italic|ansi-underline)( |$))*$`)

// FuzzANSISpans: whatever the output, the classes come from the fixed set and no escape or
// control character but newline and tab reaches the text.
func FuzzANSISpans(f *testing.F) {
	f.Add(hostileStdout)
	f.Add("\x1b[38;5;300m\x1b[38;2;1;2;3mx\x1b[")
	f.Add("\x1b]8;;http://x\x1b\\y\x1bPq\x1b\\")
	f.Fuzz(func(t *testing.T, s string) {
		for _, sp := range console.ANSISpans(s) {
			if !classPattern.MatchString(sp.Class) {
				t.Fatalf("class %q", sp.Class)
			}
			for _, r := range sp.Text {
				if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
					t.Fatalf("control %U in %q", r, sp.Text)
				}
			}
		}
	})
}

// TestHighlightPython: the spans join to the source, and keywords, strings and comments are
// classed.
func TestHighlightPython(t *testing.T) {
	src := "def f(x):\n    return f\"{x}\" + 'a\\'b' # done\n@dec\nclass C: pass\n\"\"\"doc\nstring\"\"\"\nn = 0x1F\n"
	var b strings.Builder
	classes := map[string]string{}
	for _, s := range console.HighlightPython(src) {
		b.WriteString(s.Text)
		if s.Class != "" {
			classes[s.Text] = s.Class
		}
	}
	if b.String() != src {
		t.Fatalf("spans join to %q", b.String())
	}
	for text, class := range map[string]string{"def": "py-kw", "return": "py-kw", `f"{x}"`: "py-str", `'a\'b'`: "py-str", "# done": "py-com", "@dec": "py-dec", "\"\"\"doc\nstring\"\"\"": "py-str", "0x1F": "py-num"} {
		if classes[text] != class {
			t.Errorf("%q is classed %q, want %q", text, classes[text], class)
		}
	}
}

// TestLineDiff: a changed line is removed then added; the rest is kept.
func TestLineDiff(t *testing.T) {
	got := console.LineDiff("a\nb\nc\nd", "a\nB\nc\nd\ne")
	var s []string
	for _, l := range got {
		s = append(s, l.Op+l.Text)
	}
	if strings.Join(s, "|") != " a|-b|+B| c| d|+e" {
		t.Fatalf("LineDiff = %q", s)
	}
}

// send sends a JSON request to the harness's API (no token) and returns the status and body.
func send(t *testing.T, h *harness, method, path, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, h.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var jobIDPattern = regexp.MustCompile(`"id":"(job_[a-z0-9]+)"`)

// TestJobsAndCode: the jobs page says a schedule in words with its next fires and pauses and
// resumes a job through its forms; the code pages list saved code and diff two versions.
func TestJobsAndCode(t *testing.T) {
	h := newHarness(t, "")
	if st, b := send(t, h, "POST", "/v1/agents/analyst/code", `{"name": "report", "code": "a = 1\nb = 2\nprint(a + b)\n"}`); st != http.StatusCreated {
		t.Fatalf("saving code: %d %s", st, b)
	}
	if st, b := send(t, h, "PUT", "/v1/agents/analyst/code/report", `{"code": "a = 1\nb = 3\nprint(a + b)\n", "expected_version": 1}`); st != http.StatusOK {
		t.Fatalf("updating code: %d %s", st, b)
	}
	st, b := send(t, h, "POST", "/v1/agents/analyst/jobs", `{"code_name": "report", "schedule": "30 9 * * 1-5", "timezone": "Europe/Paris"}`)
	m := jobIDPattern.FindStringSubmatch(b)
	if st != http.StatusCreated || m == nil {
		t.Fatalf("creating a job: %d %s", st, b)
	}
	job := m[1]
	c := client(t)
	_, body, _ := get(t, c, h, "/ui/jobs?agent=analyst", nil)
	for _, want := range []string{"every Monday to Friday at 09:30 (Europe/Paris time)", "Next fires (UTC):", "No fires yet.", `action="/ui/jobs/analyst/` + job + `/pause"`} {
		if !strings.Contains(body, want) {
			t.Fatalf("the jobs page lacks %q:\n%s", want, body)
		}
	}
	csrf := csrfPattern.FindStringSubmatch(body)[1]
	if st, _, resp := post(t, c, h, "/ui/jobs/analyst/"+job+"/pause", h.srv.URL, url.Values{"csrf": {csrf}}); st != http.StatusSeeOther || !strings.HasPrefix(resp.Header.Get("Location"), "/ui/jobs?agent=analyst") {
		t.Fatalf("pausing: %d", st)
	}
	_, body, _ = get(t, c, h, "/ui/jobs?agent=analyst", nil)
	if !strings.Contains(body, `<span class="badge paused">paused</span>`) || !strings.Contains(body, "/resume") {
		t.Fatalf("the job is not shown paused:\n%s", body)
	}
	if st, _, _ := post(t, c, h, "/ui/jobs/analyst/"+job+"/resume", h.srv.URL, url.Values{"csrf": {csrf}}); st != http.StatusSeeOther {
		t.Fatalf("resuming: %d", st)
	}
	if st, body, _ := post(t, c, h, "/ui/jobs/analyst/job_nope/pause", h.srv.URL, url.Values{"csrf": {csrf}}); st != http.StatusNotFound || !strings.Contains(body, "job_nope") {
		t.Fatalf("pausing a job that does not exist: %d\n%s", st, body)
	}

	_, body, _ = get(t, c, h, "/ui/code?agent=analyst", nil)
	if !strings.Contains(body, `href="/ui/code/analyst/report"`) {
		t.Fatalf("the code list lacks report:\n%s", body)
	}
	st, body, _ = get(t, c, h, "/ui/code/analyst/report?a=1&b=2", nil)
	if st != http.StatusOK || !strings.Contains(body, `<span class="ddel">- b = 2</span>`) || !strings.Contains(body, `<span class="dadd">&#43; b = 3</span>`) {
		t.Fatalf("the diff of v1 and v2: %d\n%s", st, body)
	}
	// Issue 33, item 9: by default the comparison offered is v1 with v2 (it was v2 with
	// itself), and the run form holds an input the schema accepts (it held {}).
	_, body, _ = get(t, c, h, "/ui/code/analyst/report", nil)
	if !regexp.MustCompile(`<select name="a">.*<option value="1" selected>v1</option>`).MatchString(body) ||
		!regexp.MustCompile(`<select name="b">.*<option value="2" selected>v2</option>`).MatchString(body) {
		t.Fatalf("the comparison offered by default:\n%s", body)
	}
	if st, b := send(t, h, "POST", "/v1/agents/analyst/code", `{"name": "typed", "code": "x", "input_schema": {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer", "minimum": 1}}}}`); st != http.StatusCreated {
		t.Fatalf("saving code: %d %s", st, b)
	}
	_, body, _ = get(t, c, h, "/ui/code/analyst/typed", nil)
	if m := regexp.MustCompile(`(?s)<textarea id="run-input"[^>]*>(.*?)</textarea>`).FindStringSubmatch(body); m == nil || !strings.Contains(m[1], `&#34;n&#34;: 1`) {
		t.Fatalf("the run form's input:\n%s", body)
	}
	// A schedule of a step of one reads in the singular.
	if st, b := send(t, h, "POST", "/v1/agents/analyst/jobs", `{"code_name": "report", "schedule": "*/1 * * * *"}`); st != http.StatusCreated {
		t.Fatalf("creating a job: %d %s", st, b)
	}
	if _, body, _ = get(t, c, h, "/ui/jobs?agent=analyst", nil); !strings.Contains(body, "every minute") || strings.Contains(body, "every 1 minutes") {
		t.Fatalf("the jobs page's every-minute job:\n%s", body)
	}
}

// Issue 33, items 9 and 15: a record says the input files the run was given (name, size,
// digest; escaped like every name), over REST and on the record page.
func TestRecordShowsInputFiles(t *testing.T) {
	h := newHarness(t, "")
	id := h.add(t, record{code: "print(1)", inputFiles: []sandbox.InputFile{{Name: "data.csv", Content: []byte("a,b\n1,2\n")}, {Name: "x<b>y.txt"}}})
	st, b := send(t, h, "GET", "/v1/executions/"+id, "")
	if st != http.StatusOK || !strings.Contains(b, `"input_files":[{"name":"data.csv","size_bytes":8,"sha256":"`) {
		t.Fatalf("the record: %d %s", st, b)
	}
	_, body, _ := get(t, client(t), h, "/ui/executions/"+id, nil)
	if !strings.Contains(body, "Input files") || !strings.Contains(body, "<code>data.csv</code> · 8 B") || strings.Contains(body, "x<b>y") {
		t.Fatalf("the record page:\n%s", body)
	}
}
