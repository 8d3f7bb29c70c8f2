package module

import (
	"context"
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
	backgroundWorkers = append(backgroundWorkers, worker{Name: "deliveries", Run: runDeliveries})
}

// sealerCheck is how often the deliveries worker looks whether a reload changed the secret
// key: a new key must open the secrets from then on, and no key stops the sending. It is
// atomic because every gateway of a process reads it (tests shorten it while others run).
var sealerCheck = func() *atomic.Int64 {
	var d atomic.Int64
	d.Store(int64(5 * time.Second))
	return &d
}()

// runDeliveries sends the webhook outbox (delivery.Sender) until the store handle ends,
// with the secret key of the newest started configuration. Without a key no secret can be
// opened: it says so once and waits for a configuration that has one, so that the events
// stay in the outbox, undelivered but not lost.
func runDeliveries(ctx context.Context, rt workers.Runtime[*appRuntime]) error {
	return runWithKey(ctx, rt, "webhooks are off: no secret_key is configured, so no signing secret can be opened; events wait in the outbox",
		func(ctx context.Context, sealer *delivery.Sealer) error { return runSender(ctx, rt, sealer) })
}

// runWithKey runs run with the secret key of the newest started configuration until the
// store handle ends, starting it again with the new key when a reload changes it. Without
// a key it logs off once and waits for a configuration that has one.
func runWithKey(ctx context.Context, rt workers.Runtime[*appRuntime], off string, run func(ctx context.Context, sealer *delivery.Sealer) error) error {
	warned := false
	for ctx.Err() == nil {
		sealer := currentSealer(rt)
		if sealer == nil {
			if !warned {
				rt.Logger().Warn(off)
				warned = true
			}
			background.Sleep(time.Duration(sealerCheck.Load()), ctx.Done())
			continue
		}
		warned = false
		if err := runUntilKeyChanges(ctx, rt, sealer, run); err != nil {
			return err
		}
	}
	return nil
}

func currentSealer(rt workers.Runtime[*appRuntime]) *delivery.Sealer {
	if cur := rt.Current(); cur != nil {
		return cur.Sealer
	}
	return nil
}

// runUntilKeyChanges runs run with sealer until ctx ends or a reload changes the key.
func runUntilKeyChanges(ctx context.Context, rt workers.Runtime[*appRuntime], sealer *delivery.Sealer, run func(ctx context.Context, sealer *delivery.Sealer) error) error {
	sctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	defer func() {
		// The watch ends with the run, and runUntilKeyChanges returns after it: nothing of
		// this run outlives it.
		cancel()
		<-watched
	}()
	go func() {
		// Whatever ends this watch ends the run with it, which the loop above starts again.
		defer close(watched)
		defer cancel()
		if p := background.Call("secret key watch", func() {
			for background.Sleep(time.Duration(sealerCheck.Load()), sctx.Done()) && currentSealer(rt) == sealer {
			}
		}); p != nil {
			rt.Logger().Error("watching the secret key panicked; the sender restarts", zap.Error(p))
		}
	}()
	return run(sctx, sealer)
}

// ownerOf names this process's claims: its instance, or "worker" before it has one.
func ownerOf(rt workers.Runtime[*appRuntime]) string {
	if cur := rt.Current(); cur != nil && cur.Owner != nil {
		return cur.Owner.ID()
	}
	return "worker"
}

// runSender runs a Sender with sealer until ctx ends.
func runSender(ctx context.Context, rt workers.Runtime[*appRuntime], sealer *delivery.Sealer) error {
	s := &delivery.Sender{
		Store: rt.Store(), Sealer: sealer, Client: outboundOf(rt),
		Logger: rt.Logger(), Owner: ownerOf(rt),
		Disabled: func(ep store.WebhookEndpoint) {
			n, key := notify.WebhookEndpointDisabled(ep)
			outboxOf(rt).Go(n, key)
		},
	}
	if tune := deliveryTuning.Load(); tune != nil && tune.sender != nil {
		tune.sender(s)
	}
	return s.Run(ctx)
}

// deliveryTuning, when set, adjusts the webhook client's options as a configuration is
// provisioned and each Sender before it runs. Nothing sets it but tests, which reach
// receivers on loopback over plain http, shorten the retry schedule and move the
// senders' clock.
var deliveryTuning atomic.Pointer[deliveryTune]

type deliveryTune struct {
	client func(*delivery.ClientOptions)
	sender func(*delivery.Sender)
}

// outboundOf is the newest configuration's client for webhook receivers, or a client that
// admits public receivers only when there is none.
func outboundOf(rt workers.Runtime[*appRuntime]) *delivery.Client {
	if cur := rt.Current(); cur != nil && cur.Outbound != nil {
		return cur.Outbound
	}
	return delivery.NewClient(delivery.ClientOptions{})
}
