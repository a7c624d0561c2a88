package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// argAliases are the argument names a model guesses for a tool where the guess is
// unambiguous, by tool: alias → the argument's name (run_in_session takes id; a model that
// has just read "the session's id" passes session_id). docs/api.md lists them.
var argAliases = map[string]map[string]string{
	"run_in_session":       {"session_id": "id"},
	"close_session":        {"session_id": "id"},
	"pause_session":        {"session_id": "id"},
	"resume_session":       {"session_id": "id"},
	"fork_session":         {"session_id": "id"},
	"run_command":          {"session_id": "id"},
	"read_file":            {"session_id": "id"},
	"write_file":           {"session_id": "id"},
	"list_files":           {"session_id": "id"},
	"list_commands":        {"session_id": "id"},
	"list_ports":           {"session_id": "id"},
	"list_port_requests":   {"session_id": "id"},
	"share_port":           {"session_id": "id"},
	"list_shares":          {"session_id": "id"},
	"revoke_share":         {"session_id": "id"},
	"update_code_job":      {"job_id": "id"},
	"delete_code_job":      {"job_id": "id"},
	"get_code_job_history": {"job_id": "id"},
	"get_execution":        {"execution_id": "id"},
	"get_code":             {"code_name": "name"},
	"update_code":          {"code_name": "name"},
	"delete_code":          {"code_name": "name"},
	"run_saved_code":       {"code_name": "name"},
}

// acceptAliases is a receiving middleware: a tools/call whose arguments give an alias of
// argAliases and not the argument itself has the alias renamed before the arguments are
// checked against the tool's schema. A call giving both keeps both, and is refused for the
// alias, which is no argument of the tool.
func acceptAliases(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if call, ok := req.(*mcp.CallToolRequest); ok && call.Params != nil {
			if aliases := argAliases[call.Params.Name]; aliases != nil {
				call.Params.Arguments = renamed(call.Params.Arguments, aliases)
			}
		}
		return next(ctx, method, req)
	}
}

// renamed returns args (a JSON object) with each alias given, whose argument is not, renamed
// to that argument; anything else as it is.
func renamed(args json.RawMessage, aliases map[string]string) json.RawMessage {
	var m map[string]json.RawMessage
	if json.Unmarshal(args, &m) != nil {
		return args
	}
	changed := false
	for alias, name := range aliases {
		v, given := m[alias]
		if _, has := m[name]; given && !has {
			m[name] = v
			delete(m, alias)
			changed = true
		}
	}
	if !changed {
		return args
	}
	out, err := json.Marshal(m)
	if err != nil {
		return args
	}
	return out
}

// schemaPrefix starts the SDK's refusal of arguments that do not fit a tool's inputSchema
// (checked before the tool runs); the schema* expressions read the rest, as plainArguments
// finds them.
const schemaPrefix = `validating "arguments": validating root: `

var (
	schemaUnknown  = regexp.MustCompile(`^unexpected additional properties \[(.*)\]$`)
	schemaMissing  = regexp.MustCompile(`^required: missing properties: \[(.*)\]$`)
	schemaProperty = regexp.MustCompile(`^validating /properties/([^/:]+)(?:/[^:]*)?: (?:[a-zA-Z]+: )?(.*)$`)
	schemaQuoted   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
)

// plainArguments is a receiving middleware: a tools/call refused because its arguments do not
// fit the tool's inputSchema says so in the tool's words ("run_code has no argument
// \"bogus\"") instead of the validator's ("validating root: unexpected additional properties").
func plainArguments(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		call, isCall := req.(*mcp.CallToolRequest)
		tr, isResult := res.(*mcp.CallToolResult)
		if err != nil || !isCall || call.Params == nil || !isResult || !tr.IsError || len(tr.Content) != 1 {
			return res, err
		}
		if text, ok := tr.Content[0].(*mcp.TextContent); ok {
			if msg, ok := strings.CutPrefix(text.Text, schemaPrefix); ok {
				text.Text = argumentsWords(call.Params.Name, msg)
			}
		}
		return res, err
	}
}

// argumentsWords says msg, the validator's complaint about tool's arguments, in the tool's
// words; one it does not know keeps its text after "arguments: ".
func argumentsWords(tool, msg string) string {
	// names lists the quoted names in list: "a", "b"; and "argument" or "arguments".
	names := func(list string) (string, string) {
		q := schemaQuoted.FindAllString(list, -1)
		return strings.Join(q, ", "), map[bool]string{true: "argument", false: "arguments"}[len(q) == 1]
	}
	const see = "tools/list gives each tool's arguments (its inputSchema)"
	if m := schemaUnknown.FindStringSubmatch(msg); m != nil && schemaQuoted.MatchString(m[1]) {
		list, word := names(m[1])
		return fmt.Sprintf("%s has no %s %s; %s", tool, word, list, see)
	}
	if m := schemaMissing.FindStringSubmatch(msg); m != nil && schemaQuoted.MatchString(m[1]) {
		list, word := names(m[1])
		return fmt.Sprintf("%s needs the %s %s; %s", tool, word, list, see)
	}
	if m := schemaProperty.FindStringSubmatch(msg); m != nil {
		return fmt.Sprintf("%s's argument %q: %s", tool, m[1], m[2])
	}
	return "arguments: " + msg
}
