package notify

import (
	"fmt"
	"strconv"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// The notifications of each event, as every kind renders them, and the key that names one
// occurrence of each (Outbox.Emit), so that one occurrence is told once however many
// times its hook sees it.

// LowBalanceCooldown is how long after a low-balance alert the same workspace, still
// below its threshold, is told again; a balance back at or above the threshold arms it at
// once.
const LowBalanceCooldown = 6 * time.Hour

// LowBalance is the notification of a workspace's balance found below its threshold.
func LowBalance(lb store.LowBalance) (Notification, string) {
	return Notification{
		Event: EventBalanceLow, WorkspaceID: lb.WorkspaceID, OccurredAt: lb.FiredAt,
		Title: "Balance below " + pricing.FormatUSD(lb.ThresholdNanos) + " USD",
		Text: fmt.Sprintf("The balance of workspace %s is %s USD, below the threshold of %s USD set for it. Requests are refused once it runs out: top up the wallet (POST /credits).",
			lb.WorkspaceID, pricing.FormatUSD(lb.BalanceNanos), pricing.FormatUSD(lb.ThresholdNanos)),
		Fields: []Field{
			{"Workspace", lb.WorkspaceID},
			{"Balance", pricing.FormatUSD(lb.BalanceNanos) + " USD"},
			{"Threshold", pricing.FormatUSD(lb.ThresholdNanos) + " USD"},
		},
	}, "balance.low/" + lb.WorkspaceID + "/" + strconv.FormatInt(lb.FiredAt.UnixMilli(), 10)
}

// KeyLimitReached is the notification of a request refused because key k reached its
// spending limit (le the refusal). One limit period is told once.
func KeyLimitReached(k store.Key, le *store.KeyLimitError, at time.Time) (Notification, string) {
	period := "in total"
	if le.LimitReset != "" {
		period = "this " + map[string]string{store.ResetDaily: "day", store.ResetWeekly: "week", store.ResetMonthly: "month"}[le.LimitReset]
	}
	n := Notification{
		Event: EventKeyLimitReached, WorkspaceID: k.WorkspaceID, OccurredAt: at,
		Title: fmt.Sprintf("API key %q reached its spending limit", k.Name),
		Text: fmt.Sprintf("A request with API key %q (%s) was refused: the key has spent %s USD %s of its limit of %s USD, and its requests are refused until the limit resets or is raised (PATCH /keys/{id}).",
			k.Name, k.ID, pricing.FormatUSD(le.SpentNanos), period, pricing.FormatUSD(le.LimitNanos)),
		Fields: []Field{
			{"Key", k.Name + " (" + k.ID + ")"},
			{"Limit", pricing.FormatUSD(le.LimitNanos) + " USD"},
			{"Spent", pricing.FormatUSD(le.SpentNanos) + " USD " + period},
		},
	}
	periodKey := "total"
	if !le.PeriodEnd.IsZero() {
		n.Fields = append(n.Fields, Field{"Resets at", le.PeriodEnd.UTC().Format(time.RFC3339)})
		periodKey = strconv.FormatInt(le.PeriodEnd.Unix(), 10)
	}
	return n, "key.limit_reached/" + k.ID + "/" + periodKey
}

// WebhookEndpointDisabled is the notification of webhook endpoint ep disabled by the
// gateway after its deliveries failed. Its disabling is told once.
func WebhookEndpointDisabled(ep store.WebhookEndpoint) (Notification, string) {
	return Notification{
		Event: EventWebhookEndpointDisabled, WorkspaceID: ep.WorkspaceID, OccurredAt: ep.UpdatedAt,
		Title: fmt.Sprintf("Webhook endpoint %q disabled", ep.Name),
		Text: fmt.Sprintf("The gateway stopped delivering events to webhook endpoint %q (%s): %s. Events for it fail until it is made active again (PATCH /webhook-endpoints/{id} with status active).",
			ep.Name, ep.ID, disabledReason(ep)),
		Fields: []Field{
			{"Endpoint", ep.Name + " (" + ep.ID + ")"},
			{"Reason", ep.DisabledReason},
			{"Consecutive failures", strconv.Itoa(ep.ConsecutiveFailures)},
		},
	}, "webhook_endpoint.disabled/" + ep.ID + "/" + strconv.FormatInt(ep.UpdatedAt.UnixMilli(), 10)
}

func disabledReason(ep store.WebhookEndpoint) string {
	switch ep.DisabledReason {
	case "consecutive_failures":
		return fmt.Sprintf("its last %d deliveries failed", ep.ConsecutiveFailures)
	case "endpoint_gone":
		return "it answered 410 Gone"
	}
	return ep.DisabledReason
}

// JobFailed is the notification of a batch or video job that ended failed; false for any
// other job or change. A job's failure is told once.
func JobFailed(j store.Job) (Notification, string, bool) {
	var event, what string
	switch j.Kind {
	case store.JobBatch:
		event, what = EventBatchFailed, "Batch"
	case store.JobVideo:
		event, what = EventVideoFailed, "Video"
	default:
		return Notification{}, "", false
	}
	if j.Status != "failed" {
		return Notification{}, "", false
	}
	at := j.CompletedAt
	if at.IsZero() {
		at = time.Now().UTC()
	}
	n := Notification{
		Event: event, WorkspaceID: j.WorkspaceID, OccurredAt: at,
		Title: fmt.Sprintf("%s %s failed", what, j.ID),
		Text:  fmt.Sprintf("%s %s (model %s) failed.", what, j.ID, j.Model),
		Fields: []Field{
			{what, j.ID},
			{"Model", j.Model},
		},
	}
	if j.ErrorCode != "" {
		n.Fields = append(n.Fields, Field{"Error code", j.ErrorCode})
	}
	if j.ErrorMessage != "" {
		n.Text = fmt.Sprintf("%s %s (model %s) failed: %s", what, j.ID, j.Model, j.ErrorMessage)
		n.Fields = append(n.Fields, Field{"Error", j.ErrorMessage})
	}
	return n, event + "/" + j.ID, true
}

// Test is the notification a test of destination d sends.
func Test(d store.NotificationDestination, at time.Time) Notification {
	return Notification{
		ID: NewID(), Event: EventTest, WorkspaceID: d.WorkspaceID, OccurredAt: at.UTC(),
		Title: "Test notification from the model gateway",
		Text:  fmt.Sprintf("This is a test of notification destination %q (%s). Notifications routed to it will arrive here.", d.Name, d.ID),
		Fields: []Field{
			{"Destination", d.Name + " (" + d.ID + ")"},
			{"Kind", d.Kind},
		},
	}
}
