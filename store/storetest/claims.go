package storetest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

func enqueue(t *testing.T, s store.Claims, queue, id string, payload []byte, runAt time.Time) {
	t.Helper()
	if err := s.Enqueue(context.Background(), store.EnqueueParams{Queue: queue, ID: id, Payload: payload, RunAt: runAt}); err != nil {
		t.Fatalf("Enqueue(%s, %s): %v", queue, id, err)
	}
}

func claim(t *testing.T, s store.Claims, queue, owner string, lease time.Duration, limit int) []store.ClaimedItem {
	t.Helper()
	items, err := s.Claim(context.Background(), store.ClaimParams{Queue: queue, Owner: owner, Lease: lease, Limit: limit})
	if err != nil {
		t.Fatalf("Claim(%s, %s): %v", queue, owner, err)
	}
	return items
}

func claimedIDs(items []store.ClaimedItem) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, it.ID)
	}
	return out
}

// testClaims: what Enqueue and Claim hand out, in what order, and what they refuse.
func testClaims(t *testing.T, s store.Claims, c *Clock) {
	ctx := context.Background()
	now := c.Now()
	enqueue(t, s, "videos", "job_b", []byte(`{"n":2}`), now.Add(-time.Minute))
	enqueue(t, s, "videos", "job_a", []byte(`{"n":1}`), now.Add(-2*time.Minute))
	enqueue(t, s, "videos", "job_later", nil, now.Add(time.Hour))
	enqueue(t, s, "videos", "job_now", nil, time.Time{})
	enqueue(t, s, "webhooks", "dlv_1", []byte("x"), time.Time{})
	wantErr(t, "Enqueue of an id already queued", s.Enqueue(ctx, store.EnqueueParams{Queue: "videos", ID: "job_a"}), store.ErrConflict)

	got := claim(t, s, "videos", "inst_1", time.Minute, 2)
	if ids := claimedIDs(got); !slices.Equal(ids, []string{"job_a", "job_b"}) {
		t.Fatalf("first claim %v, want the two longest due, job_a then job_b", ids)
	}
	a := got[0]
	if a.Queue != "videos" || a.Owner != "inst_1" || a.Attempt != 1 || !bytes.Equal(a.Payload, []byte(`{"n":1}`)) ||
		a.LastError != "" || !a.LeaseExpires.Equal(now.Add(time.Minute)) || !a.EnqueuedAt.Equal(now) {
		t.Fatalf("claimed %+v", a)
	}
	isUTC(t, "LeaseExpires", a.LeaseExpires)
	isUTC(t, "EnqueuedAt", a.EnqueuedAt)

	// What is leased, or not due yet, or of another queue, is not handed out again.
	got = claim(t, s, "videos", "inst_2", time.Minute, 10)
	if ids := claimedIDs(got); !slices.Equal(ids, []string{"job_now"}) || len(got[0].Payload) != 0 {
		t.Fatalf("second claim %v (%+v), want job_now alone, with an empty payload", ids, got)
	}
	if got := claim(t, s, "videos", "inst_3", time.Minute, 10); len(got) != 0 {
		t.Fatalf("third claim %v, want nothing", claimedIDs(got))
	}
	if got := claim(t, s, "webhooks", "inst_3", time.Minute, 10); !slices.Equal(claimedIDs(got), []string{"dlv_1"}) {
		t.Fatalf("webhooks claim %v, want dlv_1", claimedIDs(got))
	}
	if got := claim(t, s, "nothing", "inst_3", time.Minute, 10); len(got) != 0 {
		t.Fatalf("claim of an empty queue %v", claimedIDs(got))
	}

	bad := []struct {
		name string
		call func() error
	}{
		{"Enqueue without a queue", func() error { return s.Enqueue(ctx, store.EnqueueParams{ID: "x"}) }},
		{"Enqueue without an id", func() error { return s.Enqueue(ctx, store.EnqueueParams{Queue: "q"}) }},
		{"Claim without an owner", func() error {
			_, err := s.Claim(ctx, store.ClaimParams{Queue: "videos", Lease: time.Minute, Limit: 1})
			return err
		}},
		{"Claim without a lease", func() error {
			_, err := s.Claim(ctx, store.ClaimParams{Queue: "videos", Owner: "o", Limit: 1})
			return err
		}},
		{"Claim of no items", func() error {
			_, err := s.Claim(ctx, store.ClaimParams{Queue: "videos", Owner: "o", Lease: time.Minute})
			return err
		}},
		{"Extend without a lease", func() error { _, err := s.Extend(ctx, a.Claim, 0); return err }},
		{"Complete of no claim", func() error { return s.Complete(ctx, store.Claim{Queue: "videos", ID: "job_a"}) }},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) { wantErrAny(t, tc.name, tc.call()) })
	}
}

// testClaimLifecycle: Extend keeps an item from others, an expired lease is claimed again
// (and its old claim is lost), Retry reschedules, Complete removes.
func testClaimLifecycle(t *testing.T, s store.Claims, c *Clock) {
	ctx := context.Background()
	start := c.Now()
	enqueue(t, s, "jobs", "job_1", []byte("p"), time.Time{})
	first := claim(t, s, "jobs", "inst_a", time.Minute, 1)
	if len(first) != 1 {
		t.Fatalf("claimed %v", claimedIDs(first))
	}
	held := first[0].Claim

	// Extended before it expires, the lease runs from the extension.
	c.Set(start.Add(50 * time.Second))
	until, err := s.Extend(ctx, held, time.Minute)
	if err != nil || !until.Equal(start.Add(110*time.Second)) {
		t.Fatalf("Extend = %v, %v; want %v", until, err, start.Add(110*time.Second))
	}
	c.Set(start.Add(100 * time.Second))
	if got := claim(t, s, "jobs", "inst_b", time.Minute, 1); len(got) != 0 {
		t.Fatalf("an extended lease was claimed by another: %v", claimedIDs(got))
	}

	// Expired, it is claimed again, and the first claim is lost.
	c.Set(start.Add(111 * time.Second))
	second := claim(t, s, "jobs", "inst_b", time.Minute, 1)
	if len(second) != 1 || second[0].ID != "job_1" || second[0].Attempt != 2 || second[0].Owner != "inst_b" || string(second[0].Payload) != "p" {
		t.Fatalf("after the lease expired, claimed %+v", second)
	}
	_, err = s.Extend(ctx, held, time.Minute)
	wantErr(t, "Extend of a claim taken over", err, store.ErrClaimLost)
	wantErr(t, "Complete of a claim taken over", s.Complete(ctx, held), store.ErrClaimLost)
	wantErr(t, "Retry of a claim taken over", s.Retry(ctx, held, time.Time{}, "late"), store.ErrClaimLost)
	// Even by the same owner: the token tells the claims apart.
	c.Set(start.Add(200 * time.Second))
	third := claim(t, s, "jobs", "inst_b", time.Minute, 1)
	if len(third) != 1 || third[0].Attempt != 3 || third[0].Token == second[0].Token {
		t.Fatalf("third claim %+v", third)
	}
	wantErr(t, "Complete of the same owner's earlier claim", s.Complete(ctx, second[0].Claim), store.ErrClaimLost)

	// Retry makes it due at the time asked for, with the reason.
	retryAt := c.Now().Add(10 * time.Minute)
	if err := s.Retry(ctx, third[0].Claim, retryAt, "upstream 503"); err != nil {
		t.Fatalf("Retry: %v", err)
	}
	wantErr(t, "Complete of a retried claim", s.Complete(ctx, third[0].Claim), store.ErrClaimLost)
	c.Set(retryAt.Add(-time.Millisecond))
	if got := claim(t, s, "jobs", "inst_c", time.Minute, 1); len(got) != 0 {
		t.Fatalf("a retried item was claimed before its time: %v", claimedIDs(got))
	}
	c.Set(retryAt)
	fourth := claim(t, s, "jobs", "inst_c", time.Minute, 1)
	if len(fourth) != 1 || fourth[0].Attempt != 4 || fourth[0].LastError != "upstream 503" || !fourth[0].EnqueuedAt.Equal(start) {
		t.Fatalf("after Retry, claimed %+v", fourth)
	}

	// Complete removes it: nothing is due ever after, and the id may be queued again.
	if err := s.Complete(ctx, fourth[0].Claim); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	wantErr(t, "Complete twice", s.Complete(ctx, fourth[0].Claim), store.ErrClaimLost)
	c.Set(start.Add(24 * time.Hour))
	if got := claim(t, s, "jobs", "inst_c", time.Minute, 10); len(got) != 0 {
		t.Fatalf("a completed item was claimed: %v", claimedIDs(got))
	}
	enqueue(t, s, "jobs", "job_1", nil, time.Time{})
	if got := claim(t, s, "jobs", "inst_c", time.Minute, 10); len(got) != 1 || got[0].Attempt != 1 {
		t.Fatalf("the id queued again: %+v", got)
	}
}

// testConcurrentClaims runs claimers against one queue at once, on one store.
func testConcurrentClaims(t *testing.T, s store.Claims) {
	ClaimersNeverShare(t, s, s)
}

// ClaimersNeverShare enqueues many items through a, then claims them from a and b at once,
// several claimers on each, under leases longer than the test: every item is claimed
// exactly once, and so never held by two claimers. a and b may be one store, or two
// stores over one database (two gateway instances).
func ClaimersNeverShare(t *testing.T, a, b store.Claims) {
	ctx := context.Background()
	const items, claimers = 300, 8
	queue := fmt.Sprintf("shared_%d", time.Now().UnixNano())
	for i := range items {
		enqueue(t, a, queue, fmt.Sprintf("item_%03d", i), []byte{byte(i)}, time.Time{})
	}
	var mu sync.Mutex
	holders := map[string]string{}
	var wg sync.WaitGroup
	for w := range claimers {
		s := a
		if w%2 == 1 {
			s = b
		}
		owner := fmt.Sprintf("claimer_%d", w)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				got, err := s.Claim(ctx, store.ClaimParams{Queue: queue, Owner: owner, Lease: time.Hour, Limit: 1 + w%5})
				if err != nil {
					t.Errorf("%s: Claim: %v", owner, err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, it := range got {
					if prev, ok := holders[it.ID]; ok {
						t.Errorf("%s claimed %s, which %s holds", owner, it.ID, prev)
					}
					holders[it.ID] = owner
				}
				mu.Unlock()
				// Half the claimers finish their items as they go, half keep holding them.
				if w%2 == 0 {
					for _, it := range got {
						if err := s.Complete(ctx, it.Claim); err != nil {
							t.Errorf("%s: Complete(%s): %v", owner, it.ID, err)
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	if len(holders) != items {
		t.Fatalf("%d items claimed, want all %d", len(holders), items)
	}
}

// testClaimLeaseExpiry lets a short lease run out on the store's own clock (the database
// server's, on PostgreSQL): the item is claimed again.
func testClaimLeaseExpiry(t *testing.T, s store.Claims) {
	enqueue(t, s, "jobs", "job_1", nil, time.Time{})
	first := claim(t, s, "jobs", "inst_a", 50*time.Millisecond, 1)
	if len(first) != 1 {
		t.Fatalf("claimed %v", claimedIDs(first))
	}
	if got := claim(t, s, "jobs", "inst_b", time.Minute, 1); len(got) != 0 {
		t.Fatalf("a leased item was claimed again at once: %v", claimedIDs(got))
	}
	time.Sleep(100 * time.Millisecond)
	second := claim(t, s, "jobs", "inst_b", time.Minute, 1)
	if len(second) != 1 || second[0].Attempt != 2 {
		t.Fatalf("after the lease ran out, claimed %+v", second)
	}
	wantErr(t, "Complete of the expired claim", s.Complete(context.Background(), first[0].Claim), store.ErrClaimLost)
}
