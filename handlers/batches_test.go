package handlers

import (
	"net/url"
	"slices"
	"strings"
	"testing"
)

// The list rules of GET /batches, each a row: limit 1 to 100, 20 by default, capped above
// 100, anything else a 400 naming the value; status repeated or comma-separated, statuses
// comma-separated, the specification's aliases, unknown values a 400 naming them.
func TestBatchListRules(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		limit       int
		statuses    []string
		// bad is the parameter a 400 names, and mention what its message quotes.
		bad, mention string
	}{
		{name: "defaults", query: "", limit: 20},
		{name: "limit 1", query: "limit=1", limit: 1},
		{name: "limit 100", query: "limit=100", limit: 100},
		{name: "limit above 100 capped", query: "limit=1000", limit: 100},
		{name: "limit 0", query: "limit=0", bad: "limit", mention: `"0"`},
		{name: "limit negative", query: "limit=-5", bad: "limit", mention: `"-5"`},
		{name: "limit not a number", query: "limit=ten", bad: "limit", mention: `"ten"`},
		{name: "limit empty", query: "limit=", bad: "limit", mention: `""`},
		{name: "status completed", query: "status=completed", limit: 20, statuses: []string{"completed"}},
		{name: "status repeated", query: "status=completed&status=failed", limit: 20, statuses: []string{"completed", "failed"}},
		{name: "status comma-separated", query: "status=completed,failed", limit: 20, statuses: []string{"completed", "failed"}},
		{name: "statuses comma-separated", query: "statuses=expired,%20completed", limit: 20, statuses: []string{"expired", "completed"}},
		{name: "status and statuses together", query: "status=failed&statuses=expired", limit: 20, statuses: []string{"failed", "expired"}},
		{name: "pending", query: "status=pending", limit: 20, statuses: []string{"validating", "queued"}},
		{name: "queued is pending", query: "status=queued", limit: 20, statuses: []string{"validating", "queued"}},
		{name: "validating", query: "status=validating", limit: 20, statuses: []string{"validating", "queued"}},
		{name: "in_progress takes finalizing", query: "status=in_progress", limit: 20, statuses: []string{"in_progress", "finalizing"}},
		{name: "running", query: "status=running", limit: 20, statuses: []string{"in_progress", "finalizing"}},
		{name: "processing", query: "status=processing", limit: 20, statuses: []string{"in_progress", "finalizing"}},
		{name: "finalizing alone", query: "status=finalizing", limit: 20, statuses: []string{"finalizing"}},
		{name: "cancelled takes cancelling", query: "status=cancelled", limit: 20, statuses: []string{"cancelling", "cancelled"}},
		{name: "canceled", query: "status=canceled", limit: 20, statuses: []string{"cancelling", "cancelled"}},
		{name: "cancelling alone", query: "status=cancelling", limit: 20, statuses: []string{"cancelling"}},
		{name: "aliases deduplicated", query: "status=running,processing,in_progress", limit: 20, statuses: []string{"in_progress", "finalizing"}},
		{name: "case-insensitive", query: "status=COMPLETED", limit: 20, statuses: []string{"completed"}},
		{name: "unknown status", query: "status=done", bad: "status", mention: `"done"`},
		{name: "unknown among known", query: "status=completed,bogus", bad: "status", mention: `"bogus"`},
		{name: "unknown in statuses", query: "statuses=nope", bad: "statuses", mention: `"nope"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := url.ParseQuery(tc.query)
			if err != nil {
				t.Fatal(err)
			}
			limit, limitErr := parseBatchLimit(q)
			statuses, statusErr := parseBatchStatuses(q)
			apiErr := limitErr
			if apiErr == nil {
				apiErr = statusErr
			}
			if tc.bad != "" {
				if apiErr == nil || apiErr.Status != 400 || apiErr.Param != tc.bad || !strings.Contains(apiErr.Message, tc.mention) {
					t.Fatalf("got %+v; want a 400 naming %s %s", apiErr, tc.bad, tc.mention)
				}
				return
			}
			if apiErr != nil {
				t.Fatalf("refused: %v", apiErr)
			}
			if limit != tc.limit || !slices.Equal(statuses, tc.statuses) {
				t.Fatalf("limit %d statuses %v; want %d %v", limit, statuses, tc.limit, tc.statuses)
			}
		})
	}
}
