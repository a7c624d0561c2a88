package cli

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/apitype"
)

// The run's output as a REPL shows it: stdout as it comes, then the text of each display and
// of the last expression's value; --no-display leaves them out; --json prints nothing as it
// comes.
func TestEmitterPrintsDisplaysAsAREPL(t *testing.T) {
	events := []apitype.Event{
		{Stream: apitype.StreamStdout, Data: "rows: 2\n"},
		{Stream: apitype.StreamDisplay, Display: &apitype.Display{Data: map[string]json.RawMessage{
			"text/plain": json.RawMessage(`"<IPython.core.display.HTML object>"`), "text/html": json.RawMessage(`"<b>x</b>"`)}}},
		{Stream: apitype.StreamDisplay, Display: &apitype.Display{IsMainResult: true, Data: map[string]json.RawMessage{
			"text/plain": json.RawMessage(`"   a\n0  1\n1  2"`)}}},
	}
	for _, c := range []struct {
		name            string
		asJSON, display bool
		want            string
	}{
		{"default", false, true, "rows: 2\n<IPython.core.display.HTML object>\n   a\n0  1\n1  2\n"},
		{"no-display", false, false, "rows: 2\n"},
	} {
		var out bytes.Buffer
		o := &options{env: Env{Stdout: &out, Stderr: &out}}
		emit := o.emitter(c.asJSON, c.display)
		for _, e := range events {
			emit(e)
		}
		if out.String() != c.want {
			t.Errorf("%s: printed %q, want %q", c.name, out.String(), c.want)
		}
	}
	if (&options{}).emitter(true, true) != nil {
		t.Error("--json: an emitter, want none (the result is printed whole)")
	}
}
