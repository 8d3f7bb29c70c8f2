package batch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/files"
	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/jobs"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// DefaultNativePace is how often a native batch's upstream is asked where it stands.
const DefaultNativePace = 5 * time.Second

func (k *Kind) nativePaceTime() time.Duration {
	if d := time.Duration(k.nativePace.Load()); d > 0 {
		return d
	}
	return DefaultNativePace
}

// NativeRunner returns the BatchRunner of the route batch j runs on, in the newest
// configuration; false when it no longer has one.
func NativeRunner(env jobs.Env, j store.Job) (providers.BatchRunner, jobs.Route, bool) {
	if env.Route == nil {
		return nil, jobs.Route{}, false
	}
	rt, ok := env.Route(j)
	if !ok {
		return nil, rt, false
	}
	br, ok := rt.Upstream.(providers.BatchRunner)
	return br, rt, ok
}

// Rows streams the rows of a batch's input file for providers.BatchRequest.Rows, one line
// held at a time.
func Rows(ctx context.Context, b blobs.Store, workspaceID, fileID string) func(yield func(providers.BatchRow) error) error {
	return func(yield func(providers.BatchRow) error) error {
		rc, _, err := b.Open(ctx, files.BlobKey(workspaceID, fileID), 0, -1)
		if err != nil {
			return err
		}
		defer func() { _ = rc.Close() }()
		return ScanRows(rc, 0, 0, func(_ int, _ int64, l files.BatchLine) error {
			return yield(providers.BatchRow{CustomID: l.CustomID, Body: l.Body})
		})
	}
}

// pollNative moves a batch its upstream runs on: a cancellation asked is passed on once,
// the upstream's counts are shown, and at its end its results are priced, settled and
// recorded as rows, then written into the batch's files.
func (k *Kind) pollNative(ctx context.Context, env jobs.Env, j store.Job, spec Spec, st State) (jobs.Report, error) {
	runner, rt, ok := NativeRunner(env, j)
	if !ok {
		return jobs.Report{}, fmt.Errorf("route %s/%s of batch %s runs no batches in this configuration", j.Provider, j.UpstreamModel, j.ID)
	}
	s, now := env.Store, time.Now()
	if j.Status == StatusFinalizing && st.Ending != "" {
		return k.nativeEnd(ctx, env, j, spec, st, runner, rt, st.Ending)
	}
	cancelAt, err := s.BatchCancelRequested(ctx, j.ID)
	if err != nil {
		return jobs.Report{}, err
	}
	var bs *providers.BatchStatus
	if !cancelAt.IsZero() && st.CancellingAt == 0 {
		bs, err = runner.CancelBatch(ctx, j.NativeID, st.NativeState)
		if err == nil {
			st.CancellingAt = unix(cancelAt)
		}
	} else {
		bs, err = runner.PollBatch(ctx, j.NativeID, st.NativeState)
	}
	if err != nil {
		return jobs.Report{}, err
	}
	if bs.State != nil {
		st.NativeState = bs.State
	}
	st.Total, st.Completed, st.Failed = max(bs.Total, spec.Rows), bs.Completed, bs.Failed
	if st.InProgressAt == 0 && bs.Status != providers.BatchValidating {
		st.InProgressAt = unix(now)
	}
	done := bs.Completed + bs.Failed
	switch bs.Status {
	case providers.BatchCompleted, providers.BatchCancelled, providers.BatchExpired, providers.BatchFailed:
		// Its results are collected by the next poll, under the longer bound of a
		// finalizing one.
		st.Ending = bs.Status
		if bs.Status == providers.BatchFailed {
			st.Errors = append(st.Errors, Error{Code: firstOf(bs.ErrorCode, "batch_failed"), Message: firstOf(bs.ErrorMessage, "the provider failed the batch")})
		}
		if st.FinalizingAt == 0 {
			st.FinalizingAt = unix(now)
		}
		return report(StatusFinalizing, progress(done, st.Total), time.Millisecond, st), nil
	case providers.BatchCancelling:
		return report(StatusCancelling, progress(done, st.Total), k.nativePaceTime(), st), nil
	case providers.BatchValidating:
		return report(StatusValidating, 0, k.nativePaceTime(), st), nil
	}
	if st.CancellingAt != 0 {
		return report(StatusCancelling, progress(done, st.Total), k.nativePaceTime(), st), nil
	}
	return report(StatusInProgress, progress(done, st.Total), k.nativePaceTime(), st), nil
}

func firstOf(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// nativeEnd collects an ended native batch's results: each priced at the route's price,
// settled against the batch's reservation (idempotently, by the row's generation id) and
// recorded as the row's outcome; then the files are written and the batch ends.
func (k *Kind) nativeEnd(ctx context.Context, env jobs.Env, j store.Job, spec Spec, st State, runner providers.BatchRunner, rt jobs.Route, status string) (jobs.Report, error) {
	s := env.Store
	index, err := rowIndex(ctx, env, j, spec)
	if err != nil {
		return jobs.Report{}, err
	}
	perRow := int64(0)
	if spec.Rows > 0 {
		perRow = (spec.EstimatedNanos + int64(spec.Rows) - 1) / int64(spec.Rows)
	}
	err = runner.BatchResults(ctx, j.NativeID, st.NativeState, func(res providers.BatchResult) error {
		i, ok := index[res.CustomID]
		if !ok {
			return nil // not one of the batch's rows: nothing to record it under
		}
		row := store.BatchRow{BatchID: j.ID, Index: i, CustomID: res.CustomID, StatusCode: res.StatusCode,
			RequestID: RowGenerationID(j.ID, i), Body: res.Body, ErrorCode: res.ErrorCode, ErrorMessage: res.ErrorMessage}
		if res.StatusCode == http.StatusOK {
			// The upstream bills the rows of its own batches at its batch prices.
			cost, err := settleNative(ctx, s, j, spec, rt.Price.Batch(), res, i, perRow)
			if err != nil {
				return err
			}
			row.CostNanos = cost
		}
		_, err := s.RecordBatchRow(ctx, row)
		return err
	})
	if err != nil {
		return jobs.Report{}, fmt.Errorf("collecting the results of native batch %s: %w", j.NativeID, err)
	}
	return k.finish(ctx, env, j, st, status)
}

// rowIndex maps each custom_id of the batch's input file to its row's index.
func rowIndex(ctx context.Context, env jobs.Env, j store.Job, spec Spec) (map[string]int, error) {
	if env.Blobs == nil {
		return nil, errors.New("the gateway has no blob store to read the batch's input file from")
	}
	rc, _, err := env.Blobs.Open(ctx, files.BlobKey(j.WorkspaceID, spec.InputFileID), 0, -1)
	if err != nil {
		return nil, fmt.Errorf("reading the input file of batch %s: %w", j.ID, err)
	}
	defer func() { _ = rc.Close() }()
	index := make(map[string]int, spec.Rows)
	err = ScanRows(rc, 0, 0, func(i int, _ int64, l files.BatchLine) error {
		index[l.CustomID] = i
		return nil
	})
	return index, err
}

// settleNative charges a native row's answer at the route's price against the batch's
// reservation, and returns what it was charged. An answer without its usage, or one the
// price cannot price, is charged the row's share of the estimate: never nothing.
func settleNative(ctx context.Context, s store.Store, j store.Job, spec Spec, price pricing.Price, res providers.BatchResult, i int, perRow int64) (int64, error) {
	gen := &store.Generation{
		ID: RowGenerationID(j.ID, i), WorkspaceID: j.WorkspaceID, KeyID: j.KeyID, Endpoint: PathOf(spec.Endpoint),
		Model: j.Model, Provider: j.Provider, UpstreamModel: j.UpstreamModel, UpstreamID: res.RequestID, Status: res.StatusCode,
	}
	var lines []store.CostLine
	var cost int64
	var err error
	if res.UsageKnown {
		u := res.Usage.Metered()
		lines, cost, err = price.Cost(u)
		gen.InputTokens, gen.CacheReadTokens, gen.CacheWriteTokens = res.Usage.Input, res.Usage.CacheRead, res.Usage.CacheWrite
		gen.OutputTokens, gen.ReasoningTokens = res.Usage.Output, res.Usage.Reasoning
	}
	if !res.UsageKnown || err != nil {
		lines = []store.CostLine{{Dimension: pricing.DimRequest, Quantity: 1, UnitPriceNanos: perRow, Nanos: perRow}}
		cost = perRow
	}
	gen.CostLines, gen.CostNanos = lines, cost
	stored, err := s.SettleLease(ctx, store.SettleLeaseParams{ReservationID: j.ReservationID, HeldNanos: cost, Generation: gen})
	if errors.Is(err, store.ErrNotFound) {
		// The reservation is gone (expired): the row is charged from the balance, once.
		stored, err = s.Settle(ctx, store.SettleParams{Generation: gen})
		if errors.Is(err, store.ErrConflict) {
			stored, err = s.GetGeneration(ctx, j.WorkspaceID, gen.ID)
		}
	}
	if err != nil {
		return 0, fmt.Errorf("settling row %d of batch %s: %w", i, j.ID, err)
	}
	return stored.CostNanos, nil
}
