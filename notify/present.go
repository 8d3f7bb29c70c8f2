package notify

import "time"

// severity is how urgent an event is, which the kinds that can colour a message show.
type severity int

const (
	severityInfo severity = iota
	severityWarning
	severityError
)

// eventSeverity is the severity of event: a warning asks for attention before something
// stops (a low balance, a key at its limit), an error says something already failed.
func eventSeverity(event string) severity {
	switch event {
	case EventBalanceLow, EventKeyLimitReached:
		return severityWarning
	case EventWebhookEndpointDisabled, EventBatchFailed, EventVideoFailed:
		return severityError
	}
	return severityInfo
}

// eventLabels name the events for people, where a message shows what kind of event it is.
var eventLabels = map[string]string{
	EventBalanceLow:              "Low balance",
	EventKeyLimitReached:         "Key spending limit reached",
	EventWebhookEndpointDisabled: "Webhook endpoint disabled",
	EventBatchFailed:             "Batch failed",
	EventVideoFailed:             "Video failed",
	EventTest:                    "Test notification",
}

// eventLabel names event for people; an event this build has no name for shows as is.
func eventLabel(event string) string {
	if l, ok := eventLabels[event]; ok {
		return l
	}
	return event
}

// occurredAt is when n happened, for display: its time, or now for a notification that
// sets none, always in UTC.
func occurredAt(n Notification) time.Time {
	if n.OccurredAt.IsZero() {
		return time.Now().UTC()
	}
	return n.OccurredAt.UTC()
}

// titleOf is n's title, or its event's name when it has none: every kind shows a title.
func titleOf(n Notification) string {
	if n.Title != "" {
		return n.Title
	}
	return eventLabel(n.Event)
}
