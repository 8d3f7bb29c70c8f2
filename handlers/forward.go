package handlers

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/internal/readall"
	"github.com/modelgateway/caddy-modelgateway/providers"
)

// wireFormat is what the byte-forwarding path needs to know of a format to bill and
// decorate a complete answer: where its usage is and how to read it, and its finish reason.
type wireFormat struct {
	format      providers.WireFormat
	parseUsage  func(raw []byte) (providers.Usage, error)
	appendUsage usageEncoder
	finish      func(answer []byte) string
	// adapt, when set, rewrites a complete answer before it is read and decorated (an
	// embedding's encoding made the one the client asked for).
	adapt func(answer []byte) ([]byte, error)
	// meter, when set, meters the call from the complete answer (adapted) instead of
	// parseUsage: a media answer's usage by dimension (images, pages). Its error fails the
	// attempt as an unusable answer.
	meter func(c *call, answer []byte) error
	// lenient, when set, rewrites a complete answer before it is checked to be JSON: what
	// servers of the format are known to write that is not quite JSON.
	lenient func(answer []byte) []byte
}

// forward sends the rewritten body to an upstream of the surface's own format. A streamed
// answer goes to relay; a complete one is billed, decorated (the gateway's id, cost in its
// usage, meta) and written after the charge is recorded.
func (c *call) forward(w http.ResponseWriter, r *http.Request, rt Route, fw providers.Forwarder, up []byte, stream bool, wf wireFormat,
	relay func(began time.Time, resp *providers.RawResponse) error) error {
	began := c.g.Now()
	resp, err := fw.Forward(r.Context(), &providers.RawRequest{Format: wf.format, Body: up, Stream: stream, Header: passHeaders(r)})
	if err != nil {
		c.recordAttempt(rt, began, err)
		return err
	}
	c.headersArrived()
	if stream {
		return relay(began, resp)
	}
	return c.answerForwarded(w, r, rt, began, resp, wf)
}

// answerForwarded reads, bills and writes the complete answer of a forwarded request.
func (c *call) answerForwarded(w http.ResponseWriter, r *http.Request, rt Route, began time.Time, resp *providers.RawResponse, wf wireFormat) error {
	// The answer is read into, and decorated into, buffers reused across requests: nothing
	// keeps a slice of either once it is written (what is kept of it, its id and finish
	// reason, is copied out).
	in := answerBufs.Get()
	data, err := readall.Append((*in)[:0], io.LimitReader(resp.Body, maxUpstreamBody), resp.ContentLength, maxUpstreamBody)
	defer answerBufs.Put(in, data)
	_ = resp.Body.Close()
	if err == nil && wf.lenient != nil {
		data = wf.lenient(data)
	}
	if err == nil && !rawjson.Valid(data) {
		err = errors.New("the provider answered with invalid JSON")
	}
	if err != nil {
		ue := &providers.UpstreamError{Provider: rt.ProviderName, Status: resp.Status, Category: providers.CategoryServerError, Retryable: true, Message: err.Error(), Payload: providers.Preview(data), Err: err}
		c.recordAttempt(rt, began, ue)
		return ue
	}
	if wf.adapt != nil {
		data, err = wf.adapt(data)
	}
	if err == nil && wf.meter != nil {
		err = wf.meter(c, data)
	}
	if err != nil {
		ue := &providers.UpstreamError{Provider: rt.ProviderName, Status: resp.Status, Category: providers.CategoryServerError, Retryable: true, Message: err.Error(), Err: err}
		c.recordAttempt(rt, began, ue)
		return ue
	}
	c.recordAttempt(rt, began, nil)
	c.FirstByte = c.g.Now()
	c.route = &rt
	if wf.meter == nil {
		if raw, _ := rawjson.Get(data, "usage"); !rawjson.IsNull(raw) {
			if u, err := wf.parseUsage(raw); err == nil {
				c.reportTokens(u)
			}
		}
	}
	// An answer without usage shows the estimate it is charged.
	c.estimateUsage()
	if raw, _ := rawjson.Get(data, "id"); raw != nil {
		c.UpstreamID, _ = rawjson.String(raw)
	}
	c.FinishReason = wf.finish(data)
	return c.answerComplete(w, r, data, wf.appendUsage)
}

// answerComplete decorates a complete answer (the gateway's id, cost in its usage object,
// made with fallback when it has none, meta when asked), charges and records it, then
// writes it: charged and recorded before the client has the answer, so that an answer
// delivered is an answer billed, even if the process dies right after.
func (c *call) answerComplete(w http.ResponseWriter, r *http.Request, answer []byte, fallback usageEncoder) error {
	outBuf := answerBufs.Get()
	out, err := c.appendDecorated((*outBuf)[:0], answer, "id", "usage", fallback)
	defer answerBufs.Put(outBuf, out)
	if err != nil {
		return fmt.Errorf("decorating the response: %w", err)
	}
	c.Status = http.StatusOK
	if apiErr := c.settleAnswer(r.Context()); apiErr != nil {
		return apiErr
	}
	writeRawJSON(w, http.StatusOK, out)
	return nil
}
