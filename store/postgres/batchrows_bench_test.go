package postgres

import (
	"testing"

	"github.com/modelgateway/caddy-modelgateway/store/storetest"
)

// BenchmarkRecordBatchRows records a batch's rows in writes of 100 new rows, as a
// batch's chunks do (storetest.BenchRecordBatchRows).
func BenchmarkRecordBatchRows(b *testing.B) {
	storetest.BenchRecordBatchRows(b, openStore(b, freshSchema(b)))
}
