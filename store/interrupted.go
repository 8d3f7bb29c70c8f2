package store

import "time"

// A crash leaves a record.
//
// A request whose gateway dies before it settles (kill -9, a crash, a power cut) is
// recorded anyway, as interrupted, when another instance or the restarted gateway frees
// what the dead one held: so GET /generations?id= finds every generation id a client was
// given, and /activity counts it. What makes that possible is a durable trace of every
// request in flight, written without a transaction of its own:
//
//   - A request with a reservation of its own: the reservation row names its generation,
//     endpoint and model (ReserveParams). Releasing it unsettled (ReleaseOrphaned,
//     RetireInstance, ReleaseExpired) writes the interrupted record in the same
//     transaction.
//   - A request admitted from a key's lease has nothing durable of its own: the lease's
//     one reservation covers many requests. Its trace is an InFlight, handed to
//     BeginInFlight when the request is admitted and ended by EndInFlight once its
//     settlement returned. How a backend keeps it cheaply is its own (store/sqlite: a
//     record in the settlement journal; store/postgres: rows written in batches in the
//     background).
//
// An interrupted record is written only when no generation of that id exists: a request
// settled (or whose settlement was journaled) before the crash keeps its own record. It
// charges nothing, since the gateway cannot know what the upstream produced before the
// end; and the hold it had is released with the rest of the dead instance's.

// InFlight is what the store keeps of a request admitted from a lease while it runs.
type InFlight struct {
	GenerationID string
	WorkspaceID  string
	KeyID        string
	Endpoint     string
	Model        string
	// ReservationID is the lease's reservation, Owner the instance that holds it.
	ReservationID string
	Owner         string
	StartedAt     time.Time
}

// Interrupted error fields: the record of a request its gateway never finished.
const (
	InterruptedCode    = "interrupted"
	InterruptedOrigin  = "gateway"
	InterruptedMessage = "the gateway serving this request stopped (crashed or was killed) before it ended; the client received at most part of the answer, and nothing was charged"
)

// Interrupted is the record of the request f that its gateway never finished: the
// request as it began, no usage and no charge, Status 0 because what the client had
// received by then is unknown.
func Interrupted(f InFlight) Generation {
	return Generation{
		ID: f.GenerationID, WorkspaceID: f.WorkspaceID, KeyID: f.KeyID, Endpoint: f.Endpoint, Model: f.Model,
		FinishReason: InterruptedCode, ErrorCode: InterruptedCode, ErrorOrigin: InterruptedOrigin,
		ErrorMessage: InterruptedMessage, CreatedAt: f.StartedAt.UTC().Truncate(time.Millisecond),
	}
}
