package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// testClaimAttempts: a planned Requeue leaves the attempt where it is, a Retry and a lease
// that ran out raise it; the token rises on every claim whatever the attempt.
func testClaimAttempts(t *testing.T, s store.Claims, c *Clock) {
	ctx := context.Background()
	enqueue(t, s, "polls", "job_1", nil, time.Time{})
	var tokens []int64
	take := func(want int) store.ClaimedItem {
		t.Helper()
		got := claim(t, s, "polls", "inst_a", time.Minute, 1)
		if len(got) != 1 || got[0].Attempt != want {
			t.Fatalf("claimed %+v, want attempt %d", got, want)
		}
		if slices.Contains(tokens, got[0].Token) {
			t.Fatalf("token %d given again (%v)", got[0].Token, tokens)
		}
		tokens = append(tokens, got[0].Token)
		return got[0]
	}
	// Polled three times as planned: still the first attempt.
	for range 3 {
		it := take(1)
		next := c.Now().Add(10 * time.Second)
		if err := s.Requeue(ctx, it.Claim, next); err != nil {
			t.Fatalf("Requeue: %v", err)
		}
		wantErr(t, "Complete of a requeued claim", s.Complete(ctx, it.Claim), store.ErrClaimLost)
		wantErr(t, "Requeue twice", s.Requeue(ctx, it.Claim, next), store.ErrClaimLost)
		if got := claim(t, s, "polls", "inst_b", time.Minute, 1); len(got) != 0 {
			t.Fatalf("a requeued item was claimed before its time: %v", claimedIDs(got))
		}
		c.Set(next)
	}
	// A failure counts.
	it := take(1)
	if err := s.Retry(ctx, it.Claim, time.Time{}, "upstream 500"); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	it = take(2)
	if it.LastError != "upstream 500" {
		t.Fatalf("LastError %q", it.LastError)
	}
	// So does a lease that ran out; a Requeue after it does not.
	c.Set(c.Now().Add(2 * time.Minute))
	it = take(3)
	if err := s.Requeue(ctx, it.Claim, time.Time{}); err != nil {
		t.Fatalf("Requeue: %v", err)
	}
	it = take(3)
	if _, err := s.Extend(ctx, it.Claim, time.Minute); err != nil {
		t.Fatalf("Extend: %v", err)
	}
	if err := s.Complete(ctx, it.Claim); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	wantErrAny(t, "Requeue of no claim", s.Requeue(ctx, store.Claim{Queue: "polls", ID: "job_1", Owner: "inst_a"}, time.Time{}))
}

// testClaimRemoveReschedule: items are removed and rescheduled by id, claimed or not; the
// claim that held one is lost.
func testClaimRemoveReschedule(t *testing.T, s store.Claims, c *Clock) {
	ctx := context.Background()
	start := c.Now()
	enqueue(t, s, "polls", "job_1", nil, start.Add(time.Hour))
	enqueue(t, s, "polls", "job_2", nil, time.Time{})
	enqueue(t, s, "other", "job_1", nil, time.Time{})

	// "Poll now": an item due in an hour is due at once, and a held one is due again.
	if err := s.Reschedule(ctx, "polls", "job_1", time.Time{}); err != nil {
		t.Fatalf("Reschedule: %v", err)
	}
	held := claim(t, s, "polls", "inst_a", time.Hour, 10)
	if ids := claimedIDs(held); !slices.Equal(ids, []string{"job_1", "job_2"}) {
		t.Fatalf("claimed %v after Reschedule, want job_1 and job_2", ids)
	}
	later := start.Add(5 * time.Minute)
	if err := s.Reschedule(ctx, "polls", "job_2", later); err != nil {
		t.Fatalf("Reschedule of a held item: %v", err)
	}
	wantErr(t, "Complete of a claim rescheduled away", s.Complete(ctx, held[1].Claim), store.ErrClaimLost)
	if got := claim(t, s, "polls", "inst_b", time.Hour, 10); len(got) != 0 {
		t.Fatalf("claimed %v before the rescheduled time", claimedIDs(got))
	}
	c.Set(later)
	again := claim(t, s, "polls", "inst_b", time.Hour, 10)
	if len(again) != 1 || again[0].ID != "job_2" || again[0].Attempt != 1 {
		t.Fatalf("claimed %+v at the rescheduled time, want job_2 on its first attempt", again)
	}

	// Remove takes an item out, held or not, and only from its queue.
	if err := s.Remove(ctx, "polls", "job_1"); err != nil {
		t.Fatalf("Remove of a held item: %v", err)
	}
	wantErr(t, "Extend of a removed item", func() error { _, err := s.Extend(ctx, held[0].Claim, time.Minute); return err }(), store.ErrClaimLost)
	wantErr(t, "Remove twice", s.Remove(ctx, "polls", "job_1"), store.ErrNotFound)
	wantErr(t, "Reschedule of a removed item", s.Reschedule(ctx, "polls", "job_1", time.Time{}), store.ErrNotFound)
	wantErr(t, "Reschedule of an unknown item", s.Reschedule(ctx, "nowhere", "job_9", time.Time{}), store.ErrNotFound)
	if got := claim(t, s, "other", "inst_a", time.Minute, 10); !slices.Equal(claimedIDs(got), []string{"job_1"}) {
		t.Fatalf("the other queue's job_1: claimed %v", claimedIDs(got))
	}
	wantErrAny(t, "Remove without a queue", s.Remove(ctx, "", "job_1"))
	wantErrAny(t, "Reschedule without an id", s.Reschedule(ctx, "polls", "", time.Time{}))
}

// testClaimGroupCap: a claim with a group cap takes at most that many items of a group,
// counting those leased already, and the items of other groups and of none beside them.
func testClaimGroupCap(t *testing.T, s store.Claims, c *Clock) {
	ctx := context.Background()
	start := c.Now()
	add := func(id, group string, at time.Duration) {
		t.Helper()
		p := store.EnqueueParams{Queue: "rows", ID: id, Group: group, RunAt: start.Add(at)}
		if err := s.Enqueue(ctx, p); err != nil {
			t.Fatalf("Enqueue(%s): %v", id, err)
		}
	}
	// The big batch's five rows are due first: uncapped, they would take every slot.
	for i := range 5 {
		add(fmt.Sprintf("big_%d", i), "batch_big", time.Duration(i-10)*time.Second)
	}
	add("small_0", "batch_small", -3*time.Second)
	add("small_1", "batch_small", -2*time.Second)
	add("loose", "", -time.Second)
	capped := func(owner string, limit int) []store.ClaimedItem {
		t.Helper()
		got, err := s.Claim(ctx, store.ClaimParams{Queue: "rows", Owner: owner, Lease: time.Minute, Limit: limit, GroupCap: 2})
		if err != nil {
			t.Fatalf("Claim: %v", err)
		}
		return got
	}
	got := capped("inst_a", 10)
	if ids := claimedIDs(got); !slices.Equal(ids, []string{"big_0", "big_1", "small_0", "small_1", "loose"}) {
		t.Fatalf("capped claim %v, want two of each batch and the loose item", ids)
	}
	if got[0].Group != "batch_big" || got[4].Group != "" {
		t.Fatalf("groups %q and %q", got[0].Group, got[4].Group)
	}
	// The cap counts what is leased: nothing more of the big batch until one ends.
	if again := capped("inst_b", 10); len(again) != 0 {
		t.Fatalf("claimed %v while the big batch has two leased", claimedIDs(again))
	}
	if err := s.Complete(ctx, got[0].Claim); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if again := capped("inst_b", 10); !slices.Equal(claimedIDs(again), []string{"big_2"}) {
		t.Fatalf("after one ended, claimed %v, want big_2 alone", claimedIDs(again))
	}
	// Leases that ran out free their places; the rows never claimed have been due longest.
	c.Set(start.Add(2 * time.Minute))
	if again := capped("inst_c", 10); !slices.Equal(claimedIDs(again), []string{"big_3", "big_4", "loose", "small_0", "small_1"}) {
		t.Fatalf("after the leases ran out, claimed %v", claimedIDs(again))
	}
	// Without a cap, a claim takes whatever is due.
	c.Set(start.Add(4 * time.Minute))
	if all := claim(t, s, "rows", "inst_d", time.Minute, 10); len(all) != 7 {
		t.Fatalf("uncapped claim %v, want the seven items left", claimedIDs(all))
	}
}
