package module

import (
	"context"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/delivery"
	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/internal/workers"
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
	warned := false
	for ctx.Err() == nil {
		sealer := currentSealer(rt)
		if sealer == nil {
			if !warned {
				rt.Logger().Warn("webhooks are off: no secret_key is configured, so no signing secret can be opened; events wait in the outbox")
				warned = true
			}
			background.Sleep(time.Duration(sealerCheck.Load()), ctx.Done())
			continue
		}
		warned = false
		if err := runSender(ctx, rt, sealer); err != nil {
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

// runSender runs a Sender with sealer until ctx ends or a reload changes the key.
func runSender(ctx context.Context, rt workers.Runtime[*appRuntime], sealer *delivery.Sealer) error {
	sctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	defer func() {
		// The watch ends with the Sender, and runSender returns after it: nothing of this
		// run outlives it.
		cancel()
		<-watched
	}()
	go func() {
		// Whatever ends this watch ends the Sender with it, which the loop above starts again.
		defer close(watched)
		defer cancel()
		if p := background.Call("deliveries key watch", func() {
			for background.Sleep(time.Duration(sealerCheck.Load()), sctx.Done()) && currentSealer(rt) == sealer {
			}
		}); p != nil {
			rt.Logger().Error("watching the secret key panicked; the sender restarts", zap.Error(p))
		}
	}()
	owner := "worker"
	if cur := rt.Current(); cur != nil && cur.Owner != nil {
		owner = cur.Owner.ID()
	}
	s := &delivery.Sender{
		Store: rt.Store(), Sealer: sealer, Client: outboundOf(rt),
		Logger: rt.Logger(), Owner: owner,
	}
	if tune := deliveryTuning.Load(); tune != nil && tune.sender != nil {
		tune.sender(s)
	}
	return s.Run(sctx)
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
