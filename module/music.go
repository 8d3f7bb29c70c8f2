package module

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/internal/workers"
	"github.com/modelgateway/caddy-modelgateway/jobs/music"
	"github.com/modelgateway/caddy-modelgateway/store"
)

func init() {
	backgroundWorkers = append(backgroundWorkers, worker{Name: "music expiry", Run: runMusicExpiry})
}

// musicSweepEvery is how often the music expiry worker looks for audio to remove: expiries
// are days apart, a minute late costs nothing. It is atomic because every gateway of a
// process reads it (tests shorten it).
var musicSweepEvery = sweepInterval(time.Minute)

// sweepInterval is a sweep worker's interval, d until a test shortens it.
func sweepInterval(d time.Duration) *atomic.Int64 {
	var v atomic.Int64
	v.Store(int64(d))
	return &v
}

// runMusicExpiry removes the audio of the music jobs whose retention ran out (music.Sweep),
// from the blob store of the newest started configuration, until the store handle ends.
func runMusicExpiry(ctx context.Context, rt workers.Runtime[*appRuntime]) error {
	owner := "worker"
	if cur := rt.Current(); cur != nil && cur.Owner != nil {
		owner = cur.Owner.ID()
	}
	return runBlobSweep(ctx, rt, musicSweepEvery, func(ctx context.Context, b blobs.Store, logf func(string, error)) (int, error) {
		return music.Sweep(ctx, rt.Store(), b, owner, time.Now(), logf)
	})
}

// runBlobSweep calls sweep with the blob store of the newest started configuration (when
// it has one) every so often, at once again while a sweep removed a full claim's worth,
// until ctx ends; a sweep's error (the store's) ends the worker, which is restarted.
func runBlobSweep(ctx context.Context, rt workers.Runtime[*appRuntime], every *atomic.Int64,
	sweep func(ctx context.Context, b blobs.Store, logf func(string, error)) (int, error)) error {
	logf := func(msg string, err error) { rt.Logger().Warn(msg, zap.Error(err)) }
	return runSweep(ctx, every, store.MaxClaimLimit, func(ctx context.Context) (int, error) {
		cur := rt.Current()
		if cur == nil || cur.Blobs == nil {
			return 0, nil
		}
		return sweep(ctx, cur.Blobs, logf)
	})
}

// runSweep calls sweep every so often, at once again while a sweep did a full page's
// worth (full), until ctx ends; a sweep's error (the store's) ends the worker, which is
// restarted.
func runSweep(ctx context.Context, every *atomic.Int64, full int, sweep func(ctx context.Context) (int, error)) error {
	for ctx.Err() == nil {
		done, err := sweep(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if done == full {
			continue // more may be due
		}
		background.Sleep(time.Duration(every.Load()), ctx.Done())
	}
	return nil
}
