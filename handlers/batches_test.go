package handlers

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/files"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
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
			page, limitErr := parsePage(q)
			limit := page.limit
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

// The estimate of a batch reads the first estimationSample rows, each at the worst case
// the same request alone would be held at (its prompt's estimate from its size, its
// max_tokens or else the route's most, at the dearest route), and scales their sum to
// every row of the file, rounding up; it says when the sample is not the whole file.
func TestBatchEstimateScalesTheSample(t *testing.T) {
	cheap, dear := route("a", "m-a", "1", "2"), route("b", "m-b", "3", "4")
	cheap.MaxOutputTokens, dear.MaxOutputTokens = 1000, 500
	a := newAdminGateway(t, []*Model{{Name: "m", Routes: []Route{cheap, dear}}}, func(g *Gateway) {
		b, err := blobs.NewFS(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		g.Blobs = b
	})
	ws, std, _ := a.workspace(100 * usdNanos)
	key, err := a.s.GetKey(context.Background(), kidOf(t, std))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		rows      int
		truncated bool
	}{
		{"the whole file", 40, false},
		{"a sample", 150, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var file bytes.Buffer
			var want, sampleSum int64
			for i := range tc.rows {
				maxTokens := ""
				if i%3 == 0 {
					maxTokens = fmt.Sprintf(`"max_tokens":%d,`, 10*i+1)
				}
				body := fmt.Sprintf(`{"model":"m",%s"messages":[{"role":"user","content":"%s"}]}`, maxTokens, strings.Repeat("w", i))
				fmt.Fprintf(&file, `{"custom_id":"c%d","method":"POST","url":"/v1/chat/completions","body":%s}`+"\n", i, body)
				if i >= estimationSample {
					continue
				}
				var worst int64
				for _, rt := range []Route{cheap, dear} {
					out := rt.MaxOutputTokens
					if i%3 == 0 {
						out = int64(10*i + 1)
					}
					worst = max(worst, pricing.WorstCase(rt.Price, estimateTokens(len(body)), out))
				}
				sampleSum += worst
			}
			sample := min(tc.rows, estimationSample)
			want = (sampleSum*int64(tc.rows) + int64(sample) - 1) / int64(sample)
			f, err := files.Save(context.Background(), a.s, a.g.Blobs, files.Meta{WorkspaceID: ws, Purpose: files.PurposeBatch, Filename: "b.jsonl"}, &file)
			if err != nil {
				t.Fatal(err)
			}
			sc, err := a.g.scanBatchFile(context.Background(), &Caller{Key: key}, f.ID, "/v1/chat/completions")
			if err != nil {
				t.Fatal(err)
			}
			if sc.rows != tc.rows || sc.sample != sample || sc.estimate() != want || (sc.sample < sc.rows) != tc.truncated {
				t.Fatalf("rows %d sample %d estimate %d; want %d %d %d", sc.rows, sc.sample, sc.estimate(), tc.rows, sample, want)
			}
		})
	}
}
