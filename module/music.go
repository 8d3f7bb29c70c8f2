package module

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

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
var musicSweepEvery = func() *atomic.Int64 {
	var d atomic.Int64
	d.Store(int64(time.Minute))
	return &d
}()

// runMusicExpiry removes the audio of the music jobs whose retention ran out (music.Sweep),
// from the blob store of the newest started configuration, until the store handle ends.
func runMusicExpiry(ctx context.Context, rt workers.Runtime[*appRuntime]) error {
	owner := "worker"
	if cur := rt.Current(); cur != nil && cur.Owner != nil {
		owner = cur.Owner.ID()
	}
	logf := func(msg string, err error) { rt.Logger().Warn(msg, zap.Error(err)) }
	for ctx.Err() == nil {
		removed := 0
		if cur := rt.Current(); cur != nil && cur.Blobs != nil {
			var err error
			if removed, err = music.Sweep(ctx, rt.Store(), cur.Blobs, owner, time.Now(), logf); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
		if removed == store.MaxClaimLimit {
			continue // more may be due
		}
		background.Sleep(time.Duration(musicSweepEvery.Load()), ctx.Done())
	}
	return nil
}
