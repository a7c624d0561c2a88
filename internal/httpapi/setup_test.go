package httpapi_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/httpapi"
	"github.com/sandpit-dev/sandpit/internal/setup"
)

// TestSetupRefusesFields: POST /v1/setup takes no fields, and refuses any, as every other
// endpoint refuses unknown fields; no body and {} run it.
func TestSetupRefusesFields(t *testing.T) {
	ran := 0
	h := httpapi.NewHandler(httpapi.Backend{Setup: func(context.Context, func(setup.Event)) error { ran++; return nil }}, nil)
	post := func(body string) (int, string) {
		req := httptest.NewRequest("POST", "/v1/setup", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		b, _ := io.ReadAll(rec.Result().Body)
		return rec.Code, string(b)
	}
	for _, body := range []string{`{"agent": "bob"}`, `{"install": true}`, `[]`, `{} {}`, `nope`} {
		st, b := post(body)
		var e struct {
			Error struct{ Code, Message, Field string }
		}
		_ = json.Unmarshal([]byte(b), &e)
		if st != http.StatusBadRequest || e.Error.Code != apitype.CodeInvalidRequest {
			t.Errorf("body %s: %d %s, want 400 invalid_request", body, st, b)
		}
		if strings.HasPrefix(body, `{"`) && (e.Error.Field == "" || !strings.Contains(e.Error.Message, "takes no fields")) {
			t.Errorf("body %s: %+v, want the field named and that setup takes no fields", body, e.Error)
		}
	}
	if ran != 0 {
		t.Fatalf("setup ran %d times for refused bodies", ran)
	}
	for _, body := range []string{"", " \n", "{}"} {
		if st, b := post(body); st != http.StatusOK || !strings.Contains(b, `"step":"setup"`) {
			t.Errorf("body %q: %d %s", body, st, b)
		}
	}
	if ran != 3 {
		t.Fatalf("setup ran %d times, want 3", ran)
	}
}
