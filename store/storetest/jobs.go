package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/ids"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// jsonEqual reports whether a and b are the same JSON (PostgreSQL keeps JSONB, which
// normalises whitespace and key order); nil only equals nil.
func jsonEqual(a, b []byte) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var va, vb any
	return json.Unmarshal(a, &va) == nil && json.Unmarshal(b, &vb) == nil && reflect.DeepEqual(va, vb)
}

// sameJob fails t unless got is want, JSON compared as JSON.
func sameJob(t *testing.T, what string, got, want store.Job) {
	t.Helper()
	for _, f := range store.JobFields {
		g, w := f.Addr(&got), f.Addr(&want)
		switch gp := g.(type) {
		case *json.RawMessage:
			if !jsonEqual(*gp, *w.(*json.RawMessage)) {
				t.Errorf("%s: %s = %s, want %s", what, f.Column, *gp, *w.(*json.RawMessage))
			}
		case *time.Time:
			if wt := *w.(*time.Time); !gp.Equal(wt) || (!gp.IsZero() && gp.Location() != time.UTC) {
				t.Errorf("%s: %s = %v, want %v in UTC", what, f.Column, *gp, wt)
			}
		default:
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%s: %s = %v, want %v", what, f.Column, reflect.ValueOf(g).Elem(), reflect.ValueOf(w).Elem())
			}
		}
	}
}

// testJob is a job of workspace ws with every field set.
func testJob(ws, id string, created time.Time) store.Job {
	return store.Job{
		ID: id, WorkspaceID: ws, Kind: "test_kind", KeyID: "key_1", Model: "acme/video-1",
		Provider: "acme", UpstreamModel: "video-1-2025", NativeID: "", Status: "queued", Lifecycle: "submitted",
		Progress: 0, Usage: json.RawMessage(`{"video_seconds": 8, "resolution": "720p"}`), ReservationID: "res_1", HeldNanos: 4_000_000_000,
		Webhook:  json.RawMessage(`{"url":"https://example.com/hook","events":["video.completed"]}`),
		Delivery: nil, Request: json.RawMessage(`{"prompt":"a cat","seconds":8}`), Result: nil,
		CreatedAt: created, ExpiresAt: created.Add(24 * time.Hour),
	}
}

func createJob(t *testing.T, s store.Jobs, j store.Job, firstPoll time.Time) {
	t.Helper()
	if err := s.CreateJob(context.Background(), j, firstPoll, nil); err != nil {
		t.Fatalf("CreateJob(%s): %v", j.ID, err)
	}
}

func getJob(t *testing.T, s store.Jobs, ws, id string) store.Job {
	t.Helper()
	j, err := s.GetJob(context.Background(), ws, id)
	if err != nil {
		t.Fatalf("GetJob(%s): %v", id, err)
	}
	return j
}

// claimPoll claims the one poll due of kind's queue.
func claimPoll(t *testing.T, s store.Claims, kind, owner string, lease time.Duration) store.ClaimedItem {
	t.Helper()
	got := claim(t, s, store.JobQueue(kind), owner, lease, 10)
	if len(got) != 1 {
		t.Fatalf("claimed %v from %s, want one poll", claimedIDs(got), store.JobQueue(kind))
	}
	return got[0]
}

// testJobs: a job round-trips with its first poll, in its workspace only.
func testJobs(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	start := c.Now()
	ws, other := newWorkspace(t, s, 0), newWorkspace(t, s, 0)
	j := testJob(ws, "job_1", time.Time{})
	createJob(t, s, j, start.Add(5*time.Second))
	j.CreatedAt, j.UpdatedAt = start, start
	sameJob(t, "GetJob", getJob(t, s, ws, "job_1"), j)

	wantErr(t, "GetJob of another workspace", func() error { _, err := s.GetJob(ctx, other, "job_1"); return err }(), store.ErrNotFound)
	wantErr(t, "GetJob of no job", func() error { _, err := s.GetJob(ctx, ws, "job_9"); return err }(), store.ErrNotFound)
	wantErr(t, "CreateJob of an id in use", s.CreateJob(ctx, testJob(other, "job_1", time.Time{}), time.Time{}, nil), store.ErrConflict)
	wantErr(t, "CreateJob in no workspace", s.CreateJob(ctx, testJob("ws_missing", "job_2", time.Time{}), time.Time{}, nil), store.ErrNotFound)
	for name, mutate := range map[string]func(*store.Job){
		"no id":        func(j *store.Job) { j.ID = "" },
		"no workspace": func(j *store.Job) { j.WorkspaceID = "" },
		"no status":    func(j *store.Job) { j.Status = "" },
		"a bad kind":   func(j *store.Job) { j.Kind = "Video!" },
		"bad JSON":     func(j *store.Job) { j.Request = json.RawMessage(`{"prompt"`) },
	} {
		bad := testJob(ws, "job_bad", time.Time{})
		mutate(&bad)
		wantErrAny(t, "CreateJob with "+name, s.CreateJob(ctx, bad, time.Time{}, nil))
	}
	wantErr(t, "GetJob of a refused job", func() error { _, err := s.GetJob(ctx, ws, "job_bad"); return err }(), store.ErrNotFound)

	// The first poll is due when asked, in the kind's queue, grouped by provider, and
	// names the job.
	if got := claim(t, s, store.JobQueue("test_kind"), "inst_a", time.Minute, 10); len(got) != 0 {
		t.Fatalf("the first poll was due early: %v", claimedIDs(got))
	}
	c.Set(start.Add(5 * time.Second))
	poll := claimPoll(t, s, "test_kind", "inst_a", time.Minute)
	gotWS, gotID, err := store.JobOf(poll)
	if poll.ID != "job_1" || poll.Group != "acme" || poll.Attempt != 1 || err != nil || gotWS != ws || gotID != "job_1" {
		t.Fatalf("first poll %+v: JobOf = %q, %q, %v", poll, gotWS, gotID, err)
	}
	// A job created with a time of its own keeps it, and its first poll is due at once.
	c.Set(start.Add(time.Minute))
	k := testJob(ws, "job_2", start.Add(-time.Hour))
	k.Kind, k.Webhook, k.Usage, k.ExpiresAt = store.JobVideo, nil, nil, time.Time{}
	createJob(t, s, k, time.Time{})
	k.UpdatedAt = k.CreatedAt
	sameJob(t, "GetJob of a job created in the past", getJob(t, s, ws, "job_2"), k)
	if poll := claimPoll(t, s, store.JobVideo, "inst_a", time.Minute); poll.ID != "job_2" {
		t.Fatalf("polled %s, want job_2", poll.ID)
	}
}

// testDeleteJob deletes a job of a workspace, with its poll still queued: another
// workspace cannot, and a job deleted is gone from reads, lists and the poll queue.
func testDeleteJob(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	ws, other := newWorkspace(t, s, 0), newWorkspace(t, s, 0)
	createJob(t, s, testJob(ws, "job_del", time.Time{}), c.Now())
	createJob(t, s, testJob(ws, "job_kept", time.Time{}), c.Now().Add(time.Hour))

	wantErr(t, "DeleteJob of another workspace", s.DeleteJob(ctx, other, "job_del"), store.ErrNotFound)
	getJob(t, s, ws, "job_del")
	if err := s.DeleteJob(ctx, ws, "job_del"); err != nil {
		t.Fatalf("DeleteJob: %v", err)
	}
	wantErr(t, "GetJob of a deleted job", func() error { _, err := s.GetJob(ctx, ws, "job_del"); return err }(), store.ErrNotFound)
	wantErr(t, "DeleteJob again", s.DeleteJob(ctx, ws, "job_del"), store.ErrNotFound)
	list, err := s.ListJobs(ctx, store.JobQuery{WorkspaceID: ws})
	if err != nil || len(list) != 1 || list[0].ID != "job_kept" {
		t.Fatalf("ListJobs after a delete = %v, %v; want job_kept alone", list, err)
	}
	// The deleted job's poll went with it; the other job's is still queued.
	c.Set(c.Now().Add(2 * time.Hour))
	if got := claim(t, s, store.JobQueue("test_kind"), "inst_a", time.Minute, 10); len(got) != 1 || got[0].ID != "job_kept" {
		t.Fatalf("polls due after a delete: %v; want job_kept's alone", claimedIDs(got))
	}
}

// testJobPages lists a workspace's jobs a page at a time, newest or oldest first, filtered
// by kind and status.
func testJobPages(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws, other := newWorkspace(t, s, 0), newWorkspace(t, s, 0)
	created := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var all, videos, done, doneMusic []string
	for i := range 30 {
		j := testJob(ws, fmt.Sprintf("job_%02d", 29-i), created.Add(time.Duration(i/3)*time.Second))
		j.Kind = []string{store.JobVideo, store.JobMusic}[i%2]
		j.Status = []string{"queued", "in_progress", "completed"}[i%3]
		createJob(t, s, j, created.Add(time.Hour))
		all = append(all, j.ID)
		if j.Kind == store.JobVideo {
			videos = append(videos, j.ID)
		}
		if j.Status != "queued" {
			done = append(done, j.ID)
			if j.Kind == store.JobMusic {
				doneMusic = append(doneMusic, j.ID)
			}
		}
	}
	createJob(t, s, testJob(other, "job_other", created), time.Time{})
	// Three jobs a second: ids break the ties, whatever order they were created in.
	for _, list := range [][]string{all} {
		for i := 0; i < len(list); i += 3 {
			slices.Sort(list[i : i+3])
		}
	}
	ascending := slices.Clone(all)
	newest := slices.Clone(all)
	slices.Reverse(newest)
	order := func(ids []string) []string { // the same ids, in newest-first order
		var out []string
		for _, id := range newest {
			if slices.Contains(ids, id) {
				out = append(out, id)
			}
		}
		return out
	}
	jobID := func(j store.Job) string { return j.ID }
	for _, tc := range []struct {
		name  string
		q     store.JobQuery
		limit int
		want  []string
	}{
		{"newest first", store.JobQuery{WorkspaceID: ws}, 7, newest},
		{"newest first, asked", store.JobQuery{WorkspaceID: ws, Order: store.NewestFirst}, 100, newest},
		{"oldest first", store.JobQuery{WorkspaceID: ws, Order: store.OldestFirst}, 4, ascending},
		{"videos", store.JobQuery{WorkspaceID: ws, Kind: store.JobVideo}, 4, order(videos)},
		{"two statuses", store.JobQuery{WorkspaceID: ws, Statuses: []string{"in_progress", "completed"}}, 6, order(done)},
		{"kind and statuses", store.JobQuery{WorkspaceID: ws, Kind: store.JobMusic, Statuses: []string{"completed", "in_progress"}}, 3, order(doneMusic)},
		{"an unknown status", store.JobQuery{WorkspaceID: ws, Statuses: []string{"nope"}}, 3, nil},
		{"another workspace", store.JobQuery{WorkspaceID: other}, 3, []string{"job_other"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := walk(t, tc.limit, jobID, func(p store.Page) ([]store.Job, error) {
				q := tc.q
				q.Page = p
				return s.ListJobs(ctx, q)
			})
			if !slices.Equal(got, tc.want) {
				t.Fatalf("listed %v, want %v", got, tc.want)
			}
		})
	}

	// A cursor may be any job of the workspace, in the filter or not (its status changed
	// since the last page), but not another workspace's.
	page, err := s.ListJobs(ctx, store.JobQuery{WorkspaceID: ws, Statuses: []string{"completed"}, Page: store.Page{After: newest[0], Limit: 100}})
	if err != nil || newest[0] == "" {
		t.Fatalf("ListJobs after a job outside the filter: %v", err)
	}
	for _, j := range page {
		if j.Status != "completed" || !j.CreatedAt.Before(getJob(t, s, ws, newest[0]).CreatedAt.Add(time.Millisecond)) {
			t.Fatalf("listed %s (%s, %v) after %s", j.ID, j.Status, j.CreatedAt, newest[0])
		}
	}
	_, err = s.ListJobs(ctx, store.JobQuery{WorkspaceID: ws, Page: store.Page{After: "job_other"}})
	wantErr(t, "ListJobs after another workspace's job", err, store.ErrCursorNotFound)
	_, err = s.ListJobs(ctx, store.JobQuery{WorkspaceID: ws, Order: "sideways"})
	wantErrAny(t, "ListJobs in no order", err)
	_, err = s.ListJobs(ctx, store.JobQuery{})
	wantErrAny(t, "ListJobs of no workspace", err)
}

// testAdvanceJob: AdvanceJob updates the job, writes its events and requeues or completes
// its poll, all or nothing, and only for the claim that holds the poll.
// testUnpolledJobs: only live jobs whose poll is gone are unpolled; a job ended with its
// last poll, or still queued, or claimed, is not.
func testUnpolledJobs(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	start := c.Now()
	ws := newWorkspace(t, s, 0)
	for i, id := range []string{"job_lost_1", "job_queued", "job_ended", "job_claimed", "job_lost_2"} {
		createJob(t, s, testJob(ws, id, start.Add(time.Duration(i)*time.Second)), time.Time{})
	}
	for _, id := range []string{"job_lost_2", "job_lost_1"} {
		if err := s.Remove(ctx, store.JobQueue("test_kind"), id); err != nil {
			t.Fatalf("Remove(%s): %v", id, err)
		}
	}
	// Due at once, claimed in id order: job_claimed stays claimed, job_ended ends with its
	// poll, job_queued is queued again.
	got := claim(t, s, store.JobQueue("test_kind"), "inst_a", time.Minute, 10)
	if len(got) != 3 || got[0].ID != "job_claimed" || got[1].ID != "job_ended" || got[2].ID != "job_queued" {
		t.Fatalf("claimed %v; want job_claimed, job_ended and job_queued", claimedIDs(got))
	}
	done, at := "completed", start.Add(time.Minute)
	if err := s.AdvanceJob(ctx, got[1].Claim, store.JobUpdate{Status: &done, CompletedAt: &at}, nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Requeue(ctx, got[2].Claim, start.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}

	unpolled, err := s.UnpolledJobs(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, j := range unpolled {
		names = append(names, j.ID)
	}
	if strings.Join(names, ",") != "job_lost_1,job_lost_2" {
		t.Fatalf("UnpolledJobs = %v; want the two live jobs whose poll is gone, oldest first", names)
	}
	sameJob(t, "an unpolled job", unpolled[0], getJob(t, s, ws, "job_lost_1"))
	if one, err := s.UnpolledJobs(ctx, 1); err != nil || len(one) != 1 || one[0].ID != "job_lost_1" {
		t.Fatalf("UnpolledJobs(1) = %v, %v; want job_lost_1", one, err)
	}
	// Queued again, they are polled again.
	if err := s.Enqueue(ctx, store.JobEnqueue(unpolled[0], time.Time{})); err != nil {
		t.Fatal(err)
	}
	if again, err := s.UnpolledJobs(ctx, 10); err != nil || len(again) != 1 || again[0].ID != "job_lost_2" {
		t.Fatalf("UnpolledJobs after queueing job_lost_1 = %v, %v", again, err)
	}
}

func testAdvanceJob(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	start := c.Now()
	ws := newWorkspace(t, s, 0)
	j := testJob(ws, "job_1", time.Time{})
	createJob(t, s, j, time.Time{})
	poll := claimPoll(t, s, "test_kind", "inst_a", time.Minute)

	// A planned poll: the job moves on, its poll is due at next, on the same attempt.
	c.Set(start.Add(time.Second))
	native, status, progress := "up_123", "in_progress", 40
	u := store.JobUpdate{NativeID: &native, Status: &status, Progress: &progress, Delivery: json.RawMessage(`{"total_attempts":0}`)}
	next := start.Add(10 * time.Second)
	if err := s.AdvanceJob(ctx, poll.Claim, u, nil, next); err != nil {
		t.Fatalf("AdvanceJob: %v", err)
	}
	j.CreatedAt, j.UpdatedAt = start, start.Add(time.Second)
	j.NativeID, j.Status, j.Progress, j.Delivery = native, status, progress, u.Delivery
	sameJob(t, "after AdvanceJob", getJob(t, s, ws, "job_1"), j)
	wantErr(t, "Complete of an advanced claim", s.Complete(ctx, poll.Claim), store.ErrClaimLost)
	if got := claim(t, s, store.JobQueue("test_kind"), "inst_b", time.Minute, 10); len(got) != 0 {
		t.Fatalf("polled %v before next", claimedIDs(got))
	}
	c.Set(next)
	poll = claimPoll(t, s, "test_kind", "inst_b", time.Minute)
	if poll.Attempt != 1 {
		t.Fatalf("the second poll is attempt %d, want 1: a planned poll is no failure", poll.Attempt)
	}

	// A lost claim changes nothing: not the job, not the events, not the poll.
	c.Set(next.Add(2 * time.Minute))
	taken := claimPoll(t, s, "test_kind", "inst_c", time.Minute)
	done := "completed"
	late := store.JobUpdate{Status: &done}
	ev := store.Event{ID: "evt_late", Type: "video.completed", Target: "https://example.com/hook", Payload: json.RawMessage(`{"id":"job_1"}`)}
	wantErr(t, "AdvanceJob of a lost claim", s.AdvanceJob(ctx, poll.Claim, late, []store.Event{ev}, time.Time{}), store.ErrClaimLost)
	sameJob(t, "after a lost AdvanceJob", getJob(t, s, ws, "job_1"), j)
	wantErr(t, "the lost claim's event", func() error { _, err := s.GetDelivery(ctx, ws, "evt_late"); return err }(), store.ErrNotFound)
	if got := claim(t, s, store.DeliveryQueue, "sender", time.Minute, 10); len(got) != 0 {
		t.Fatalf("a lost claim queued deliveries %v", claimedIDs(got))
	}

	// An event that cannot be written undoes the rest: the job and the claim stay as they were.
	evA := store.Event{ID: "evt_a", Type: "video.completed", Target: "wh_1", Payload: json.RawMessage(`{"id":"job_1","status":"completed"}`)}
	dup := []store.Event{evA, evA}
	wantErr(t, "AdvanceJob with an event twice", s.AdvanceJob(ctx, taken.Claim, late, dup, time.Time{}), store.ErrConflict)
	sameJob(t, "after a failed AdvanceJob", getJob(t, s, ws, "job_1"), j)
	wantErr(t, "the failed advance's event", func() error { _, err := s.GetDelivery(ctx, ws, "evt_a"); return err }(), store.ErrNotFound)

	// The last poll: the job is done, its events are queued, its poll is gone.
	c.Set(next.Add(3 * time.Minute))
	advancedAt := c.Now()
	evB := store.Event{ID: "evt_b", Type: "video.completed", Target: "wh_2", Payload: json.RawMessage(`{"id":"job_1"}`)}
	finished := start.Add(3 * time.Minute)
	final := store.JobUpdate{Status: &done, Result: json.RawMessage(`{"url":"blob://v"}`), Usage: json.RawMessage(`{"video_seconds":8}`), CompletedAt: &finished}
	if err := s.AdvanceJob(ctx, taken.Claim, final, []store.Event{evA, evB}, time.Time{}); err != nil {
		t.Fatalf("AdvanceJob to the end: %v", err)
	}
	j.Status, j.Result, j.Usage, j.CompletedAt, j.UpdatedAt = done, final.Result, final.Usage, finished, advancedAt
	sameJob(t, "after the last AdvanceJob", getJob(t, s, ws, "job_1"), j)
	c.Set(c.Now().Add(24 * time.Hour))
	if got := claim(t, s, store.JobQueue("test_kind"), "inst_d", time.Minute, 10); len(got) != 0 {
		t.Fatalf("a finished job was polled again: %v", claimedIDs(got))
	}
	for _, e := range []store.Event{evA, evB} {
		d, err := s.GetDelivery(ctx, ws, e.ID)
		if err != nil || d.JobID != "job_1" || d.WorkspaceID != ws || d.Target != e.Target || d.EventType != e.Type ||
			d.Status != store.DeliveryPending || d.Attempts != 0 || !jsonEqual(d.Payload, e.Payload) || !d.CreatedAt.Equal(advancedAt) {
			t.Fatalf("delivery %s = %+v, %v", e.ID, d, err)
		}
	}
	sent := claim(t, s, store.DeliveryQueue, "sender", time.Minute, 10)
	if ids := claimedIDs(sent); !slices.Equal(ids, []string{"evt_a", "evt_b"}) || sent[0].Group != "wh_1" {
		t.Fatalf("deliveries queued %v (%+v), want evt_a and evt_b grouped by target", ids, sent)
	}
	if d, err := store.DeliveryOf(sent[0]); err != nil || d.ID != "evt_a" || d.JobID != "job_1" || !jsonEqual(d.Payload, evA.Payload) {
		t.Fatalf("DeliveryOf = %+v, %v", d, err)
	}
	wantErr(t, "GetDelivery of another workspace", func() error { _, err := s.GetDelivery(ctx, "ws_other", "evt_a"); return err }(), store.ErrNotFound)
	bad := store.Event{ID: "evt_bad", Type: "t", Target: "x", Payload: json.RawMessage(`{`)}
	wantErrAny(t, "AdvanceJob with an event that is not JSON", s.AdvanceJob(ctx, taken.Claim, late, []store.Event{bad}, time.Time{}))
}

// testDeliveries: attempts are recorded with the delivery's retry or end, and listed.
func testDeliveries(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	start := c.Now()
	ws, other := newWorkspace(t, s, 0), newWorkspace(t, s, 0)
	createJob(t, s, testJob(ws, "job_1", time.Time{}), time.Time{})
	poll := claimPoll(t, s, "test_kind", "inst_a", time.Minute)
	events := []store.Event{
		{ID: "evt_ok", Type: "video.completed", Target: "wh_1", Payload: json.RawMessage(`{"n":1}`)},
		{ID: "evt_bad", Type: "video.completed", Target: "wh_2", Payload: json.RawMessage(`{"n":2}`)},
	}
	if err := s.AdvanceJob(ctx, poll.Claim, store.JobUpdate{}, events, time.Time{}); err != nil {
		t.Fatalf("AdvanceJob: %v", err)
	}
	send := func(id string) store.ClaimedItem {
		t.Helper()
		for _, it := range claim(t, s, store.DeliveryQueue, "sender", time.Minute, 10) {
			if it.ID == id {
				return it
			}
			if err := s.Requeue(ctx, it.Claim, c.Now().Add(time.Hour)); err != nil {
				t.Fatalf("Requeue: %v", err)
			}
		}
		t.Fatalf("delivery %s not due", id)
		return store.ClaimedItem{}
	}

	// evt_ok fails once, then is delivered.
	first := send("evt_ok")
	retryAt := start.Add(30 * time.Second)
	fail := store.DeliveryAttempt{StatusCode: 503, Duration: 1500 * time.Millisecond, Error: "HTTP 503", ResponsePreview: "busy"}
	if err := s.RecordAttempt(ctx, first.Claim, fail, retryAt); err != nil {
		t.Fatalf("RecordAttempt: %v", err)
	}
	wantErr(t, "RecordAttempt twice", s.RecordAttempt(ctx, first.Claim, fail, retryAt), store.ErrClaimLost)
	if d, err := s.GetDelivery(ctx, ws, "evt_ok"); err != nil || d.Status != store.DeliveryPending || d.Attempts != 1 || !d.NextAt.Equal(retryAt) {
		t.Fatalf("after a failed attempt: %+v, %v", d, err)
	}
	stats := func(what, workspace string, want store.DeliveryStats) {
		t.Helper()
		got, err := s.JobDeliveryStats(ctx, workspace, "job_1")
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s: stats\n got %+v, %v\nwant %+v", what, got, err, want)
		}
	}
	stats("after a failed attempt", ws, store.DeliveryStats{Events: 2, TotalAttempts: 1, PendingRetries: 1, NextRetryAt: retryAt,
		LastAttemptAt: start, LastFailureAt: start, LastStatusCode: 503, LastError: "HTTP 503"})
	c.Set(retryAt)
	second := send("evt_ok")
	if second.Attempt != 2 || second.LastError != "HTTP 503" {
		t.Fatalf("retried delivery claimed %+v, want attempt 2 after HTTP 503", second)
	}
	c.Set(retryAt.Add(time.Second))
	ok := store.DeliveryAttempt{StatusCode: 204, Duration: 80 * time.Millisecond, Delivered: true}
	wantErrAny(t, "a delivered attempt with a next one", s.RecordAttempt(ctx, second.Claim, ok, c.Now().Add(time.Minute)))
	if err := s.RecordAttempt(ctx, second.Claim, ok, time.Time{}); err != nil {
		t.Fatalf("RecordAttempt: %v", err)
	}
	if d, err := s.GetDelivery(ctx, ws, "evt_ok"); err != nil || d.Status != store.DeliveryDelivered || d.Attempts != 2 || !d.NextAt.IsZero() {
		t.Fatalf("after delivery: %+v, %v", d, err)
	}

	// evt_bad is given up after one attempt; a long preview is cut.
	c.Set(retryAt.Add(2 * time.Hour))
	last := send("evt_bad")
	// One byte, then two-byte runes: the cut falls inside a rune, which is kept whole or not at all.
	preview := "x" + strings.Repeat("é", store.MaxResponsePreview)
	gone := store.DeliveryAttempt{StatusCode: 410, Error: "gone", ResponsePreview: preview}
	if err := s.RecordAttempt(ctx, last.Claim, gone, time.Time{}); err != nil {
		t.Fatalf("RecordAttempt: %v", err)
	}
	if d, err := s.GetDelivery(ctx, ws, "evt_bad"); err != nil || d.Status != store.DeliveryFailed || d.Attempts != 1 {
		t.Fatalf("after giving up: %+v, %v", d, err)
	}
	c.Set(c.Now().Add(24 * time.Hour))
	if got := claim(t, s, store.DeliveryQueue, "sender", time.Minute, 10); len(got) != 0 {
		t.Fatalf("finished deliveries queued: %v", claimedIDs(got))
	}

	want := []store.DeliveryAttempt{
		{DeliveryID: "evt_ok", JobID: "job_1", EventType: "video.completed", Number: 1, StatusCode: 503, Duration: 1500 * time.Millisecond,
			Error: "HTTP 503", ResponsePreview: "busy", At: start, NextAt: retryAt},
		{DeliveryID: "evt_ok", JobID: "job_1", EventType: "video.completed", Number: 2, StatusCode: 204, Duration: 80 * time.Millisecond,
			Delivered: true, At: retryAt.Add(time.Second)},
		{DeliveryID: "evt_bad", JobID: "job_1", EventType: "video.completed", Number: 1, StatusCode: 410, Error: "gone",
			ResponsePreview: preview[:store.MaxResponsePreview-1], At: retryAt.Add(2 * time.Hour)},
	}
	list := func(q store.AttemptQuery) []store.DeliveryAttempt {
		t.Helper()
		var out []store.DeliveryAttempt
		walk(t, 2, func(a store.DeliveryAttempt) string { return a.ID }, func(p store.Page) ([]store.DeliveryAttempt, error) {
			q.Page = p
			page, err := s.ListAttempts(ctx, q)
			if err == nil {
				cut, _ := store.Cut(page, p.Limit)
				out = append(out, cut...)
			}
			return page, err
		})
		for i := range out {
			if out[i].ID == "" || !out[i].At.Equal(out[i].At.UTC()) || out[i].At.Location() != time.UTC {
				t.Fatalf("attempt %+v", out[i])
			}
			out[i].ID = ""
		}
		return out
	}
	if got := list(store.AttemptQuery{WorkspaceID: ws, JobID: "job_1"}); !reflect.DeepEqual(got, want) {
		t.Fatalf("attempts of the job:\n got %+v\nwant %+v", got, want)
	}
	if got := list(store.AttemptQuery{WorkspaceID: ws, DeliveryID: "evt_ok"}); !reflect.DeepEqual(got, want[:2]) {
		t.Fatalf("attempts of evt_ok:\n got %+v\nwant %+v", got, want[:2])
	}
	newest := slices.Clone(want)
	slices.Reverse(newest)
	if got := list(store.AttemptQuery{WorkspaceID: ws, JobID: "job_1", Newest: true}); !reflect.DeepEqual(got, newest) {
		t.Fatalf("attempts of the job, newest first:\n got %+v\nwant %+v", got, newest)
	}
	stats("at the end", ws, store.DeliveryStats{Events: 2, TotalAttempts: 3, DeliveredEvents: 1, DeliveredEventTypes: []string{"video.completed"},
		LastAttemptAt: retryAt.Add(2 * time.Hour), LastDeliveredAt: retryAt.Add(time.Second), LastFailureAt: retryAt.Add(2 * time.Hour),
		LastStatusCode: 410, LastError: "gone"})
	stats("another workspace", other, store.DeliveryStats{})
	if got := list(store.AttemptQuery{WorkspaceID: other, JobID: "job_1"}); len(got) != 0 {
		t.Fatalf("another workspace sees attempts %+v", got)
	}
	_, err := s.ListAttempts(ctx, store.AttemptQuery{WorkspaceID: ws})
	wantErrAny(t, "ListAttempts of nothing", err)
}

// testCreateJobEvents: the events given to CreateJob are in the outbox once the job is,
// and not when the job is refused.
func testCreateJobEvents(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 0)
	created := store.Event{ID: "evt_created", Type: "test_kind.created", Target: "wh_1", Payload: json.RawMessage(`{"id":"job_1"}`)}
	createdAt := c.Now()
	if err := s.CreateJob(ctx, testJob(ws, "job_1", time.Time{}), time.Time{}, []store.Event{created}); err != nil {
		t.Fatalf("CreateJob with an event: %v", err)
	}
	d, err := s.GetDelivery(ctx, ws, "evt_created")
	if err != nil || d.JobID != "job_1" || d.WorkspaceID != ws || d.Target != "wh_1" || d.EventType != created.Type ||
		d.Status != store.DeliveryPending || d.Attempts != 0 || !jsonEqual(d.Payload, created.Payload) || !d.CreatedAt.Equal(createdAt) {
		t.Fatalf("the created job's delivery = %+v, %v", d, err)
	}
	sent := claim(t, s, store.DeliveryQueue, "sender", time.Minute, 10)
	if ids := claimedIDs(sent); !slices.Equal(ids, []string{"evt_created"}) || sent[0].Group != "wh_1" {
		t.Fatalf("deliveries queued %v (%+v), want evt_created grouped by its target", ids, sent)
	}

	// A refused job writes none of its events: an id in use, an unknown workspace, an
	// event twice, an event that is not JSON.
	other := store.Event{ID: "evt_other", Type: "test_kind.created", Target: "wh_1", Payload: json.RawMessage(`{}`)}
	wantErr(t, "CreateJob of an id in use", s.CreateJob(ctx, testJob(ws, "job_1", time.Time{}), time.Time{}, []store.Event{other}), store.ErrConflict)
	wantErr(t, "CreateJob in no workspace", s.CreateJob(ctx, testJob("ws_missing", "job_2", time.Time{}), time.Time{}, []store.Event{other}), store.ErrNotFound)
	wantErr(t, "CreateJob with an event twice", s.CreateJob(ctx, testJob(ws, "job_3", time.Time{}), time.Time{}, []store.Event{other, other}), store.ErrConflict)
	wantErr(t, "CreateJob with another job's event", s.CreateJob(ctx, testJob(ws, "job_4", time.Time{}), time.Time{}, []store.Event{created}), store.ErrConflict)
	bad := store.Event{ID: "evt_bad", Type: "t", Target: "x", Payload: json.RawMessage(`{`)}
	wantErrAny(t, "CreateJob with an event that is not JSON", s.CreateJob(ctx, testJob(ws, "job_5", time.Time{}), time.Time{}, []store.Event{bad}))
	for _, id := range []string{"job_3", "job_4", "job_5"} {
		wantErr(t, "GetJob of a refused job", func() error { _, err := s.GetJob(ctx, ws, id); return err }(), store.ErrNotFound)
	}
	for _, id := range []string{"evt_other", "evt_bad"} {
		wantErr(t, "GetDelivery of a refused job's event", func() error { _, err := s.GetDelivery(ctx, ws, id); return err }(), store.ErrNotFound)
	}
	if d, err := s.GetDelivery(ctx, ws, "evt_created"); err != nil || d.JobID != "job_1" {
		t.Fatalf("a refused job's event replaced the created one's delivery: %+v, %v", d, err)
	}
	c.Set(c.Now().Add(24 * time.Hour))
	if got := claim(t, s, store.DeliveryQueue, "sender2", time.Minute, 10); !slices.Equal(claimedIDs(got), []string{"evt_created"}) {
		t.Fatalf("deliveries queued after refused jobs: %v, want only evt_created (its lease run out)", claimedIDs(got))
	}
	polls := claim(t, s, store.JobQueue("test_kind"), "inst_a", time.Minute, 10)
	if ids := claimedIDs(polls); !slices.Equal(ids, []string{"job_1"}) {
		t.Fatalf("polls queued %v, want only job_1's", ids)
	}
}

// testSkipDelivery: a skipped delivery ends with its claim, without an attempt, and only
// by the claim's holder.
func testSkipDelivery(t *testing.T, s store.Store, c *Clock) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 0)
	createJob(t, s, testJob(ws, "job_1", time.Time{}), time.Time{})
	poll := claimPoll(t, s, "test_kind", "inst_a", time.Minute)
	ev := store.Event{ID: "evt_skip", Type: "video.progress", Target: "wh_1", Payload: json.RawMessage(`{"n":1}`)}
	if err := s.AdvanceJob(ctx, poll.Claim, store.JobUpdate{}, []store.Event{ev}, time.Time{}); err != nil {
		t.Fatalf("AdvanceJob: %v", err)
	}
	got := claim(t, s, store.DeliveryQueue, "sender_a", time.Minute, 10)
	if len(got) != 1 || got[0].ID != "evt_skip" {
		t.Fatalf("claimed %v, want evt_skip", claimedIDs(got))
	}
	lost := got[0].Claim

	// Its lease runs out and another sender claims it: the first one's skip changes nothing.
	c.Set(c.Now().Add(2 * time.Minute))
	got = claim(t, s, store.DeliveryQueue, "sender_b", time.Minute, 10)
	if len(got) != 1 || got[0].ID != "evt_skip" {
		t.Fatalf("claimed %v after the lease ran out, want evt_skip", claimedIDs(got))
	}
	wantErr(t, "SkipDelivery with a lost claim", s.SkipDelivery(ctx, lost), store.ErrClaimLost)
	if d, err := s.GetDelivery(ctx, ws, "evt_skip"); err != nil || d.Status != store.DeliveryPending {
		t.Fatalf("after a lost claim's skip: %+v, %v", d, err)
	}

	c.Set(c.Now().Add(time.Second))
	skippedAt := c.Now()
	if err := s.SkipDelivery(ctx, got[0].Claim); err != nil {
		t.Fatalf("SkipDelivery: %v", err)
	}
	wantErr(t, "SkipDelivery twice", s.SkipDelivery(ctx, got[0].Claim), store.ErrClaimLost)
	d, err := s.GetDelivery(ctx, ws, "evt_skip")
	if err != nil || d.Status != store.DeliverySkipped || d.Attempts != 0 || !d.NextAt.IsZero() || !d.UpdatedAt.Equal(skippedAt) {
		t.Fatalf("after SkipDelivery: %+v, %v, want skipped at %v with no attempt", d, err, skippedAt)
	}
	if a, err := s.ListAttempts(ctx, store.AttemptQuery{WorkspaceID: ws, DeliveryID: "evt_skip"}); err != nil || len(a) != 0 {
		t.Fatalf("attempts of a skipped delivery: %+v, %v", a, err)
	}
	c.Set(c.Now().Add(24 * time.Hour))
	if got := claim(t, s, store.DeliveryQueue, "sender_a", time.Minute, 10); len(got) != 0 {
		t.Fatalf("a skipped delivery queued: %v", claimedIDs(got))
	}
}

// testWatchSameStore follows the change feed of one store.
func testWatchSameStore(t *testing.T, s store.Store) {
	WatchAcross(t, s, s)
}

// WatchAcross watches the change feed of b while a creates and advances a job: b sees each
// change, in order, and its channel closes when its context ends. a and b may be one store,
// or two stores over one database (two gateway instances).
func WatchAcross(t *testing.T, a, b store.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changes, err := b.Watch(ctx)
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	ws := newWorkspace(t, a, 0)
	id := ids.New("job")
	j := testJob(ws, id, time.Time{})
	j.Kind = "watch_" + ids.Token(6)
	// The listener of a store on PostgreSQL may still be connecting: a job created before
	// it listens goes unheard, so jobs are created until one is heard.
	var first store.JobChange
	deadline := time.After(10 * time.Second)
	for first.JobID == "" {
		j.ID = ids.New("job")
		createJob(t, a, j, time.Time{})
		select {
		case first = <-changes:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatal("no change heard of the jobs created")
		}
	}
	created := getJob(t, a, ws, first.JobID)
	if first.WorkspaceID != ws || first.Kind != j.Kind || first.Status != "queued" || !first.UpdatedAt.Equal(created.UpdatedAt) {
		t.Fatalf("change %+v, want job %+v", first, created)
	}
	// Drain the changes of jobs created while the listener connected.
	for drained := false; !drained; {
		select {
		case <-changes:
		case <-time.After(300 * time.Millisecond):
			drained = true
		}
	}
	polls := claim(t, a, store.JobQueue(j.Kind), "inst_a", time.Minute, store.MaxClaimLimit)
	var poll store.ClaimedItem
	for _, p := range polls {
		if p.ID == first.JobID {
			poll = p
		}
	}
	for _, status := range []string{"in_progress", "completed"} {
		next := time.Now().Add(time.Hour)
		if status == "completed" {
			next = time.Time{}
		}
		if err := a.AdvanceJob(context.Background(), poll.Claim, store.JobUpdate{Status: &status}, nil, next); err != nil {
			t.Fatalf("AdvanceJob: %v", err)
		}
		if status != "completed" {
			if err := a.Reschedule(context.Background(), poll.Queue, poll.ID, time.Time{}); err != nil {
				t.Fatalf("Reschedule: %v", err)
			}
			got := claim(t, a, poll.Queue, "inst_a", time.Minute, 1)
			if len(got) != 1 {
				t.Fatalf("polled %v", claimedIDs(got))
			}
			poll = got[0]
		}
		select {
		case c := <-changes:
			if c.JobID != first.JobID || c.Status != status || c.WorkspaceID != ws || c.Kind != j.Kind {
				t.Fatalf("change %+v, want %s %s", c, first.JobID, status)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no change heard for %s", status)
		}
	}
	cancel()
	for {
		select {
		case _, open := <-changes:
			if !open {
				return
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the feed's channel stayed open after its context ended")
		}
	}
}

// AdvanceRace advances one job from a and b at once, as two gateway instances would: with
// the same claim (a worker's poll ran twice) exactly one wins and the other is
// ErrClaimLost; with a claim that expired and was taken over by the other, only the newer
// one wins. The job, its events and its poll show the winner's work alone. a and b may be
// one store, or two stores over one database.
func AdvanceRace(t *testing.T, a, b store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, a, 0)
	kind := "race_" + ids.Token(6)
	for round := range 5 {
		id := fmt.Sprintf("job_%s_%d", kind, round)
		j := testJob(ws, id, time.Time{})
		j.Kind = kind
		createJob(t, a, j, time.Time{})
		poll := claimPoll(t, a, kind, "inst_a", time.Hour)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, s := range []store.Store{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status := fmt.Sprintf("done_by_%d", i)
				ev := store.Event{ID: fmt.Sprintf("evt_%s_%d", id, i), Type: "t", Target: "wh", Payload: json.RawMessage(`{}`)}
				errs[i] = s.AdvanceJob(ctx, poll.Claim, store.JobUpdate{Status: &status}, []store.Event{ev}, time.Time{})
			}()
		}
		wg.Wait()
		winner := slices.IndexFunc(errs, func(err error) bool { return err == nil })
		loser := 1 - winner
		if winner < 0 || !errors.Is(errs[loser], store.ErrClaimLost) {
			t.Fatalf("round %d: AdvanceJob from both = %v, want one nil and one ErrClaimLost", round, errs)
		}
		if got := getJob(t, b, ws, id); got.Status != fmt.Sprintf("done_by_%d", winner) {
			t.Fatalf("round %d: job status %q, want the winner's (%d)", round, got.Status, winner)
		}
		if _, err := a.GetDelivery(ctx, ws, fmt.Sprintf("evt_%s_%d", id, loser)); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("round %d: the loser's event: %v, want ErrNotFound", round, err)
		}
		if _, err := a.GetDelivery(ctx, ws, fmt.Sprintf("evt_%s_%d", id, winner)); err != nil {
			t.Fatalf("round %d: the winner's event: %v", round, err)
		}
	}

	// Taken over: a's lease runs out on the store's clock, b claims, and a's late advance
	// is refused while b's goes through.
	id := "job_" + kind + "_takeover"
	j := testJob(ws, id, time.Time{})
	j.Kind = kind
	createJob(t, a, j, time.Time{})
	old := claimPoll(t, a, kind, "inst_a", 50*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	current := claimPoll(t, b, kind, "inst_b", time.Hour)
	late, fresh := "late", "fresh"
	wantErr(t, "AdvanceJob of the expired claim", a.AdvanceJob(ctx, old.Claim, store.JobUpdate{Status: &late}, nil, time.Time{}), store.ErrClaimLost)
	if err := b.AdvanceJob(ctx, current.Claim, store.JobUpdate{Status: &fresh}, nil, time.Time{}); err != nil {
		t.Fatalf("AdvanceJob of the current claim: %v", err)
	}
	if got := getJob(t, a, ws, id); got.Status != fresh {
		t.Fatalf("job status %q, want %q", got.Status, fresh)
	}
}

// testAdvanceRace races two advances of one job on one store.
func testAdvanceRace(t *testing.T, s store.Store) {
	AdvanceRace(t, s, s)
}
