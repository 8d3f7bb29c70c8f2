package jobs

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

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
	// No webhook, or one that does not read, makes no event.
	for _, w := range []string{``, `null`, `{"endpoint_id":""}`, `{"endpoint_id":`} {
		j.Webhook = json.RawMessage(w)
		if evs := hook(j, "completed"); len(evs) != 0 {
			t.Fatalf("webhook %q made %+v", w, evs)
		}
	}
}
