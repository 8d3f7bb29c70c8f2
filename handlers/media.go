package handlers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/modelgateway/caddy-modelgateway/internal/bufs"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/internal/upload"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
	"github.com/modelgateway/caddy-modelgateway/providers/sse"
)

// What the media endpoints (audio, images, OCR) share: multipart uploads read as they
// arrive and sent on without being held in memory, binary answers relayed as the upstream
// produces them, and media event streams relayed event by event with the usage read from
// their final event.

// Upload limits of the endpoints that take files, unless a route sets max_upload.
const (
	DefaultAudioUpload int64 = 25 << 20
	DefaultImageUpload int64 = 50 << 20
)

// maxMediaEvent bounds one event of a media stream held while it is relayed: a partial
// image is megabytes of base64.
const maxMediaEvent = 64 << 20

// uploadLimit is the largest upload rt takes at an endpoint whose default is def.
func (rt Route) uploadLimit(def int64) int64 {
	if rt.MaxUpload > 0 {
		return rt.MaxUpload
	}
	return def
}

// largestUpload is the largest upload limit of routes (those with cp when cp is set), 0
// when none is left.
func largestUpload(routes []Route, cp *capability, def int64) int64 {
	var most int64
	for _, rt := range routes {
		if cp == nil || cp.supports(rt) {
			most = max(most, rt.uploadLimit(def))
		}
	}
	return most
}

// limitForm holds a form to limit: a body announced (length) or already read past it is
// refused with 413.
func (g *Gateway) limitForm(form *upload.Form, limit, length int64) *APIError {
	if length > limit {
		return g.uploadError(&upload.TooLargeError{Limit: limit})
	}
	if err := form.SetLimit(limit); err != nil {
		return g.uploadError(err)
	}
	return nil
}

// uploadCeiling is the largest upload any route with the capability takes: all a multipart
// body may be before its model, and so its routes, are known.
func (g *Gateway) uploadCeiling(cp *capability, def int64) int64 {
	most, _ := g.uploadLimits(cp, def)
	return most
}

// uploadLimits is the largest and the smallest upload limit of the routes with the
// capability (def for both when none has it).
func (g *Gateway) uploadLimits(cp *capability, def int64) (most, least int64) {
	for _, m := range g.Registry.Models() {
		for _, rt := range m.Routes {
			if cp.supports(rt) {
				l := rt.uploadLimit(def)
				most = max(most, l)
				if least == 0 || l < least {
					least = l
				}
			}
		}
	}
	if most == 0 {
		return def, def
	}
	return most, least
}

// readForm starts reading a multipart request: its fields up to the first file that could
// be streamed, within the largest upload any route of the endpoint takes. The caller closes
// the form (which removes its spool file).
func (g *Gateway) readForm(r *http.Request, cp *capability, def int64) (*upload.Form, *APIError) {
	boundary, err := upload.Boundary(r.Header.Get("Content-Type"))
	if err != nil {
		return nil, newError(http.StatusBadRequest, CodeValidation, cp.endpoint+" takes a multipart/form-data body (a file and its fields), as the OpenAI SDKs send it: "+err.Error())
	}
	limit := g.uploadCeiling(cp, def)
	form, err := upload.Parse(r.Body, boundary, upload.Options{Limit: limit, Length: r.ContentLength, TempDir: g.UploadDir})
	if err != nil {
		return nil, g.beyondCeiling(err, cp, def)
	}
	if apiErr := g.fitModelUpload(form, r.ContentLength, cp, def); apiErr != nil {
		_ = form.Close()
		return nil, apiErr
	}
	return form, nil
}

// spoolForm reads the rest of a form read by readForm into its spool.
func (g *Gateway) spoolForm(form *upload.Form, cp *capability, def int64) *APIError {
	if err := form.Spool(); err != nil {
		return g.beyondCeiling(err, cp, def)
	}
	return nil
}

// beyondCeiling answers a form that failed while read within the endpoint's largest upload
// limit: its model, and so its own limit, may not be known yet. Where routes' limits
// differ, the limit named is said to be the largest, not the model's.
func (g *Gateway) beyondCeiling(err error, cp *capability, def int64) *APIError {
	var tl *upload.TooLargeError
	if errors.As(err, &tl) && tl.Field == "" {
		if most, least := g.uploadLimits(cp, def); most == least {
			return g.uploadError(err)
		}
		return newError(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, fmt.Sprintf("the upload is larger than any model of %s takes: the largest max_upload of its routes is %s (%d bytes)", cp.endpoint, formatBytes(tl.Limit), tl.Limit))
	}
	return g.uploadError(err)
}

// fitModelUpload lowers the form's limit to its model's when the model field came before
// the files (curl in the command's order), so that an upload past it is refused as soon as
// it is announced or read, naming the model's limit.
func (g *Gateway) fitModelUpload(form *upload.Form, length int64, cp *capability, def int64) *APIError {
	name, ok := form.Value("model")
	if !ok {
		return nil
	}
	m, ok := g.Registry.Lookup(name)
	if !ok {
		return nil
	}
	limit := largestUpload(m.Routes, cp, def)
	if limit == 0 {
		return nil
	}
	return g.limitForm(form, limit, length)
}

// uploadError answers a failed read of a multipart body: 413 past its limit, 400 for a
// malformed form or a body the client did not finish sending, 408 for one it sent too
// slowly, 500 when the gateway could not spool it.
func (g *Gateway) uploadError(err error) *APIError {
	var tl *upload.TooLargeError
	var fe *upload.FormError
	var se *upload.SpoolError
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		// However the form's reader reported it, a body cut for its pace is the client's.
		return unreadable(err)
	case errors.As(err, &se):
		// The spool's path and the system's words stay in the log.
		g.Logger.Error("an upload could not be spooled; check the upload directory's space and permissions", zapErr(err))
		return newError(http.StatusInternalServerError, CodeGateway, "the gateway could not store the upload while reading it (its upload directory is full or unwritable); nothing was sent upstream or charged")
	case errors.As(err, &tl):
		what := "the upload is"
		if tl.Field != "" {
			what = "field " + strconv.Quote(tl.Field) + " is"
		}
		return newError(http.StatusRequestEntityTooLarge, CodePayloadTooLarge, fmt.Sprintf("%s larger than the limit of %s (%d bytes)", what, formatBytes(tl.Limit), tl.Limit))
	case errors.As(err, &fe):
		return newError(http.StatusBadRequest, CodeValidation, "the multipart body is malformed: "+fe.Error())
	case errors.Is(err, upload.ErrConsumed):
		return newError(http.StatusInternalServerError, CodeGateway, "the upload was already sent upstream and cannot be sent again")
	}
	return unreadable(err)
}

// formatBytes writes n in MiB or KiB when it is a whole number of them.
func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + " MiB"
	case n >= 1<<10 && n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + " KiB"
	}
	return strconv.FormatInt(n, 10) + " bytes"
}

// uploadFit keeps the routes that take a form of size bytes read whole (the upload handlers
// spool it before the call: its fields may follow its files, and it may be sent again to
// another route), def being the endpoint's limit for a route that sets no max_upload: a
// route too small for it neither sizes the hold nor is tried.
func (g *Gateway) uploadFit(size, def int64) *routeFit {
	return &routeFit{
		why: func(rt Route) string {
			if size > rt.uploadLimit(def) {
				return reasonUploadTooLarge
			}
			return ""
		},
		refuse: func(candidates []Route) *APIError {
			return g.uploadError(&upload.TooLargeError{Limit: largestUpload(candidates, nil, def)})
		},
	}
}

// forwardForm sends the form to a route of the same wire format, as a body built for it
// (its upstream model, the gateway's fields dropped), read from the spool as it is sent.
func (c *call) forwardForm(ar *http.Request, rt Route, fw providers.Forwarder, form *upload.Form, format providers.WireFormat, stream bool, opt upload.BodyOptions) (*providers.RawResponse, error) {
	if opt.Set == nil {
		opt.Set = map[string]string{}
	}
	opt.Set["model"] = rt.UpstreamModel
	opt.Drop = append(opt.Drop, "meta")
	body, err := form.Body(opt)
	if err != nil {
		return nil, c.g.uploadError(err)
	}
	began := c.g.Now()
	resp, err := fw.Forward(ar.Context(), &providers.RawRequest{
		Format: format, Reader: body, Length: body.Len(), ContentType: body.ContentType(), Stream: stream, Header: passHeaders(ar),
	})
	if err != nil {
		c.recordAttempt(rt, began, err)
		return nil, err
	}
	c.headersArrived()
	return resp, nil
}

// neutralDone records a neutral call's outcome and, when it succeeded, makes rt the route
// that answers.
func (c *call) neutralDone(rt Route, began time.Time, err error) error {
	c.recordAttempt(rt, began, err)
	if err != nil {
		return err
	}
	c.FirstByte = c.g.Now()
	c.route = &rt
	return nil
}

// mediaBufs hold what a binary answer is copied through.
var mediaBufs = &bufs.Pool{Size: 32 << 10, Max: 32 << 10}

// binaryAnswer is a binary body to relay (audio) with the headers the client gets.
type binaryAnswer struct {
	body        io.ReadCloser
	contentType string
	// length is the body's length, or -1 when unknown.
	length      int64
	disposition string
	// meter, when set, meters the call once the body ended whole, before its settlement
	// (the usage an upstream reports at the end of its audio).
	meter func()
}

// relayBinary writes a binary answer to the client as it arrives, each read flushed at once:
// the client has the first bytes when the upstream sent them, never after the whole body.
// A failure before the first byte is the attempt's (another route may answer); after it,
// the response is cut off (abortResponse), so that the client sees an incomplete body rather
// than a short one that looks whole.
//
// The call is settled once the upstream's end is seen, before the response ends: a charge
// neither recorded nor journaled cuts the response off, so the client never keeps a whole
// answer that was never billed. A body of unknown length is written as it comes, its end
// being the response's (the last chunk, never sent when cut off); a body of declared length
// looks whole with its last byte, which is held back until the settlement.
func (c *call) relayBinary(w http.ResponseWriter, rt Route, began time.Time, ans binaryAnswer) error {
	defer func() { _ = ans.body.Close() }()
	p := mediaBufs.Get()
	defer mediaBufs.Put(p, *p)
	buf := (*p)[:cap(*p)]
	n, err := io.ReadAtLeast(ans.body, buf, 1)
	if n == 0 {
		if err == io.EOF {
			err = errors.New("the provider answered no audio")
		}
		ue, ok := providers.AsUpstreamError(err)
		if !ok {
			ue = c.providerFault(rt, "reading the provider's answer failed: "+err.Error(), nil)
		}
		if c.gone() {
			return err
		}
		c.recordAttempt(rt, began, ue)
		return ue
	}
	c.gotToken()
	c.recordAttempt(rt, began, nil)
	c.route = &rt
	c.Status = http.StatusOK
	c.FirstByte = c.g.Now()
	c.streaming = c.FirstByte
	h := w.Header()
	h.Set("Content-Type", ans.contentType)
	if ans.length >= 0 {
		h.Set("Content-Length", strconv.FormatInt(ans.length, 10))
	}
	if ans.disposition != "" {
		h.Set("Content-Disposition", ans.disposition)
	}
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	// buf[:held+n] is what the client does not have yet; held bytes were kept back.
	held, holdBack := 0, 0
	if ans.length >= 0 {
		holdBack = 1
	}
	for {
		unsent := held + n
		if err == nil && unsent <= holdBack {
			held = unsent
		} else {
			send := unsent
			switch {
			case err == nil:
				send -= holdBack // the last byte waits for the end
			case err == io.EOF:
				c.streamDone()
				if ans.meter != nil {
					ans.meter()
				}
				if _, kept := c.chargeDelivered(c.reqCtx); !kept {
					c.abortResponse = true
					return nil
				}
			}
			if _, werr := w.Write(buf[:send]); werr != nil {
				c.streamDone()
				c.clientGone()
				return nil
			}
			if ferr := rc.Flush(); ferr != nil {
				c.streamDone()
				c.clientGone()
				return nil
			}
			if err != nil {
				break
			}
			if held = holdBack; held > 0 {
				buf[0] = buf[send]
			}
		}
		n, err = ans.body.Read(buf[held:])
	}
	c.streamDone()
	if err != io.EOF {
		if c.gone() {
			c.clientGone()
			return nil
		}
		c.ErrorCode, c.ErrorOrigin, c.ErrorMessage = CodeUpstream, "upstream", "the provider's answer broke off: "+err.Error()
		c.abortResponse = true
	}
	return nil
}

// mediaEvents is how a media event stream ends and where its usage is: the types of its
// final events, and what meters the call from one.
type mediaEvents struct {
	final []string
	meter func(c *call, data []byte) error
	// seen, when set, sees the type of each event relayed before the final one, so that a
	// stream cut short is billed what it delivered.
	seen func(c *call, eventType string)
	// usage writes the final event's usage when the upstream sent none; token counts when nil.
	usage usageEncoder
}

// appendTokenUsage is the usage object of a media event or answer that has none.
func appendTokenUsage(b []byte, u providers.Usage) []byte {
	return append(appendTokenCounts(append(b, '{'), u), '}')
}

// appendTokenCounts writes the members of a media usage object: input, output and total tokens.
func appendTokenCounts(b []byte, u providers.Usage) []byte {
	b = append(b, `"input_tokens":`...)
	b = strconv.AppendInt(b, u.PromptTokens(), 10)
	b = append(b, `,"output_tokens":`...)
	b = strconv.AppendInt(b, u.CompletionTokens(), 10)
	b = append(b, `,"total_tokens":`...)
	return strconv.AppendInt(b, u.Total(), 10)
}

// relayEvents relays an OpenAI media event stream (speech, transcription, images) event by
// event as it arrives, names and data as they came, and meters the call from its final
// event only: the partial events of an image stream are megabytes of base64 not worth
// reading. The final event is written after the charge is recorded, its usage carrying the
// cost. A stream that ends without it ends incomplete, billed what the call's estimate says.
func (c *call) relayEvents(w http.ResponseWriter, r *http.Request, rt Route, began time.Time, resp *providers.RawResponse, me mediaEvents) error {
	defer func() { _ = resp.Body.Close() }()
	out := newSSEWriter(w)
	defer out.release()
	rd := sse.NewReader(resp.Body, maxMediaEvent)
	defer rd.Release()
	final := false
	for rd.Next() {
		ev := rd.Event()
		if !out.started {
			c.gotToken()
			c.relayCommit(out, &rt, began)
			c.FirstByte = c.g.Now()
		}
		typ := eventType(ev.Data)
		if !final && slices.Contains(me.final, typ) {
			final = true
			if err := me.meter(c, ev.Data); err != nil {
				c.g.Logger.Warn("the final event's usage could not be read; the estimate is billed", zap.String("generation_id", c.GenerationID), zapErr(err))
			}
			if !c.writeFinalEvent(out, r, ev.Name, ev.Data, me.usage) {
				break
			}
			continue
		}
		if typ == "error" && !final {
			// The upstream's own error ends its stream; it is recorded before it is relayed,
			// as the client may leave on reading it.
			ue := openai.ParseError(rt.ProviderName, 0, nil, ev.Data, true)
			c.ErrorCode, c.ErrorOrigin, c.ErrorMessage = CodeUpstream, "upstream", "the provider's stream ended with an error: "+ue.Message
			c.streamDone()
			c.settleOutcome(r.Context())
			out.event(ev.Name, ev.Data)
			break
		}
		out.event(ev.Name, ev.Data)
		if out.failed {
			break
		}
		if !final && me.seen != nil {
			me.seen(c, typ)
		}
	}
	c.streamDone()
	if out.failed || c.gone() {
		if !out.started {
			return context.Canceled
		}
		c.clientGone()
		return nil
	}
	readErr := rd.Err()
	if !out.started {
		if readErr == nil {
			readErr = errors.New("the provider's stream ended without an event")
		}
		ue, ok := providers.AsUpstreamError(readErr)
		if !ok {
			ue = c.providerFault(rt, "the provider's stream broke: "+readErr.Error(), nil)
		}
		c.recordAttempt(rt, began, ue)
		return ue
	}
	switch {
	case readErr != nil && c.ErrorCode == "":
		c.ErrorCode, c.ErrorOrigin, c.ErrorMessage = CodeUpstream, "upstream", "the provider's stream broke: "+readErr.Error()
	case !final && c.ErrorCode == "":
		c.ErrorCode, c.ErrorOrigin, c.ErrorMessage = CodeUpstream, "upstream", "the provider's stream ended before its final event"
	default:
		return nil
	}
	if !final {
		// A stream no route can finish ends with an error event, never as if it were whole.
		c.failStream(out, r, c.ErrorMessage)
	}
	return nil
}

// failStream records the call, then ends its stream with an upstream error event: the
// charge is recorded before the client learns of the failure, as a client that leaves on
// reading it must not turn the record into its own cancellation.
func (c *call) failStream(out *sseWriter, r *http.Request, msg string) {
	c.settleOutcome(r.Context())
	out.data(errorEventData(CodeUpstream, msg))
}

// eventType is the type member of an event's data, "" when it has none.
func eventType(data []byte) string {
	raw, _ := rawjson.Get(data, "type")
	if raw == nil {
		return ""
	}
	t, _ := rawjson.String(raw)
	return t
}

// writeFinalEvent settles the call and writes the stream's final event with the cost in its
// usage (written by usage when the event has none; token counts when usage is nil); a charge
// that could not be recorded ends the stream with an error event instead, as an answer
// delivered is an answer billed. It reports whether the client is still there.
func (c *call) writeFinalEvent(out *sseWriter, r *http.Request, name string, data []byte, usage usageEncoder) bool {
	if settled, _ := c.chargeDelivered(r.Context()); !settled {
		out.data(errorEventData(CodeGateway, notRecordedStream.Message))
		return !out.failed
	}
	tmp := answerBufs.Get()
	if usage == nil {
		usage = appendTokenUsage
	}
	b, err := c.appendDecorated((*tmp)[:0], data, "", "usage", usage)
	if err != nil {
		b = append(b[:0], data...)
	}
	out.event(name, b)
	answerBufs.Put(tmp, b)
	return !out.failed
}

// errorEventData is the data of an in-band error event of a media stream, which the
// OpenAI SDKs raise as an error.
func errorEventData(code, msg string) []byte {
	b := append(make([]byte, 0, 80+len(msg)), `{"type":"error","error":{"type":"server_error","code":`...)
	b = rawjson.AppendStringLikeMarshal(b, code)
	b = append(b, `,"message":`...)
	b = rawjson.AppendStringLikeMarshal(b, msg)
	return append(b, `}}`...)
}
