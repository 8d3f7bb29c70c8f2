package module

import (
	"context"
	"maps"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/internal/workers"
	"github.com/modelgateway/caddy-modelgateway/notify"
	"github.com/modelgateway/caddy-modelgateway/store"
)

func init() {
	backgroundWorkers = append(backgroundWorkers,
		worker{Name: "notifications", Run: runNotifications},
		worker{Name: "low_balance", Run: runLowBalance})
}

// NotificationsOffLog is what the notifications worker says once while no secret key is
// configured: no target can be opened, and the notifications wait in their queue.
const NotificationsOffLog = "notifications are off: no secret_key is configured, so no destination's target can be opened; notifications wait in their queue"

// DefaultLowBalanceInterval is how often the low-balance sweep compares the balances of
// the workspaces that set a threshold with it. A sweep rather than a check after each
// charge: the chat path stays without a store read of its own, and a crossing is told
// within this interval.
const DefaultLowBalanceInterval = time.Minute

// notifyTuning, when set, adjusts the notifications worker's Sender and the low-balance
// sweep's interval, and adds destination kinds to every configuration. Nothing sets it
// but tests.
var notifyTuning atomic.Pointer[notifyTune]

type notifyTune struct {
	sender             func(*notify.Sender)
	lowBalanceInterval time.Duration
	kinds              map[string]notify.Kind
}

// provisionNotifications makes the configuration's outbox, after its destination kinds
// (provisionDestinations), to which tests may add kinds of their own.
func (a *App) provisionNotifications() {
	if tune := notifyTuning.Load(); tune != nil && len(tune.kinds) > 0 {
		kinds := maps.Clone(a.destinations)
		if kinds == nil {
			kinds = map[string]notify.Kind{}
		}
		maps.Copy(kinds, tune.kinds)
		a.destinations = kinds
	}
	a.notifications = &notify.Outbox{Store: a.store, Logger: a.logger}
}

// runNotifications delivers the notifications queue (notify.Sender) until the store handle
// ends, with the secret key and the destination kinds of the newest started configuration.
func runNotifications(ctx context.Context, rt workers.Runtime[*appRuntime]) error {
	return runWithKey(ctx, rt, NotificationsOffLog, func(ctx context.Context, sealer *delivery.Sealer) error {
		s := &notify.Sender{
			Store: rt.Store(), Sealer: sealer, Client: outboundOf(rt), Logger: rt.Logger(), Owner: ownerOf(rt),
			Kinds: func() map[string]notify.Kind {
				if cur := rt.Current(); cur != nil {
					return cur.DestinationKinds
				}
				return nil
			},
		}
		if tune := notifyTuning.Load(); tune != nil && tune.sender != nil {
			tune.sender(s)
		}
		return s.Run(ctx)
	})
}

// runLowBalance sweeps the balances for crossings of their threshold (store.FireLowBalance:
// once per crossing across instances, again after notify.LowBalanceCooldown while still
// below) and emits balance.low for each, until the store handle ends.
func runLowBalance(ctx context.Context, rt workers.Runtime[*appRuntime]) error {
	for {
		interval := DefaultLowBalanceInterval
		if tune := notifyTuning.Load(); tune != nil && tune.lowBalanceInterval > 0 {
			interval = tune.lowBalanceInterval
		}
		if !background.Sleep(interval, ctx.Done()) {
			return nil
		}
		if err := sweepLowBalance(ctx, rt.Store(), outboxOf(rt), rt.Logger()); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
	}
}

// sweepLowBalance fires the low-balance alerts due now and queues their notifications.
// An alert fired whose notification could not be queued is logged: it fires again after
// the cooldown, or at the next crossing.
func sweepLowBalance(ctx context.Context, s store.Store, outbox *notify.Outbox, log *zap.Logger) error {
	fired, err := s.FireLowBalance(ctx, notify.LowBalanceCooldown)
	if err != nil {
		return err
	}
	for _, lb := range fired {
		n, key := notify.LowBalance(lb)
		if _, err := outbox.Emit(ctx, n, key); err != nil {
			log.Error("a low-balance notification could not be queued", zap.String("workspace_id", lb.WorkspaceID), zap.Error(err))
		}
	}
	return nil
}

// outboxOf is the newest configuration's outbox, or one on the worker's store.
func outboxOf(rt workers.Runtime[*appRuntime]) *notify.Outbox {
	if cur := rt.Current(); cur != nil && cur.Notifications != nil {
		return cur.Notifications
	}
	return &notify.Outbox{Store: rt.Store(), Logger: rt.Logger()}
}

// notifyJobFailed emits batch.failed or video.failed for a job that ended failed; any other
// change tells nobody.
func notifyJobFailed(c *appRuntime, j store.Job) {
	if c == nil || c.Notifications == nil {
		return
	}
	if n, key, ok := notify.JobFailed(j); ok {
		c.Notifications.Go(n, key)
	}
}
