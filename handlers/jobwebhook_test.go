package handlers

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// handlerTestJobKind is a job kind of these tests whose public object is its webhook, as
// every family renders its own.
const handlerTestJobKind = "webhook_handler_test"

func init() {
	registerJobRenderer(handlerTestJobKind, func(g *Gateway, r *http.Request, j store.Job) (any, error) {
		wh, err := g.jobWebhook(r.Context(), j)
		return map[string]any{"id": j.ID, "webhook": wh}, err
	})
}

// callerOf is the caller a request with key plain would be.
func (a *adminGateway) callerOf(plain string) *Caller {
	a.t.Helper()
	k, err := a.s.GetKey(context.Background(), kidOf(a.t, plain))
	if err != nil {
		a.t.Fatal(err)
	}
	return &Caller{Key: k}
}

func TestParseJobWebhookWebhook(t *testing.T) {
	a := newWebhookGateway(t, nil)
	ws, _, mgmt := a.workspace(0)
	_, _, otherMgmt := a.workspace(0)
	ctx := context.Background()
	caller := a.callerOf(mgmt)
	mine := a.mustDo(201, http.MethodPost, "/webhook-endpoints", mgmt, `{"name": "n", "url": "https://hooks.example.com/a", "events": ["*"]}`)["id"].(string)
	off := a.mustDo(201, http.MethodPost, "/webhook-endpoints", mgmt, `{"name": "n", "url": "https://hooks.example.com/b", "events": ["*"]}`)["id"].(string)
	a.mustDo(200, http.MethodPatch, "/webhook-endpoints/"+off, mgmt, `{"status": "disabled"}`)
	theirs := a.mustDo(201, http.MethodPost, "/webhook-endpoints", otherMgmt, `{"name": "n", "url": "https://hooks.example.com/c", "events": ["*"]}`)["id"].(string)
	secret, err := delivery.NewSecret()
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct{ name, body, param, says string }{
		{"both", `{"endpoint_id": "` + mine + `", "url": "https://hooks.example.com/x"}`, "webhook", "not both"},
		{"neither", `{"events": ["*"]}`, "webhook", "endpoint_id"},
		{"unknown field", `{"endpoint_id": "` + mine + `", "signing_secret": "x"}`, "webhook", "signing_secret"},
		{"not an object", `"https://hooks.example.com/x"`, "webhook", "webhook must be"},
		{"bad event", `{"endpoint_id": "` + mine + `", "events": ["video.finished"]}`, "webhook.events", "video.finished"},
		{"another kind's event", `{"endpoint_id": "` + mine + `", "events": ["music.completed"]}`, "webhook.events", "music.completed"},
		{"empty events", `{"endpoint_id": "` + mine + `", "events": []}`, "webhook.events", "at least one"},
		{"another workspace's endpoint", `{"endpoint_id": "` + theirs + `"}`, "webhook.endpoint_id", "no webhook endpoint"},
		{"no such endpoint", `{"endpoint_id": "0b9f1c6e-3a57-4c1e-9d0f-2f5a7c3e8b11"}`, "webhook.endpoint_id", "no webhook endpoint"},
		{"not a uuid", `{"endpoint_id": "we_1"}`, "webhook.endpoint_id", "no webhook endpoint"},
		{"disabled endpoint", `{"endpoint_id": "` + off + `"}`, "webhook.endpoint_id", "disabled"},
		{"secret with an endpoint", `{"endpoint_id": "` + mine + `", "secret": "` + secret + `"}`, "webhook.secret", "url only"},
		{"http url", `{"url": "http://hooks.example.com/x", "secret": "` + secret + `"}`, "webhook.url", "https only"},
		{"loopback url", `{"url": "https://127.0.0.1/x", "secret": "` + secret + `"}`, "webhook.url", "loopback"},
		{"metadata url", `{"url": "https://[fd00:ec2::254]/x", "secret": "` + secret + `"}`, "webhook.url", "private"},
		{"url without a secret", `{"url": "https://hooks.example.com/x"}`, "webhook.secret", "required"},
		{"secret without prefix", `{"url": "https://hooks.example.com/x", "secret": "` + strings.TrimPrefix(secret, "whsec_") + `"}`, "webhook.secret", "whsec_"},
		{"short secret", `{"url": "https://hooks.example.com/x", "secret": "whsec_` + base64.StdEncoding.EncodeToString(make([]byte, 8)) + `"}`, "webhook.secret", "not 8"},
		{"secret not base64", `{"url": "https://hooks.example.com/x", "secret": "whsec_!!!"}`, "webhook.secret", "base64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stored, err := a.g.parseJobWebhook(ctx, caller, store.JobVideo, json.RawMessage(tc.body))
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.Status != 400 || apiErr.Code != CodeValidation || apiErr.Param != tc.param || !strings.Contains(apiErr.Message, tc.says) {
				t.Fatalf("stored %s, err %v; want 400 on %s saying %q", stored, err, tc.param, tc.says)
			}
			if strings.Contains(apiErr.Message, secret) || strings.Contains(apiErr.Message, strings.TrimPrefix(secret, "whsec_")) {
				t.Fatalf("the error quotes the secret: %s", apiErr.Message)
			}
		})
	}

	for _, raw := range []string{``, `null`, ` null `} {
		if stored, err := a.g.parseJobWebhook(ctx, caller, store.JobVideo, json.RawMessage(raw)); stored != nil || err != nil {
			t.Fatalf("%q: %s, %v; want no webhook", raw, stored, err)
		}
	}
	stored, err := a.g.parseJobWebhook(ctx, caller, store.JobVideo, json.RawMessage(`{"endpoint_id": "`+mine+`", "events": ["video.completed", "video.completed"]}`))
	if err != nil || string(stored) != `{"endpoint_id":"`+mine+`","events":["video.completed"]}` {
		t.Fatalf("endpoint: %s, %v", stored, err)
	}
	stored, err = a.g.parseJobWebhook(ctx, caller, store.JobVideo, json.RawMessage(`{"url": "https://hooks.example.com/x", "secret": "`+secret+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(stored), secret) || strings.Contains(string(stored), strings.TrimPrefix(secret, "whsec_")) {
		t.Fatalf("the secret is stored in the clear: %s", stored)
	}
	w, ok, err := delivery.ReadJobWebhook(stored)
	if err != nil || !ok || w.URL != "https://hooks.example.com/x" || !delivery.IsInlineTarget(w.Target) || w.EndpointID != "" || len(w.Events) != 0 {
		t.Fatalf("url: %+v, %v", w, err)
	}
	if opened, err := a.g.WebhookSealer.Open(w.Secret, []byte(w.Target)); err != nil || string(opened) != secret {
		t.Fatalf("the sealed secret opens to %q, %v", opened, err)
	}
	if other, _ := a.g.parseJobWebhook(ctx, caller, store.JobVideo, json.RawMessage(`{"url": "https://hooks.example.com/x", "secret": "`+secret+`"}`)); strings.Contains(string(other), w.Target) {
		t.Fatal("two jobs share a target")
	}

	// Without a secret key no webhook can be signed: 503, as the endpoint routes answer.
	a.g.WebhookSealer = nil
	_, err = a.g.parseJobWebhook(ctx, caller, store.JobVideo, json.RawMessage(`{"endpoint_id": "`+mine+`"}`))
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != 503 || apiErr.Code != CodeNotConfigured {
		t.Fatalf("without a key: %v", err)
	}
	_ = ws
}

// TestJobWebhookShowsDeliveries renders a job's webhook from the store's deliveries and
// attempts: the counters over all of them, the newest attempts, and never the secret.
func TestJobWebhookShowsDeliveries(t *testing.T) {
	a := newWebhookGateway(t, nil)
	ws, _, mgmt := a.workspace(0)
	ctx := context.Background()
	caller := a.callerOf(mgmt)
	secret, _ := delivery.NewSecret()
	stored, err := a.g.parseJobWebhook(ctx, caller, store.JobVideo, json.RawMessage(`{"url": "https://hooks.example.com/x", "secret": "`+secret+`", "events": ["*"]}`))
	if err != nil {
		t.Fatal(err)
	}
	w, _, _ := delivery.ReadJobWebhook(stored)
	job := store.Job{ID: ids.New("job"), WorkspaceID: ws, Kind: handlerTestJobKind, Status: "queued", Webhook: stored}
	events := []store.Event{
		{ID: "evt_a", Type: "video.created", Target: w.Target, Payload: json.RawMessage(`{}`)},
		{ID: "evt_b", Type: "video.completed", Target: w.Target, Payload: json.RawMessage(`{}`)},
		{ID: "evt_c", Type: "video.progress", Target: w.Target, Payload: json.RawMessage(`{}`)},
	}
	if err := a.s.CreateJob(ctx, job, time.Now().Add(time.Hour), events); err != nil {
		t.Fatal(err)
	}
	render := func() map[string]any {
		t.Helper()
		r := httptest.NewRequest(http.MethodGet, "http://gw/v1/x", nil)
		v, ok, err := a.g.renderJob(r, job)
		if err != nil || !ok {
			t.Fatalf("renderJob: %v, %v", ok, err)
		}
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), `"secret"`) || strings.Contains(string(b), strings.TrimPrefix(secret, "whsec_")) ||
			strings.Contains(string(b), base64.StdEncoding.EncodeToString(w.Secret)) || strings.Contains(string(b), w.Target) {
			t.Fatalf("the job object shows its secret or target: %s", b)
		}
		var out map[string]any
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		return out["webhook"].(map[string]any)
	}
	none := render()
	want := `{"attempts":[],"delivery":{"delivered_event_types":[],"delivered_events":0,"last_attempt_at":null,"last_delivered_at":null,` +
		`"last_error_message":null,"last_failure_at":null,"last_response_status":null,"max_attempts":5,"next_retry_at":null,` +
		`"pending_retries":0,"total_attempts":0},"events":["*"],"has_secret":true,"url":"https://hooks.example.com/x"}`
	if b, _ := json.Marshal(none); string(b) != want {
		t.Fatalf("before any attempt\n got %s\nwant %s", b, want)
	}

	// evt_a fails twice and is delivered; evt_b fails and waits; evt_c is given up.
	t0 := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	attempt := func(id string, a2 store.DeliveryAttempt, next time.Time) {
		t.Helper()
		items, err := a.s.Claim(ctx, store.ClaimParams{Queue: store.DeliveryQueue, Owner: "t", Lease: time.Minute, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, it := range items {
			if it.ID == id {
				found = true
				if err := a.s.RecordAttempt(ctx, it.Claim, a2, next); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := a.s.Requeue(ctx, it.Claim, time.Now().Add(-time.Hour)); err != nil {
				t.Fatal(err)
			}
		}
		if !found {
			t.Fatalf("%s not due", id)
		}
	}
	past := time.Now().Add(-time.Hour) // due again at once
	attempt("evt_a", store.DeliveryAttempt{StatusCode: 503, Error: "HTTP 503", ResponsePreview: "busy", At: t0}, past)
	attempt("evt_a", store.DeliveryAttempt{Error: "dial tcp: connection refused", At: t0.Add(time.Minute)}, past)
	attempt("evt_a", store.DeliveryAttempt{StatusCode: 204, Delivered: true, At: t0.Add(2 * time.Minute)}, time.Time{})
	attempt("evt_c", store.DeliveryAttempt{StatusCode: 410, Error: "HTTP 410", At: t0.Add(3 * time.Minute)}, time.Time{})
	retryAt := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	attempt("evt_b", store.DeliveryAttempt{StatusCode: 500, Error: "HTTP 500", ResponsePreview: `{"error":"boom"}`, At: t0.Add(4 * time.Minute)}, retryAt)

	got := render()
	b, _ := json.Marshal(got["delivery"])
	want = `{"delivered_event_types":["video.created"],"delivered_events":1,"last_attempt_at":"2026-11-29T10:04:00Z",` +
		`"last_delivered_at":"2026-11-29T10:02:00Z","last_error_message":"HTTP 500","last_failure_at":"2026-11-29T10:04:00Z",` +
		`"last_response_status":500,"max_attempts":5,"next_retry_at":"` + rfc3339(retryAt) + `","pending_retries":1,"total_attempts":5}`
	if string(b) != want {
		t.Fatalf("delivery\n got %s\nwant %s", b, want)
	}
	b, _ = json.Marshal(got["attempts"])
	want = `[{"attempt_number":1,"delivered_at":null,"delivery_key":"evt_a","error_message":"HTTP 503","event_type":"video.created","id":"evt_a.0001","max_attempts":5,"next_retry_at":"` + rfc3339(past) + `","response_body_preview":"busy","response_status":503,"tried_at":"2026-11-29T10:00:00Z"},` +
		`{"attempt_number":2,"delivered_at":null,"delivery_key":"evt_a","error_message":"dial tcp: connection refused","event_type":"video.created","id":"evt_a.0002","max_attempts":5,"next_retry_at":"` + rfc3339(past) + `","response_body_preview":null,"response_status":null,"tried_at":"2026-11-29T10:01:00Z"},` +
		`{"attempt_number":3,"delivered_at":"2026-11-29T10:02:00Z","delivery_key":"evt_a","error_message":null,"event_type":"video.created","id":"evt_a.0003","max_attempts":5,"next_retry_at":null,"response_body_preview":null,"response_status":204,"tried_at":"2026-11-29T10:02:00Z"},` +
		`{"attempt_number":1,"delivered_at":null,"delivery_key":"evt_c","error_message":"HTTP 410","event_type":"video.progress","id":"evt_c.0001","max_attempts":5,"next_retry_at":null,"response_body_preview":null,"response_status":410,"tried_at":"2026-11-29T10:03:00Z"},` +
		`{"attempt_number":1,"delivered_at":null,"delivery_key":"evt_b","error_message":"HTTP 500","event_type":"video.completed","id":"evt_b.0001","max_attempts":5,"next_retry_at":"` + rfc3339(retryAt) + `","response_body_preview":"{\"error\":\"boom\"}","response_status":500,"tried_at":"2026-11-29T10:04:00Z"}]`
	if string(b) != want {
		t.Fatalf("attempts\n got %s\nwant %s", b, want)
	}

	// The list is bounded to the newest attempts; the counters still count them all.
	if err := a.s.Reschedule(ctx, store.DeliveryQueue, "evt_b", past); err != nil {
		t.Fatal(err)
	}
	for i := range jobWebhookAttempts {
		attempt("evt_b", store.DeliveryAttempt{StatusCode: 502, Error: "HTTP 502", At: t0.Add(time.Duration(5+i) * time.Minute)}, past)
	}
	got = render()
	attempts := got["attempts"].([]any)
	first, last := attempts[0].(map[string]any), attempts[len(attempts)-1].(map[string]any)
	if len(attempts) != jobWebhookAttempts || first["attempt_number"] != 2.0 || last["attempt_number"] != float64(jobWebhookAttempts+1) ||
		got["delivery"].(map[string]any)["total_attempts"] != float64(5+jobWebhookAttempts) {
		t.Fatalf("bounded: %d attempts from %v to %v, delivery %v", len(attempts), first, last, got["delivery"])
	}

	// An endpoint's job shows the endpoint and its URL, signed by its secret; none: null.
	ep := a.mustDo(201, http.MethodPost, "/webhook-endpoints", mgmt, `{"name": "n", "url": "https://hooks.example.com/ep", "events": ["*"]}`)["id"].(string)
	job.Webhook, err = a.g.parseJobWebhook(ctx, caller, store.JobVideo, json.RawMessage(`{"endpoint_id": "`+ep+`", "events": ["video.completed"]}`))
	if err != nil {
		t.Fatal(err)
	}
	job.ID = ids.New("job")
	got = render()
	if got["endpoint_id"] != ep || got["url"] != "https://hooks.example.com/ep" || got["has_secret"] != true ||
		len(got["events"].([]any)) != 1 || len(got["attempts"].([]any)) != 0 {
		t.Fatalf("endpoint job: %v", got)
	}
	job.Webhook = nil
	if v, err := a.g.jobWebhook(ctx, job); v != nil || err != nil {
		t.Fatalf("no webhook: %v, %v", v, err)
	}
}
