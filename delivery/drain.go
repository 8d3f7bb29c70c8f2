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

// Pace is how a sender drains its queue: how long it holds a claim (Lease), how long it
// waits when nothing is due (Idle), how many items it sends at once (Concurrency), and how
// many items of one group (an endpoint, a destination) are out at once across every
// sender (GroupCap). A sender embeds it as its settings; a zero field takes the sender's
// default.
type Pace struct {
	Lease       time.Duration
	Idle        time.Duration
	Concurrency int
	GroupCap    int
}

// or is p with def's value wherever p's is zero (or negative).
func (p Pace) or(def Pace) Pace {
	return Pace{Lease: orDefault(p.Lease, def.Lease), Idle: orDefault(p.Idle, def.Idle),
		Concurrency: orDefault(p.Concurrency, def.Concurrency), GroupCap: orDefault(p.GroupCap, def.GroupCap)}
}

// Drain claims the due items of queue as owner and hands each to send on a goroutine of
// its own, at p's pace (def's where p leaves a field zero), until ctx ends. A panic in
// send is logged, and the item's lease running out hands it out again. Its error (the
// store cannot be reached to claim) is for the worker runtime, which runs it again after a
// backoff.
func (p Pace) Drain(ctx context.Context, claims store.Claims, queue, owner string, def Pace,
	log *zap.Logger, send func(context.Context, store.ClaimedItem)) error {
	p = p.or(def)
	return drain(ctx, claims, store.ClaimParams{Queue: queue, Owner: owner, Lease: p.Lease, GroupCap: p.GroupCap},
		p.Concurrency, p.Idle, log, send)
}

// drain is Pace.Drain with its claims' parameters made; claim.Limit is set from the free
// goroutines at each claim.
func drain(ctx context.Context, claims store.Claims, p store.ClaimParams, concurrency int, idle time.Duration,
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
