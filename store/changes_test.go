package store

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// A watcher that reads nothing never holds up Publish, and keeps the newest changes.
func TestChangeHubDropsOldest(t *testing.T) {
	var h ChangeHub
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	slow, err := h.Watch(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const n = ChangeBuffer + 10
	published := make(chan struct{})
	go func() {
		for i := range n {
			h.Publish(JobChange{JobID: fmt.Sprint(i)})
		}
		close(published)
	}()
	select {
	case <-published:
	case <-time.After(10 * time.Second):
		t.Fatal("Publish waited for a watcher that reads nothing")
	}
	for i := n - ChangeBuffer; i < n; i++ {
		if c := <-slow; c.JobID != fmt.Sprint(i) {
			t.Fatalf("the slow watcher saw %s, want %d: the newest %d changes in order", c.JobID, i, ChangeBuffer)
		}
	}
	cancel()
	select {
	case _, open := <-slow:
		if open {
			t.Fatal("a change after the watcher's context ended")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the channel stayed open after its context ended")
	}
}

func TestChangeHubClose(t *testing.T) {
	var h ChangeHub
	ch, err := h.Watch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	if _, open := <-ch; open {
		t.Fatal("the channel stayed open after Close")
	}
	h.Publish(JobChange{JobID: "after"})
	if _, err := h.Watch(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Watch after Close = %v, want ErrClosed", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var open ChangeHub
	if _, err := open.Watch(ctx); err == nil {
		t.Fatal("Watch with an ended context succeeded")
	}
}

// Every column JobUpdate sets is a column of the jobs table, and every kind of value it
// sets is one backends convert.
func TestJobUpdateSets(t *testing.T) {
	s, n, tm := "x", 1, time.Date(2025, 1, 1, 0, 0, 0, 1_500_000, time.FixedZone("x", 3600))
	raw := []byte(`{}`)
	u := JobUpdate{NativeID: &s, Status: &s, Lifecycle: &s, Progress: &n, Usage: raw, ReservationID: &s, Webhook: raw,
		Delivery: raw, Result: raw, ErrorCode: &s, ErrorMessage: &s, CompletedAt: &tm, ExpiresAt: &tm}
	sets := u.Sets()
	if len(sets) != 13 {
		t.Fatalf("%d columns set, want every one of the 13 fields", len(sets))
	}
	var j Job
	for _, set := range sets {
		found := false
		for _, f := range JobFields {
			if f.Column == set.Column {
				found = true
				if fmt.Sprintf("%T", f.Addr(&j)) != fmt.Sprintf("%T", set.Value) {
					t.Errorf("%s set as %T, stored as %T", set.Column, set.Value, f.Addr(&j))
				}
			}
		}
		if !found {
			t.Errorf("%s is not a column of jobs", set.Column)
		}
		if p, ok := set.Value.(*time.Time); ok && (p.Location() != time.UTC || p.Nanosecond() != 1_000_000) {
			t.Errorf("%s = %v, want UTC at the millisecond", set.Column, *p)
		}
	}
	if len((&JobUpdate{}).Sets()) != 0 {
		t.Fatal("an empty update sets columns")
	}
}

func TestValidateAttempt(t *testing.T) {
	c := Claim{Queue: DeliveryQueue, ID: "evt", Owner: "o", Token: 1}
	now := func() time.Time { return time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC) }
	a, err := ValidateAttempt(c, DeliveryAttempt{ResponsePreview: "ab" + string(make([]byte, MaxResponsePreview)) + "€"}, time.Time{}, now)
	if err != nil || len(a.ResponsePreview) != MaxResponsePreview || !a.At.Equal(now()) || !a.NextAt.IsZero() {
		t.Fatalf("ValidateAttempt = %+v, %v", a, err)
	}
	long := "é€" + string(make([]byte, MaxResponsePreview))
	if a, _ := ValidateAttempt(c, DeliveryAttempt{ResponsePreview: "x" + long}, time.Time{}, now); len(a.ResponsePreview) > MaxResponsePreview {
		t.Fatalf("preview of %d bytes", len(a.ResponsePreview))
	}
	if got := cutUTF8("a€", 2); got != "a" {
		t.Fatalf("cutUTF8 split a rune: %q", got)
	}
	if _, err := ValidateAttempt(c, DeliveryAttempt{Delivered: true}, now().Add(time.Minute), now); err == nil {
		t.Fatal("a delivered attempt with a next one is valid")
	}
	if _, err := ValidateAttempt(Claim{}, DeliveryAttempt{}, time.Time{}, now); err == nil {
		t.Fatal("an attempt of no claim is valid")
	}
	if got := FinalStatus(DeliveryAttempt{NextAt: now()}); got != DeliveryPending {
		t.Fatalf("FinalStatus of a retried attempt = %q", got)
	}
	if got := FinalStatus(DeliveryAttempt{Delivered: true}); got != DeliveryDelivered {
		t.Fatalf("FinalStatus of a delivered attempt = %q", got)
	}
	if got := FinalStatus(DeliveryAttempt{}); got != DeliveryFailed {
		t.Fatalf("FinalStatus of a last failure = %q", got)
	}
}
