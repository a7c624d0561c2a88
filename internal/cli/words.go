package cli

import "regexp"

// restAdvice rewrites the REST API's advice in the daemon's messages (which it writes for REST
// clients) into the command line's: each a route the message names and the command doing the
// same. A message that offers both ("DELETE …, or sandpit job rm") keeps the command only.
var restAdvice = []struct {
	re  *regexp.Regexp
	cli string
}{
	{regexp.MustCompile(`\((?:DELETE|GET|POST) /v1/[^,()]*, or (sandpit [^()]*)\)`), "($1)"},
	{regexp.MustCompile(`DELETE …/sessions/\{id\}`), "sandpit session rm ID"},
	{regexp.MustCompile(`\(POST …/sessions\)`), "(sandpit session new --dep)"},
	{regexp.MustCompile(`POST /v1/agents/([^/\s]+)/sessions creates a new one`), "sandpit session new --agent $1 starts a new one"},
	{regexp.MustCompile(`name the agent it was created for`), "give the --agent it was created with"},
	{regexp.MustCompile(`GET /v1/executions/(\S+) lists its files under "files"`), "sandpit exec files $1 lists them"},
	{regexp.MustCompile(`GET /v1/packages lists them`), "sandpit packages list lists them"},
	{regexp.MustCompile(`GET /v1/agents/[^/ ]+/templates lists them`), "sandpit template ls lists them"},
	{regexp.MustCompile(`GET (?:/v1/agents/[^/ ]+/templates/([^/ ]+)|…)/versions lists them`), "sandpit template versions $1 lists them"},
	{regexp.MustCompile(`one listed "within" another`), "one listed WITH another"},
	{regexp.MustCompile(`\(GET /v1/limits lists the limits; `), "("},
	// A session's lifecycle (a trial was told to POST to resume from the command line).
	{regexp.MustCompile(`\(POST /v1/agents/([^/\s]+)/sessions/([^/\s]+)/(resume|pause)\)`), "(sandpit session $3 --agent $1 $2)"},
	{regexp.MustCompile(`\(POST …/sessions/\{id\}/hibernate(\)|: )`), "(sandpit session hibernate ID$1"},
	{regexp.MustCompile(`create sessions with "auto_resume": true`), "create sessions with --auto-resume"},
	// A session's commands: session ps lists them.
	{regexp.MustCompile(`GET …/sessions/(se_[a-z2-7]+)/processes lists them`), "sandpit session ps $1 lists them"},
	// A session's file: the query parameter is ID:PATH on the command line.
	{regexp.MustCompile(`give \?path= a path`), "give ID:PATH with a path"},
}

// restRoute finds a REST route in a message: what inCommandWords must not leave.
var restRoute = regexp.MustCompile(`\b(GET|POST|PUT|PATCH|DELETE) (/v1/|…/)`)

// inCommandWords is msg, a message of the daemon, with its REST advice said as sandpit
// commands (see restAdvice).
func inCommandWords(msg string) string {
	for _, a := range restAdvice {
		msg = a.re.ReplaceAllString(msg, a.cli)
	}
	return msg
}
