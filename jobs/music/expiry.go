package music

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// The audio of a music job is removed once its retention has run out after the job
// completed. Each job has an item in ExpiryQueue, enqueued with the job (ScheduleExpiry) and
// first due when the audio could expire at the earliest; Sweep, which module runs as a
// worker on every instance, claims the due items and removes the audio whose time came,
// putting the others back until theirs. The store's claims make each removal one
// instance's, and an instance that dies mid-sweep leaves its items due again.
const ExpiryQueue = "music.expiry"

// sweepLease bounds one sweep of a claimed item: a few store and blob store calls.
const sweepLease = time.Minute

// ScheduleExpiry enqueues the removal of job j's audio, first looked at when a job created
// now could, at the earliest, have it expire.
func ScheduleExpiry(ctx context.Context, s store.Claims, j store.Job, retention time.Duration, now time.Time) error {
	p := store.JobEnqueue(j, now.Add(retention))
	p.Queue, p.Group = ExpiryQueue, ""
	return s.Enqueue(ctx, p)
}

// Sweep removes the audio of the music jobs whose retention ran out, among the items of
// ExpiryQueue due now: at most store.MaxClaimLimit a call. It returns how many it removed;
// its error is the claim's (the store cannot be reached), the failures of single items are
// retried later and reported through logf.
func Sweep(ctx context.Context, s store.Store, b blobs.Store, owner string, now time.Time, logf func(msg string, err error)) (int, error) {
	items, err := s.Claim(ctx, store.ClaimParams{Queue: ExpiryQueue, Owner: owner, Lease: sweepLease, Limit: store.MaxClaimLimit})
	if err != nil {
		return 0, fmt.Errorf("claiming music expiries: %w", err)
	}
	removed := 0
	for _, it := range items {
		done, next, err := sweepOne(ctx, s, b, it, now)
		switch {
		case err != nil:
			logf("removing expired music audio failed; retried later", fmt.Errorf("job %s: %w", it.ID, err))
			_ = s.Retry(ctx, it.Claim, now.Add(sweepLease), err.Error())
		case done:
			removed++
			if err := s.Complete(ctx, it.Claim); err != nil && !errors.Is(err, store.ErrClaimLost) {
				logf("completing a music expiry failed; it is looked at again", err)
			}
		default:
			if err := s.Requeue(ctx, it.Claim, next); err != nil && !errors.Is(err, store.ErrClaimLost) {
				logf("putting back a music expiry failed; it is looked at again", err)
			}
		}
	}
	return removed, nil
}

// sweepOne removes the audio of the job of item it when its time came (done), or tells when
// to look again.
func sweepOne(ctx context.Context, s store.Store, b blobs.Store, it store.ClaimedItem, now time.Time) (done bool, next time.Time, err error) {
	ws, id, err := store.JobOf(it)
	if err != nil {
		return true, time.Time{}, nil // not a job's item: nothing to remove
	}
	j, err := s.GetJob(ctx, ws, id)
	if errors.Is(err, store.ErrNotFound) {
		// The job was never stored (its creation failed) or is gone: so is its audio.
		return true, time.Time{}, removeAll(ctx, b, ws, id)
	}
	if err != nil {
		return false, time.Time{}, err
	}
	req, _ := ReadRequest(j)
	switch {
	case !jobs.Terminal(j.Status):
		// Not ended yet: its audio, if it comes, expires a retention after it.
		return false, now.Add(req.Retention()), nil
	case j.Status == jobs.StatusCompleted:
		res, ok := ReadResult(j)
		if ok && now.Before(res.ExpiresAt) {
			return false, res.ExpiresAt, nil
		}
	}
	return true, time.Time{}, removeAll(ctx, b, ws, id)
}

// removeAll removes the job's audio in every format it may have been kept in.
func removeAll(ctx context.Context, b blobs.Store, ws, id string) error {
	for format := range Formats {
		if err := b.Delete(ctx, BlobKey(ws, id, format)); err != nil {
			return err
		}
	}
	return nil
}
