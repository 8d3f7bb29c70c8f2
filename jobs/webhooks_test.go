package jobs

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

func TestWebhookEvents(t *testing.T) {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	hook := WebhookEvents(zap.NewNop(), func() time.Time { return at })
	j := store.Job{
		ID: "video_1", WorkspaceID: "ws_1", Kind: store.JobVideo, Model: "acme/video-1", Status: StatusExpired,
		Progress: 40, CreatedAt: at.Add(-time.Hour), CompletedAt: at,
		ErrorCode: "job_expired", ErrorMessage: "too late",
		Webhook: json.RawMessage(`{"endpoint_id":"we_1","events":["video.expired","video.completed"]}`),
	}

	evs := hook(j, "expired")
	if len(evs) != 1 {
		t.Fatalf("events = %+v, want one", evs)
	}
	ev := evs[0]
	if err := ev.Validate(); err != nil || !strings.HasPrefix(ev.ID, "evt_") || len(ev.ID) != len("evt_")+26 ||
		ev.Type != "video.expired" || ev.Target != "we_1" {
		t.Fatalf("event %+v (%v)", ev, err)
	}
	var body map[string]any
	if err := json.Unmarshal(ev.Payload, &body); err != nil {
		t.Fatal(err)
	}
	want := `{"created_at":1795946400,"data":{"completed_at":1795946400,"created_at":1795942800,` +
		`"error":{"code":"job_expired","message":"too late"},"id":"video_1","model":"acme/video-1",` +
		`"object":"video","progress":40,"status":"failed"},"id":"` + ev.ID + `","object":"event",` +
		`"timestamp":"2026-11-29T10:00:00Z","type":"video.expired"}`
	if got, _ := json.Marshal(body); string(got) != want {
		t.Fatalf("payload\n got %s\nwant %s", got, want)
	}
	if again := hook(j, "expired"); again[0].ID == ev.ID {
		t.Fatal("two events share an id")
	}

	// The job's filter: a phase it does not ask for makes nothing; no filter means all.
	if evs := hook(j, "progress"); len(evs) != 0 {
		t.Fatalf("unsubscribed phase made %+v", evs)
	}
	j.Webhook = json.RawMessage(`{"endpoint_id":"we_1"}`)
	if evs := hook(j, "progress"); len(evs) != 1 || evs[0].Type != "video.progress" {
		t.Fatalf("no filter: %+v", evs)
	}
	// A job's own URL: its events go to its target, whatever the kind; "*" takes them all.
	j.Webhook = json.RawMessage(`{"url":"https://hooks.example.com/x","target":"whurl_1","secret":"AQID","events":["*"]}`)
	if evs := hook(j, "progress"); len(evs) != 1 || evs[0].Target != "whurl_1" || evs[0].Type != "video.progress" {
		t.Fatalf("inline url: %+v", evs)
	}
	// No webhook, or one that does not read, makes no event.
	for _, w := range []string{``, `null`, `{"endpoint_id":""}`, `{"endpoint_id":`, `{"url":"https://hooks.example.com/x"}`} {
		j.Webhook = json.RawMessage(w)
		if evs := hook(j, "completed"); len(evs) != 0 {
			t.Fatalf("webhook %q made %+v", w, evs)
		}
	}
}

// TestEngineEnqueuesWebhookEvents: the engine's changes of a job with a webhook fill the
// outbox, each event telling of the job as the change left it.
func TestEngineEnqueuesWebhookEvents(t *testing.T) {
	f := newFixture(t)
	f.e.Events = WebhookEvents(zap.NewNop(), nil)
	id := ids.New("video")
	testKind.mu.Lock()
	testKind.script[id] = []step{running, finished}
	testKind.mu.Unlock()
	_, err := f.e.Submit(context.Background(), Submission{
		Job: store.Job{ID: id, WorkspaceID: f.ws, Kind: "enginetest", KeyID: f.kd, Model: "video", Provider: "up",
			UpstreamModel: "vid-1", ExpiresAt: time.Now().Add(time.Hour),
			Webhook: json.RawMessage(`{"endpoint_id":"we_1","events":["enginetest.status_changed","enginetest.completed"]}`)},
		Most: usd, Endpoint: "/videos",
		Start: func(context.Context) (string, Report, error) {
			return "native", Report{Status: StatusQueued, PollAfter: time.Millisecond}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	for f.pollDue() > 0 {
	}
	items, err := f.s.Claim(context.Background(), store.ClaimParams{Queue: store.DeliveryQueue, Owner: "t", Lease: time.Minute, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]EventData{}
	for _, it := range items {
		d, err := store.DeliveryOf(it)
		if err != nil {
			t.Fatal(err)
		}
		var ev Event
		if err := json.Unmarshal(d.Payload, &ev); err != nil || ev.ID != d.ID || ev.Type != d.EventType || d.Target != "we_1" || d.JobID != id {
			t.Fatalf("delivery %+v: event %+v, %v", d, ev, err)
		}
		got[ev.Type] = ev.Data
	}
	if len(got) != 2 {
		t.Fatalf("events %+v, want status_changed and completed (progress is filtered out)", got)
	}
	if d := got["enginetest.status_changed"]; d.Status != StatusInProgress || d.Progress != 40 || d.CompletedAt != nil {
		t.Fatalf("status_changed tells of %+v, want the job in progress at 40%%", d)
	}
	if d := got["enginetest.completed"]; d.Status != StatusCompleted || d.Progress != 100 || d.CompletedAt == nil {
		t.Fatalf("completed tells of %+v, want the job completed", d)
	}
}
