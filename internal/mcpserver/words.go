package mcpserver

import "regexp"

// restAdvice rewrites the REST API's advice in the daemon's messages (which it writes for REST
// clients) into this server's: each a route the message names and the tool doing the same
// (cli/words.go does the same for the command line). A route no tool serves is left as it is.
var restAdvice = []struct {
	re   *regexp.Regexp
	tool string
}{
	{regexp.MustCompile(`POST /v1/agents/[^/\s]+/sessions creates a new one`), "create_session starts a new one"},
	{regexp.MustCompile(`name the agent it was created for`), "connect as the agent it was created for"},
	{regexp.MustCompile(`DELETE …/sessions/\{id\}`), "close_session"},
	// No tool hibernates a session: the session limit's advice to do so is left out.
	{regexp.MustCompile(`, hibernate one \(POST …/sessions/\{id\}/hibernate: [^)]*\)`), ""},
	{regexp.MustCompile(`\(POST …/sessions\)`), "(create_session's dependencies)"},
	{regexp.MustCompile(`\(DELETE /v1/agents/[^/\s]+/jobs/\{id\}, or sandpit job rm\)`), "(delete_code_job)"},
	{regexp.MustCompile(`GET /v1/executions/(\S+) lists its files under "files"`), "get_execution of $1 lists them under \"files\""},
	{regexp.MustCompile(`\(GET /v1/limits lists the limits; `), "("},
	{regexp.MustCompile(`\(POST /v1/agents/[^/\s]+/sessions/([^/\s]+)/(resume|pause)\)`), "(${2}_session with id $1)"},
	{regexp.MustCompile(`create sessions with "auto_resume": true`), "create sessions with auto_resume"},
	{regexp.MustCompile(`give \?path= a path`), "give path, a path"},
}

// inToolWords is msg, a message of the daemon, with its REST advice said as tools (see
// restAdvice).
func inToolWords(msg string) string {
	for _, a := range restAdvice {
		msg = a.re.ReplaceAllString(msg, a.tool)
	}
	return msg
}
