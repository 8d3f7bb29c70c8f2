package handlers

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// storePage takes what a store list method returned for a page (one item more than the
// page when more follow) to the envelope page makes of a list in memory.
func TestStorePage(t *testing.T) {
	id := func(s string) string { return s }
	tests := []struct {
		name  string
		items []string
		limit int
		data  []string
		more  bool
		first any
		last  any
	}{
		{"more follow", []string{"a", "b", "c"}, 2, []string{"a", "b"}, true, "a", "b"},
		{"the last page", []string{"a", "b"}, 2, []string{"a", "b"}, false, "a", "b"},
		{"empty", nil, 2, []string{}, false, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			env, err := storePage(tc.items, nil, id, pageRequest{limit: tc.limit})
			if err != nil {
				t.Fatal(err)
			}
			if got := env["data"].([]string); fmt.Sprint(got) != fmt.Sprint(tc.data) || got == nil ||
				env["has_more"] != tc.more || env["first_id"] != tc.first || env["last_id"] != tc.last || env["object"] != "list" {
				t.Fatalf("envelope %v", env)
			}
		})
	}
	_, err := storePage([]string(nil), fmt.Errorf("listing: %w", store.ErrCursorNotFound), id, pageRequest{limit: 2, after: "zz"})
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 400 || apiErr.Code != CodeValidation || apiErr.Param != "after" {
		t.Fatalf("an unknown cursor: %v", err)
	}
	boom := errors.New("boom")
	if _, err := storePage([]string(nil), boom, id, pageRequest{limit: 2}); !errors.Is(err, boom) {
		t.Fatalf("a store failure: %v", err)
	}
}

func TestParseActivityID(t *testing.T) {
	day := time.Date(2025, 5, 13, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		id   string
		want store.ActivityKey
		ok   bool
	}{
		{"2025-05-13|gpt|openai", store.ActivityKey{Day: day, Model: "gpt", Provider: "openai"}, true},
		{"2025-05-13|a|b|openai", store.ActivityKey{Day: day, Model: "a|b", Provider: "openai"}, true},
		{"2025-05-13||", store.ActivityKey{Day: day}, true},
		{"2025-05-13|gpt", store.ActivityKey{}, false},
		{"yesterday|gpt|openai", store.ActivityKey{}, false},
		{"", store.ActivityKey{}, false},
	} {
		got, ok := parseActivityID(tc.id)
		if ok != tc.ok || !got.Day.Equal(tc.want.Day) || got.Model != tc.want.Model || got.Provider != tc.want.Provider {
			t.Errorf("parseActivityID(%q) = %+v, %v", tc.id, got, ok)
		}
		if ok && activityID(store.ActivityRow{Day: got.Day, Model: got.Model, Provider: got.Provider}) != tc.id {
			t.Errorf("%q does not read back", tc.id)
		}
	}
}
