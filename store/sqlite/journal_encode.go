package sqlite

import (
	"strconv"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// journalGen is a generation as a journal record holds it (short keys, the time in
// milliseconds).
type journalGen struct {
	ID               string           `json:"id"`
	WorkspaceID      string           `json:"ws"`
	KeyID            string           `json:"key"`
	Endpoint         string           `json:"ep"`
	Model            string           `json:"m"`
	Provider         string           `json:"p"`
	UpstreamModel    string           `json:"um"`
	UpstreamID       string           `json:"uid"`
	Streamed         bool             `json:"st"`
	Cancelled        bool             `json:"cx"`
	Status           int              `json:"s"`
	FinishReason     string           `json:"fr"`
	ErrorCode        string           `json:"ec"`
	ErrorMessage     string           `json:"em"`
	InputTokens      int64            `json:"it"`
	CacheReadTokens  int64            `json:"cr"`
	CacheWriteTokens int64            `json:"cw"`
	OutputTokens     int64            `json:"ot"`
	ReasoningTokens  int64            `json:"rt"`
	CostNanos        int64            `json:"cn"`
	UnbilledNanos    int64            `json:"ub"`
	CostLines        []store.CostLine `json:"cl"`
	Attempts         []store.Attempt  `json:"at"`
	LatencyMs        int64            `json:"lat"`
	GenerationMs     int64            `json:"gms"`
	EndToEndMs       int64            `json:"e2e"`
	CreatedAtMs      int64            `json:"ca"`
}

func (j *journalGen) generation() store.Generation {
	return store.Generation{
		ID: j.ID, WorkspaceID: j.WorkspaceID, KeyID: j.KeyID, Endpoint: j.Endpoint, Model: j.Model,
		Provider: j.Provider, UpstreamModel: j.UpstreamModel, UpstreamID: j.UpstreamID,
		Streamed: j.Streamed, Cancelled: j.Cancelled, Status: j.Status, FinishReason: j.FinishReason,
		ErrorCode: j.ErrorCode, ErrorMessage: j.ErrorMessage,
		InputTokens: j.InputTokens, CacheReadTokens: j.CacheReadTokens, CacheWriteTokens: j.CacheWriteTokens,
		OutputTokens: j.OutputTokens, ReasoningTokens: j.ReasoningTokens,
		CostNanos: j.CostNanos, UnbilledNanos: j.UnbilledNanos, CostLines: j.CostLines, Attempts: j.Attempts,
		LatencyMs: j.LatencyMs, GenerationMs: j.GenerationMs, EndToEndMs: j.EndToEndMs,
		CreatedAt: fromMillis(j.CreatedAtMs),
	}
}

// appendJournalRecord appends r as the JSON of a journalRecord.
func appendJournalRecord(b []byte, r *settleReq) []byte {
	g := r.g
	b = append(b, `{"r":`...)
	b = rawjson.AppendString(b, r.reservationID)
	b = appendIntField(b, `,"h":`, r.held)
	b = append(b, `,"x":`...)
	b = strconv.AppendBool(b, r.release)
	b = appendIntField(b, `,"c":`, r.cost)
	b = appendIntField(b, `,"n":`, millis(r.now))
	b = append(b, `,"g":{"id":`...)
	b = rawjson.AppendString(b, g.ID)
	for _, f := range [...]struct {
		key string
		v   string
	}{{`,"ws":`, g.WorkspaceID}, {`,"key":`, g.KeyID}, {`,"ep":`, g.Endpoint}, {`,"m":`, g.Model},
		{`,"p":`, g.Provider}, {`,"um":`, g.UpstreamModel}, {`,"uid":`, g.UpstreamID},
		{`,"fr":`, g.FinishReason}, {`,"ec":`, g.ErrorCode}, {`,"em":`, g.ErrorMessage}} {
		b = append(b, f.key...)
		b = rawjson.AppendString(b, f.v)
	}
	b = append(b, `,"st":`...)
	b = strconv.AppendBool(b, g.Streamed)
	b = append(b, `,"cx":`...)
	b = strconv.AppendBool(b, g.Cancelled)
	for _, f := range [...]struct {
		key string
		v   int64
	}{{`,"s":`, int64(g.Status)}, {`,"it":`, g.InputTokens}, {`,"cr":`, g.CacheReadTokens},
		{`,"cw":`, g.CacheWriteTokens}, {`,"ot":`, g.OutputTokens}, {`,"rt":`, g.ReasoningTokens},
		{`,"cn":`, g.CostNanos}, {`,"ub":`, g.UnbilledNanos}, {`,"lat":`, g.LatencyMs},
		{`,"gms":`, g.GenerationMs}, {`,"e2e":`, g.EndToEndMs}, {`,"ca":`, millis(g.CreatedAt)}} {
		b = appendIntField(b, f.key, f.v)
	}
	b = append(b, `,"cl":`...)
	b = store.AppendCostLinesJSON(b, g.CostLines)
	b = append(b, `,"at":`...)
	b = store.AppendAttemptsJSON(b, g.Attempts)
	return append(b, "}}"...)
}

func appendIntField(b []byte, key string, v int64) []byte {
	return strconv.AppendInt(append(b, key...), v, 10)
}
