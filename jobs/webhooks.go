package jobs

import (
	"encoding/json"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// WebhookConfig is a job's webhook configuration (store.Job.Webhook): the webhook
// endpoint its events go to, or a receiver URL of its own with its sealed secret, and the
// event types it wants (empty: all of them).
type WebhookConfig = delivery.JobWebhook

// Event is the body of a webhook event: the Standard Webhooks envelope (type, timestamp,
// data) with the id and created_at of OpenAI's events, so that receivers written for
// either read it.
type Event struct {
	ID     string `json:"id"`
	Object string `json:"object"`
	Type   string `json:"type"`
	// CreatedAt is Unix seconds, Timestamp the same instant in RFC 3339.
	CreatedAt int64     `json:"created_at"`
	Timestamp string    `json:"timestamp"`
	Data      EventData `json:"data"`
}

// EventData is what an event tells of its job: its public fields.
type EventData struct {
	ID          string      `json:"id"`
	Object      string      `json:"object"`
	Status      string      `json:"status"`
	Progress    int         `json:"progress"`
	Model       string      `json:"model"`
	CreatedAt   int64       `json:"created_at"`
	CompletedAt *int64      `json:"completed_at"`
	Error       *EventError `json:"error"`
}

// EventError is a failed job's error.
type EventError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// EventType is the type of the event of a job of kind reaching phase: video.completed...
func EventType(kind, phase string) string { return kind + "." + phase }

// WebhookEvents returns the Engine.Events hook for jobs with a webhook: one event per
// change the job's configuration asks for, to its endpoint or its own URL. An endpoint's
// own subscription is applied when the event is sent, so that an endpoint's events changed
// after the job was made still count. A configuration that does not read is logged and
// makes no event: the change it came with must still be written.
func WebhookEvents(log *zap.Logger, now func() time.Time) func(j store.Job, phase string) []store.Event {
	if now == nil {
		now = time.Now
	}
	return func(j store.Job, phase string) []store.Event {
		cfg, ok, err := delivery.ReadJobWebhook(j.Webhook)
		if err != nil {
			log.Error("a job's webhook configuration does not read; no event made",
				zap.String("job_id", j.ID), zap.Error(err))
			return nil
		}
		typ := EventType(j.Kind, phase)
		target := cfg.DeliveryTarget()
		if !ok || target == "" || (len(cfg.Events) > 0 && !slices.Contains(cfg.Events, "*") && !slices.Contains(cfg.Events, typ)) {
			return nil
		}
		at := now().UTC()
		ev := Event{
			ID: ids.New("evt"), Object: "event", Type: typ, CreatedAt: at.Unix(), Timestamp: at.Format(time.RFC3339),
			Data: PublicData(j),
		}
		payload, err := json.Marshal(ev)
		if err != nil {
			log.Error("a job's event does not encode; no event made", zap.String("job_id", j.ID), zap.Error(err))
			return nil
		}
		return []store.Event{{ID: ev.ID, Type: typ, Target: target, Payload: payload}}
	}
}

// PublicData is the public view of job j that its events carry, and that a kind whose
// family shows no object of its own shows (handlers' live updates).
func PublicData(j store.Job) EventData {
	d := EventData{
		ID: j.ID, Object: j.Kind, Status: PublicStatus(j.Kind, j.Status), Progress: j.Progress, Model: j.Model,
		CreatedAt: j.CreatedAt.Unix(),
	}
	if !j.CompletedAt.IsZero() {
		d.CompletedAt = ptr(j.CompletedAt.Unix())
	}
	if j.ErrorCode != "" || j.ErrorMessage != "" {
		d.Error = &EventError{Code: j.ErrorCode, Message: j.ErrorMessage}
	}
	return d
}

// LifecycleStatus is the lifecycle_status a job of status shows beside its public status:
// pending, running, completed, failed, cancelled or expired (DESIGN's finer states, which
// tell a cancelled or expired job from a failed one).
func LifecycleStatus(status string) string {
	switch status {
	case StatusQueued:
		return "pending"
	case StatusInProgress:
		return "running"
	}
	return status
}

// PublicStatus is the status a job of kind shows: videos and music show only queued,
// in_progress, completed and failed (openai-go's poll helper errors on anything else), so a
// cancelled or expired one shows failed; other kinds show their own.
func PublicStatus(kind, status string) string {
	if (kind == store.JobVideo || kind == store.JobMusic) && (status == StatusCancelled || status == StatusExpired) {
		return StatusFailed
	}
	return status
}
