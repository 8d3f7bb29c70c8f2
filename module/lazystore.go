package module

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// lazyStore is a configuration's store, opened on first use (the app's Start) rather than in
// Provision: Provision also runs under `caddy validate` and for a reload that is then thrown
// away, and opening a store migrates its schema and, on SQLite, replays the settlement
// journal. Until it is open every call opens it, and a failure to open is the call's error,
// tried again by the next call.
type lazyStore struct {
	open func(ctx context.Context) (store.Store, error)
	mu   sync.Mutex
	s    atomic.Pointer[store.Store]
}

func newLazyStore(open func(ctx context.Context) (store.Store, error)) *lazyStore {
	return &lazyStore{open: open}
}

// get returns the open store, opening it first if need be.
func (l *lazyStore) RecordWebhookOutcome(ctx context.Context, a1 string, a2 string, a3 store.WebhookOutcome) (store.WebhookEndpoint, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.WebhookEndpoint
		return zero, err
	}
	return s.RecordWebhookOutcome(ctx, a1, a2, a3)
}

func (l *lazyStore) get(ctx context.Context) (store.Store, error) {
	if s := l.s.Load(); s != nil {
		return *s, nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.s.Load(); s != nil {
		return *s, nil
	}
	s, err := l.open(ctx)
	if err != nil {
		return nil, err
	}
	l.s.Store(&s)
	return s, nil
}

// Close closes the store if it was opened.
func (l *lazyStore) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if s := l.s.Load(); s != nil {
		return (*s).Close()
	}
	return nil
}

// The methods below open the store, then call it.

func (l *lazyStore) Activity(ctx context.Context, a1 store.ActivityQuery) ([]store.ActivityRow, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero []store.ActivityRow
		return zero, err
	}
	return s.Activity(ctx, a1)
}

func (l *lazyStore) ActivityTotals(ctx context.Context, a1 store.ActivityQuery) (store.ActivityRow, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.ActivityRow
		return zero, err
	}
	return s.ActivityTotals(ctx, a1)
}

func (l *lazyStore) AddCredits(ctx context.Context, a1 string, a2 int64, a3 string) (store.Balance, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.Balance
		return zero, err
	}
	return s.AddCredits(ctx, a1, a2, a3)
}

func (l *lazyStore) AdvanceJob(ctx context.Context, a1 store.Claim, a2 store.JobUpdate, a3 []store.Event, a4 time.Time) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.AdvanceJob(ctx, a1, a2, a3, a4)
}

func (l *lazyStore) Claim(ctx context.Context, a1 store.ClaimParams) ([]store.ClaimedItem, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero []store.ClaimedItem
		return zero, err
	}
	return s.Claim(ctx, a1)
}

func (l *lazyStore) Complete(ctx context.Context, a1 store.Claim) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.Complete(ctx, a1)
}

func (l *lazyStore) CreateJob(ctx context.Context, a1 store.Job, a2 time.Time, a3 []store.Event) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.CreateJob(ctx, a1, a2, a3)
}

func (l *lazyStore) DeleteJob(ctx context.Context, a1 string, a2 string) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.DeleteJob(ctx, a1, a2)
}

func (l *lazyStore) CreateKey(ctx context.Context, a1 store.Key) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.CreateKey(ctx, a1)
}

func (l *lazyStore) CreateWebhookEndpoint(ctx context.Context, a1 store.WebhookEndpoint) (store.WebhookEndpoint, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.WebhookEndpoint
		return zero, err
	}
	return s.CreateWebhookEndpoint(ctx, a1)
}

func (l *lazyStore) CreateWorkspace(ctx context.Context, a1 store.Workspace) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.CreateWorkspace(ctx, a1)
}

func (l *lazyStore) DeleteWebhookEndpoint(ctx context.Context, a1 string, a2 string) (store.WebhookEndpoint, error) {
	s, err := l.get(ctx)
	if err != nil {
		return store.WebhookEndpoint{}, err
	}
	return s.DeleteWebhookEndpoint(ctx, a1, a2)
}

func (l *lazyStore) Enqueue(ctx context.Context, a1 store.EnqueueParams) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.Enqueue(ctx, a1)
}

func (l *lazyStore) Extend(ctx context.Context, a1 store.Claim, a2 time.Duration) (time.Time, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero time.Time
		return zero, err
	}
	return s.Extend(ctx, a1, a2)
}

func (l *lazyStore) GetBalance(ctx context.Context, a1 string) (store.Balance, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.Balance
		return zero, err
	}
	return s.GetBalance(ctx, a1)
}

func (l *lazyStore) GetDelivery(ctx context.Context, a1 string, a2 string) (store.Delivery, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.Delivery
		return zero, err
	}
	return s.GetDelivery(ctx, a1, a2)
}

func (l *lazyStore) GetGeneration(ctx context.Context, a1 string, a2 string) (store.Generation, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.Generation
		return zero, err
	}
	return s.GetGeneration(ctx, a1, a2)
}

func (l *lazyStore) GetJob(ctx context.Context, a1 string, a2 string) (store.Job, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.Job
		return zero, err
	}
	return s.GetJob(ctx, a1, a2)
}

func (l *lazyStore) GetKey(ctx context.Context, a1 string) (store.Key, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.Key
		return zero, err
	}
	return s.GetKey(ctx, a1)
}

func (l *lazyStore) GetWebhookEndpoint(ctx context.Context, a1 string, a2 string) (store.WebhookEndpoint, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.WebhookEndpoint
		return zero, err
	}
	return s.GetWebhookEndpoint(ctx, a1, a2)
}

func (l *lazyStore) GetWorkspace(ctx context.Context, a1 string) (store.Workspace, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.Workspace
		return zero, err
	}
	return s.GetWorkspace(ctx, a1)
}

func (l *lazyStore) Heartbeat(ctx context.Context, a1 string) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.Heartbeat(ctx, a1)
}

func (l *lazyStore) KeySpend(ctx context.Context, a1 string, a2 time.Time) (store.KeySpend, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.KeySpend
		return zero, err
	}
	return s.KeySpend(ctx, a1, a2)
}

func (l *lazyStore) ListAttempts(ctx context.Context, a1 store.AttemptQuery) ([]store.DeliveryAttempt, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero []store.DeliveryAttempt
		return zero, err
	}
	return s.ListAttempts(ctx, a1)
}

func (l *lazyStore) JobDeliveryStats(ctx context.Context, a1 string, a2 string) (store.DeliveryStats, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.DeliveryStats
		return zero, err
	}
	return s.JobDeliveryStats(ctx, a1, a2)
}

func (l *lazyStore) ListChildWorkspaces(ctx context.Context, a1 string, a2 store.Page) ([]store.Workspace, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero []store.Workspace
		return zero, err
	}
	return s.ListChildWorkspaces(ctx, a1, a2)
}

func (l *lazyStore) ListJobs(ctx context.Context, a1 store.JobQuery) ([]store.Job, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero []store.Job
		return zero, err
	}
	return s.ListJobs(ctx, a1)
}

func (l *lazyStore) ListKeys(ctx context.Context, a1 string, a2 store.Page) ([]store.Key, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero []store.Key
		return zero, err
	}
	return s.ListKeys(ctx, a1, a2)
}

func (l *lazyStore) ListWebhookEndpoints(ctx context.Context, a1 string, a2 store.Page) ([]store.WebhookEndpoint, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero []store.WebhookEndpoint
		return zero, err
	}
	return s.ListWebhookEndpoints(ctx, a1, a2)
}

func (l *lazyStore) ListWorkspaces(ctx context.Context, a1 store.Page) ([]store.Workspace, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero []store.Workspace
		return zero, err
	}
	return s.ListWorkspaces(ctx, a1)
}

func (l *lazyStore) Ping(ctx context.Context) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.Ping(ctx)
}

func (l *lazyStore) SkipDelivery(ctx context.Context, a1 store.Claim) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.SkipDelivery(ctx, a1)
}

func (l *lazyStore) RecordAttempt(ctx context.Context, a1 store.Claim, a2 store.DeliveryAttempt, a3 time.Time) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.RecordAttempt(ctx, a1, a2, a3)
}

func (l *lazyStore) RegisterInstance(ctx context.Context, a1 string) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.RegisterInstance(ctx, a1)
}

func (l *lazyStore) ReleaseExpired(ctx context.Context, a1 time.Time) (int, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero int
		return zero, err
	}
	return s.ReleaseExpired(ctx, a1)
}

func (l *lazyStore) ReleaseOrphaned(ctx context.Context, a1 string, a2 time.Duration) (int, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero int
		return zero, err
	}
	return s.ReleaseOrphaned(ctx, a1, a2)
}

func (l *lazyStore) ReleaseReservation(ctx context.Context, a1 string) (int64, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero int64
		return zero, err
	}
	return s.ReleaseReservation(ctx, a1)
}

func (l *lazyStore) Reserve(ctx context.Context, a1 store.ReserveParams) (store.Reservation, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.Reservation
		return zero, err
	}
	return s.Reserve(ctx, a1)
}

func (l *lazyStore) RetireInstance(ctx context.Context, a1 string) (int, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero int
		return zero, err
	}
	return s.RetireInstance(ctx, a1)
}

func (l *lazyStore) Remove(ctx context.Context, a1 string, a2 string) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.Remove(ctx, a1, a2)
}

func (l *lazyStore) Requeue(ctx context.Context, a1 store.Claim, a2 time.Time) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.Requeue(ctx, a1, a2)
}

func (l *lazyStore) Reschedule(ctx context.Context, a1 string, a2 string, a3 time.Time) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.Reschedule(ctx, a1, a2, a3)
}

func (l *lazyStore) Retry(ctx context.Context, a1 store.Claim, a2 time.Time, a3 string) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.Retry(ctx, a1, a2, a3)
}

func (l *lazyStore) RevokeKey(ctx context.Context, a1 string, a2 time.Time) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.RevokeKey(ctx, a1, a2)
}

func (l *lazyStore) RotateWebhookSecret(ctx context.Context, a1 string, a2 string, a3 []byte, a4 time.Time) (store.WebhookEndpoint, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.WebhookEndpoint
		return zero, err
	}
	return s.RotateWebhookSecret(ctx, a1, a2, a3, a4)
}

func (l *lazyStore) Settle(ctx context.Context, a1 store.SettleParams) (store.Generation, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.Generation
		return zero, err
	}
	return s.Settle(ctx, a1)
}

func (l *lazyStore) SettleLease(ctx context.Context, a1 store.SettleLeaseParams) (store.Generation, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.Generation
		return zero, err
	}
	return s.SettleLease(ctx, a1)
}

func (l *lazyStore) SetWorkspaceAsyncAccess(ctx context.Context, a1 string, a2 bool) (store.Workspace, error) {
	s, err := l.get(ctx)
	if err != nil {
		return store.Workspace{}, err
	}
	return s.SetWorkspaceAsyncAccess(ctx, a1, a2)
}

func (l *lazyStore) UnpolledJobs(ctx context.Context, a1 int) ([]store.Job, error) {
	s, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.UnpolledJobs(ctx, a1)
}

func (l *lazyStore) UpdateKey(ctx context.Context, a1 string, a2 string, a3 store.KeyUpdate) (store.Key, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.Key
		return zero, err
	}
	return s.UpdateKey(ctx, a1, a2, a3)
}

func (l *lazyStore) UpdateWebhookEndpoint(ctx context.Context, a1 string, a2 string, a3 store.WebhookEndpointUpdate) (store.WebhookEndpoint, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero store.WebhookEndpoint
		return zero, err
	}
	return s.UpdateWebhookEndpoint(ctx, a1, a2, a3)
}

func (l *lazyStore) Watch(ctx context.Context) (<-chan store.JobChange, error) {
	s, err := l.get(ctx)
	if err != nil {
		var zero <-chan store.JobChange
		return zero, err
	}
	return s.Watch(ctx)
}

// BeginInFlight keeps nothing until the store is open: a request is admitted from a lease
// only once the store answered.
func (l *lazyStore) BeginInFlight(f store.InFlight) uint64 {
	if s := l.s.Load(); s != nil {
		return (*s).BeginInFlight(f)
	}
	return 0
}

func (l *lazyStore) EndInFlight(token uint64) {
	if s := l.s.Load(); s != nil {
		(*s).EndInFlight(token)
	}
}

var _ store.Store = (*lazyStore)(nil)

func (l *lazyStore) CreateFile(ctx context.Context, f store.File) (store.File, error) {
	s, err := l.get(ctx)
	if err != nil {
		return store.File{}, err
	}
	return s.CreateFile(ctx, f)
}

func (l *lazyStore) GetFile(ctx context.Context, workspaceID, id string) (store.File, error) {
	s, err := l.get(ctx)
	if err != nil {
		return store.File{}, err
	}
	return s.GetFile(ctx, workspaceID, id)
}

func (l *lazyStore) DeleteFile(ctx context.Context, workspaceID, id string) (store.File, error) {
	s, err := l.get(ctx)
	if err != nil {
		return store.File{}, err
	}
	return s.DeleteFile(ctx, workspaceID, id)
}

func (l *lazyStore) DueFiles(ctx context.Context, now time.Time, limit int) ([]store.File, error) {
	s, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.DueFiles(ctx, now, limit)
}

func (l *lazyStore) PurgeFile(ctx context.Context, workspaceID, id string) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.PurgeFile(ctx, workspaceID, id)
}

func (l *lazyStore) CreateNotificationDestination(ctx context.Context, a1 store.NotificationDestination) (store.NotificationDestination, error) {
	s, err := l.get(ctx)
	if err != nil {
		return store.NotificationDestination{}, err
	}
	return s.CreateNotificationDestination(ctx, a1)
}

func (l *lazyStore) GetNotificationDestination(ctx context.Context, a1 string, a2 string) (store.NotificationDestination, error) {
	s, err := l.get(ctx)
	if err != nil {
		return store.NotificationDestination{}, err
	}
	return s.GetNotificationDestination(ctx, a1, a2)
}

func (l *lazyStore) ListNotificationDestinations(ctx context.Context, a1 string, a2 store.Page) ([]store.NotificationDestination, error) {
	s, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.ListNotificationDestinations(ctx, a1, a2)
}

func (l *lazyStore) UpdateNotificationDestination(ctx context.Context, a1 string, a2 string, a3 store.NotificationDestinationUpdate) (store.NotificationDestination, error) {
	s, err := l.get(ctx)
	if err != nil {
		return store.NotificationDestination{}, err
	}
	return s.UpdateNotificationDestination(ctx, a1, a2, a3)
}

func (l *lazyStore) DeleteNotificationDestination(ctx context.Context, a1 string, a2 string) (store.NotificationDestination, error) {
	s, err := l.get(ctx)
	if err != nil {
		return store.NotificationDestination{}, err
	}
	return s.DeleteNotificationDestination(ctx, a1, a2)
}

func (l *lazyStore) RecordNotificationOutcome(ctx context.Context, a1 string, a2 string, a3 store.NotificationOutcome) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.RecordNotificationOutcome(ctx, a1, a2, a3)
}

func (l *lazyStore) NotificationRoutes(ctx context.Context, a1 string) (map[string][]string, error) {
	s, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.NotificationRoutes(ctx, a1)
}

func (l *lazyStore) SetNotificationRoute(ctx context.Context, a1 string, a2 string, a3 []string) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.SetNotificationRoute(ctx, a1, a2, a3)
}

func (l *lazyStore) NotificationSettings(ctx context.Context, a1 string) (store.NotificationSettings, error) {
	s, err := l.get(ctx)
	if err != nil {
		return store.NotificationSettings{}, err
	}
	return s.NotificationSettings(ctx, a1)
}

func (l *lazyStore) SetLowBalanceThreshold(ctx context.Context, a1 string, a2 *int64) (store.NotificationSettings, error) {
	s, err := l.get(ctx)
	if err != nil {
		return store.NotificationSettings{}, err
	}
	return s.SetLowBalanceThreshold(ctx, a1, a2)
}

func (l *lazyStore) FireLowBalance(ctx context.Context, a1 time.Duration) ([]store.LowBalance, error) {
	s, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.FireLowBalance(ctx, a1)
}

func (l *lazyStore) RecordBatchRow(ctx context.Context, r store.BatchRow) (bool, error) {
	s, err := l.get(ctx)
	if err != nil {
		return false, err
	}
	return s.RecordBatchRow(ctx, r)
}

func (l *lazyStore) RecordBatchRows(ctx context.Context, rows []store.BatchRow) (int, error) {
	s, err := l.get(ctx)
	if err != nil {
		return 0, err
	}
	return s.RecordBatchRows(ctx, rows)
}

func (l *lazyStore) BatchRowsDone(ctx context.Context, batchID string, from, to int) ([]int, error) {
	s, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.BatchRowsDone(ctx, batchID, from, to)
}

func (l *lazyStore) CountBatchRows(ctx context.Context, batchID string) (store.BatchRowCounts, error) {
	s, err := l.get(ctx)
	if err != nil {
		return store.BatchRowCounts{}, err
	}
	return s.CountBatchRows(ctx, batchID)
}

func (l *lazyStore) ListBatchRows(ctx context.Context, batchID string, after, limit int) ([]store.BatchRow, error) {
	s, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.ListBatchRows(ctx, batchID, after, limit)
}

func (l *lazyStore) DeleteBatchRows(ctx context.Context, batchID string) error {
	s, err := l.get(ctx)
	if err != nil {
		return err
	}
	return s.DeleteBatchRows(ctx, batchID)
}

func (l *lazyStore) EndedBatchesWithRows(ctx context.Context, endedBefore time.Time, limit int) ([]string, error) {
	s, err := l.get(ctx)
	if err != nil {
		return nil, err
	}
	return s.EndedBatchesWithRows(ctx, endedBefore, limit)
}

func (l *lazyStore) RequestBatchCancel(ctx context.Context, batchID string) (time.Time, error) {
	s, err := l.get(ctx)
	if err != nil {
		return time.Time{}, err
	}
	return s.RequestBatchCancel(ctx, batchID)
}

func (l *lazyStore) BatchCancelRequested(ctx context.Context, batchID string) (time.Time, error) {
	s, err := l.get(ctx)
	if err != nil {
		return time.Time{}, err
	}
	return s.BatchCancelRequested(ctx, batchID)
}
