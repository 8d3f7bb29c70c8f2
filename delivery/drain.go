package delivery

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// Drain claims the due items of queue p.Queue and hands each to send on a goroutine of its
// own, at most concurrency at once, until ctx ends; with nothing due it waits idle. A
// panic in send is logged, and the item's lease running out hands it out again. Its error
// (the store cannot be reached to claim) is for the worker runtime, which runs it again
// after a backoff. p.Limit is set from the free goroutines at each claim.
func Drain(ctx context.Context, claims store.Claims, p store.ClaimParams, concurrency int, idle time.Duration,
	log *zap.Logger, send func(context.Context, store.ClaimedItem)) error {
	sem := make(chan struct{}, concurrency)
	var wg sync.WaitGroup
	defer wg.Wait()
	for ctx.Err() == nil {
		var items []store.ClaimedItem
		if free := cap(sem) - len(sem); free > 0 {
			p.Limit = free
			var err error
			if items, err = claims.Claim(ctx, p); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("claiming from queue %s: %w", p.Queue, err)
			}
		}
		for _, it := range items {
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer func() { <-sem; wg.Done() }()
				// A panic in the call itself is the attempt's (send retries it); one of the
				// sender's own is logged here, and the claim's lease running out sends again.
				if p := background.Call("sending "+it.Queue+" item "+it.ID, func() { send(ctx, it) }); p != nil {
					log.Error("sending a queued item panicked; its lease running out sends it again",
						zap.String("queue", it.Queue), zap.String("item", it.ID), zap.Error(p))
				}
			}()
		}
		if len(items) > 0 {
			continue
		}
		if !background.Sleep(idle, ctx.Done()) {
			return nil
		}
	}
	return nil
}
