package batch

import (
	"context"
	"fmt"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// A batch's row records (its rows' outcomes, their counts, its cancellation) are what its
// end reads to write its output and error files. Once the job's terminal state is
// committed, with the files' ids, the request counts and the cost in its result, which
// is all that GET /batches/{id} and the job read from then on, they are dead weight:
// up to 50,000 rows a batch. A sweep removes them, rather than the batch's end: the end is
// committed by the jobs engine (the job and its claim in one write), after which the kind
// runs nothing of its own, and a crash right after that commit would leave the rows to a
// sweep anyway; so one sweep covers every end (completed, cancelled, expired, failed, a
// job the engine failed after its attempts) and every crash, and a row recorded after the
// end (a row in flight when a batch failed) is removed by the next pass. It waits
// DefaultRowsGrace after the end, so that whoever reads the rows as the end commits (an
// operator's look, cmd/gatewaybench reading its batch's rows' times) does not lose them
// underfoot; the end itself never reads them again once committed.

// DefaultRowsGrace is how long after its end a batch keeps its row records.
const DefaultRowsGrace = time.Minute

// SweepPage is how many ended batches one SweepRows clears at most.
const SweepPage = 100

// SweepRows removes the row records of up to page batches (at most store.MaxBatchRowPage)
// whose job ended before endedBefore, those that ended first first, and returns how many
// it cleared: page of them means more may be due. Several instances may sweep at once:
// removing twice is harmless.
func SweepRows(ctx context.Context, s store.BatchRows, endedBefore time.Time, page int) (int, error) {
	ended, err := s.EndedBatchesWithRows(ctx, endedBefore, page)
	if err != nil {
		return 0, fmt.Errorf("listing the ended batches with rows: %w", err)
	}
	for i, id := range ended {
		if err := s.DeleteBatchRows(ctx, id); err != nil {
			return i, err
		}
	}
	return len(ended), nil
}
