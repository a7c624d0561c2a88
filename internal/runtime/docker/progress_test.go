package docker

import (
	"testing"

	"github.com/moby/moby/api/types/jsonstream"
)

// Issue 33, item 17: a pull's messages give a fraction that grows to 1 with its layers; the
// build's steps are read from its lines.
func TestPullProgress(t *testing.T) {
	p := pullProgress{}
	var last float64
	for i, c := range []struct {
		m    jsonstream.Message
		want float64
	}{
		{jsonstream.Message{Status: "Pulling from library/python", ID: "3.11-slim"}, -1},
		{jsonstream.Message{Status: "Pulling fs layer", ID: "a"}, 0},
		{jsonstream.Message{Status: "Pulling fs layer", ID: "b"}, 0},
		{jsonstream.Message{Status: "Downloading", ID: "a", Progress: &jsonstream.Progress{Current: 50, Total: 100}}, 0.125},
		{jsonstream.Message{Status: "Download complete", ID: "a"}, 0.25},
		{jsonstream.Message{Status: "Extracting", ID: "a", Progress: &jsonstream.Progress{Current: 100, Total: 100}}, 0.5},
		{jsonstream.Message{Status: "Already exists", ID: "b"}, 1},
		{jsonstream.Message{Stream: "Step 1/9 : FROM python:3.11-slim\n"}, -1},
	} {
		got, ok := p.update(c.m)
		if c.want < 0 {
			if ok {
				t.Errorf("message %d (%+v) is no layer's, yet gave %v", i, c.m, got)
			}
			continue
		}
		if !ok || got != c.want || got < last {
			t.Errorf("message %d (%+v): %v, %t; want %v", i, c.m, got, ok, c.want)
		}
		last = got
	}
	for line, want := range map[string][]string{"Step 3/15 : RUN x": {"3", "15"}, " ---> Running in 5a6f": nil} {
		got := buildStep.FindStringSubmatch(line)
		if (want == nil) != (got == nil) || (got != nil && (got[1] != want[0] || got[2] != want[1])) {
			t.Errorf("%q: %v, want %v", line, got, want)
		}
	}
}
