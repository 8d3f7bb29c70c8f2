package handlers

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/modelgateway/caddy-modelgateway/internal/pricing"
	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
)

// OCR (POST /ocr) in Mistral's wire format. Three kinds of route read a document:
//
//   - a Forwarder of Mistral's format gets the request as it came (its model rewritten, the
//     legacy image field made a document, a pages string made a list);
//   - a DocumentReader adapter gets the neutral request;
//   - a chat model (any ChatProvider) is asked to transcribe an image as Markdown: one page,
//     billed by its tokens and the page. A chat model cannot be given a PDF or a file id
//     through the neutral model, so such a document is refused on a model with only chat
//     routes.
//
// Every answer is Mistral's (pages with their markdown, usage_info) plus the gateway's id,
// object "ocr", text (the pages' markdown joined by blank lines) and usage: pages_processed,
// the tokens of a chat route, and the cost.

var ocrCapability = capability{
	endpoint: "/ocr", format: providers.FormatMistralOCR,
	// Pages for OCR upstreams; input and output tokens for a chat model transcribing.
	meters: []string{pricing.DimPage, pricing.DimInput, pricing.DimOutput, pricing.DimRequest},
	neutral: func(p providers.Provider) bool {
		_, ok := p.(providers.DocumentReader)
		return ok || isChatProvider(p)
	},
}

// maxOCRPages is the most pages of one document Mistral reads: the worst case of a document
// whose pages are not named, and the most a pages range may name.
const maxOCRPages = 1000

// visionImageTokens bounds the input tokens a chat model bills for one image: the providers
// scale an image down before reading it (GPT-4o about 1 100 tokens at most, Claude about
// 1 600, Gemini 258 a tile), so its tokens do not grow with its bytes.
const visionImageTokens = 8192

// ocrPrompt is what a chat model is asked of the image.
const ocrPrompt = "Transcribe all text of this page as Markdown. Keep the reading order, headings, lists, " +
	"and tables (as Markdown tables). Answer with the Markdown only: no comment, no code fence."

// ocrRequest is a POST /ocr body as the gateway reads it.
type ocrRequest struct {
	model string
	// kind is the document's type: document_url, image_url or file.
	kind string
	// url is the document or image (https or data: URL); fileID the uploaded file's id.
	url, fileID string
	isImage     bool
	// legacy: the document came as the image field; typeless: its document named no type.
	legacy, typeless bool
	// pages are the 0-based pages asked, nil for all; pagesText tells they came as a string.
	pages     []int
	pagesText bool
	// includeImages asks for the pages' pictures in base64.
	includeImages bool
	meta          bool
	// options lists the Mistral options set, which a chat model cannot honour.
	options []string
}

// parseOCR validates a Mistral OCR request: exactly one of document and the legacy image.
func parseOCR(body []byte) (*ocrRequest, *APIError) {
	var raw struct {
		Model                    *string         `json:"model"`
		Document                 json.RawMessage `json:"document"`
		Image                    json.RawMessage `json:"image"`
		Pages                    json.RawMessage `json:"pages"`
		IncludeImageBase64       *bool           `json:"include_image_base64"`
		ImageLimit               *int64          `json:"image_limit"`
		ImageMinSize             *int64          `json:"image_min_size"`
		BBoxAnnotationFormat     json.RawMessage `json:"bbox_annotation_format"`
		DocumentAnnotationFormat json.RawMessage `json:"document_annotation_format"`
		DocumentAnnotationPrompt *string         `json:"document_annotation_prompt"`
		TableFormat              *string         `json:"table_format"`
		ExtractHeader            *bool           `json:"extract_header"`
		ExtractFooter            *bool           `json:"extract_footer"`
		Meta                     *bool           `json:"meta"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, badField(CodeInvalidJSON, "", "the request body must be a JSON object with the documented field types: "+err.Error())
	}
	if raw.Model == nil || *raw.Model == "" {
		return nil, badField(CodeModelRequired, "model", "model is required")
	}
	q := &ocrRequest{model: *raw.Model, meta: raw.Meta != nil && *raw.Meta, includeImages: raw.IncludeImageBase64 != nil && *raw.IncludeImageBase64}
	hasDoc, hasImage := !rawjson.IsNull(bytes.TrimSpace(raw.Document)), !rawjson.IsNull(bytes.TrimSpace(raw.Image))
	switch {
	case hasDoc && hasImage:
		return nil, badField(CodeValidation, "document", "send either document or the legacy image field, not both")
	case hasDoc:
		if apiErr := q.readDocument(raw.Document); apiErr != nil {
			return nil, apiErr
		}
	case hasImage:
		var s string
		if json.Unmarshal(raw.Image, &s) != nil || s == "" {
			return nil, badField(CodeValidation, "image", "image must be an image URL, a data URL or base64")
		}
		if !isFetchable(s) {
			if !isBase64(s) {
				return nil, badField(CodeValidation, "image", "image must be an http(s) URL, a data URL or base64 of an image")
			}
			s = "data:image/jpeg;base64," + s
		}
		q.kind, q.url, q.isImage, q.legacy = "image_url", s, true, true
	default:
		return nil, badField(CodeValidation, "document", `document is required: {"type":"document_url","document_url":...}, {"type":"image_url","image_url":...} or {"type":"file","file_id":...}`)
	}
	if apiErr := q.readPages(raw.Pages); apiErr != nil {
		return nil, apiErr
	}
	for _, n := range []struct {
		name string
		v    *int64
	}{{"image_limit", raw.ImageLimit}, {"image_min_size", raw.ImageMinSize}} {
		if n.v != nil && *n.v < 0 {
			return nil, badField(CodeValidation, n.name, n.name+" must not be negative")
		}
	}
	if raw.TableFormat != nil && *raw.TableFormat != "markdown" && *raw.TableFormat != "html" {
		return nil, badField(CodeValidation, "table_format", `table_format must be "markdown" or "html"`)
	}
	if raw.DocumentAnnotationPrompt != nil && rawjson.IsNull(bytes.TrimSpace(raw.DocumentAnnotationFormat)) {
		return nil, badField(CodeValidation, "document_annotation_prompt", "document_annotation_prompt needs document_annotation_format")
	}
	for _, o := range []struct {
		name string
		set  bool
	}{
		{"include_image_base64", raw.IncludeImageBase64 != nil}, {"image_limit", raw.ImageLimit != nil}, {"image_min_size", raw.ImageMinSize != nil},
		{"bbox_annotation_format", !rawjson.IsNull(raw.BBoxAnnotationFormat)}, {"document_annotation_format", !rawjson.IsNull(raw.DocumentAnnotationFormat)},
		{"document_annotation_prompt", raw.DocumentAnnotationPrompt != nil}, {"table_format", raw.TableFormat != nil},
		{"extract_header", raw.ExtractHeader != nil}, {"extract_footer", raw.ExtractFooter != nil},
	} {
		if o.set {
			q.options = append(q.options, o.name)
		}
	}
	return q, nil
}

// readDocument reads the document: {type, document_url | image_url (a string or {url}) |
// file_id}, its type inferred from its member when it names none.
func (q *ocrRequest) readDocument(raw json.RawMessage) *APIError {
	var d struct {
		Type        *string         `json:"type"`
		DocumentURL *string         `json:"document_url"`
		ImageURL    json.RawMessage `json:"image_url"`
		FileID      *string         `json:"file_id"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return badField(CodeValidation, "document", "document must be an object: "+err.Error())
	}
	if d.Type == nil {
		q.typeless = true
		switch {
		case d.DocumentURL != nil:
			q.kind = "document_url"
		case !rawjson.IsNull(d.ImageURL):
			q.kind = "image_url"
		case d.FileID != nil:
			q.kind = "file"
		}
	} else {
		q.kind = *d.Type
	}
	switch q.kind {
	case "document_url":
		if d.DocumentURL == nil || !isFetchable(*d.DocumentURL) {
			return badField(CodeValidation, "document.document_url", "document.document_url must be an http(s) or data: URL")
		}
		q.url = *d.DocumentURL
		q.isImage = strings.HasPrefix(strings.ToLower(q.url), "data:image/")
	case "image_url":
		var s string
		if json.Unmarshal(d.ImageURL, &s) != nil {
			var obj struct {
				URL string `json:"url"`
			}
			if json.Unmarshal(d.ImageURL, &obj) == nil {
				s = obj.URL
			}
		}
		if !isFetchable(s) {
			return badField(CodeValidation, "document.image_url", "document.image_url must be an http(s) or data: URL, or {\"url\": ...}")
		}
		q.url, q.isImage = s, true
	case "file":
		if d.FileID == nil || *d.FileID == "" {
			return badField(CodeValidation, "document.file_id", "document.file_id is required")
		}
		q.fileID = *d.FileID
	default:
		return badField(CodeValidation, "document.type", `document.type must be "document_url", "image_url" or "file"`)
	}
	return nil
}

// readPages reads pages: a list of 0-based page numbers, or a string of numbers and ranges
// ("0-2,5").
func (q *ocrRequest) readPages(raw json.RawMessage) *APIError {
	raw = bytes.TrimSpace(raw)
	if rawjson.IsNull(raw) {
		return nil
	}
	invalid := badField(CodeValidation, "pages", `pages must be a list of 0-based page numbers or a string such as "0-2,5"`)
	var list []int
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return invalid
		}
		for _, item := range strings.Split(s, ",") {
			lo, hi, isRange := strings.Cut(strings.TrimSpace(item), "-")
			a, err1 := strconv.Atoi(strings.TrimSpace(lo))
			b, err2 := a, error(nil)
			if isRange {
				b, err2 = strconv.Atoi(strings.TrimSpace(hi))
			}
			switch {
			case err1 != nil || err2 != nil || a < 0:
				return invalid
			case b < a:
				return badField(CodeValidation, "pages", fmt.Sprintf("pages: the range %q runs backwards; write it low-high, such as \"%d-%d\"", strings.TrimSpace(item), b, a))
			case len(list)+b-a >= maxOCRPages:
				return badField(CodeValidation, "pages", fmt.Sprintf("pages must name from 1 to %d pages", maxOCRPages))
			}
			for p := a; p <= b; p++ {
				list = append(list, p)
			}
		}
		q.pagesText = true
	} else if json.Unmarshal(raw, &list) != nil {
		return invalid
	}
	if len(list) == 0 || len(list) > maxOCRPages {
		return badField(CodeValidation, "pages", fmt.Sprintf("pages must name from 1 to %d pages", maxOCRPages))
	}
	for _, p := range list {
		if p < 0 {
			return invalid
		}
	}
	q.pages = list
	return nil
}

// isFetchable tells an http(s) or data: URL.
func isFetchable(s string) bool {
	l := strings.ToLower(s)
	return strings.HasPrefix(l, "https://") || strings.HasPrefix(l, "http://") || strings.HasPrefix(l, "data:")
}

// isBase64 tells a string of the base64 alphabet, padded or not.
func isBase64(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=' || c == '\n' || c == '\r') {
			return false
		}
	}
	return true
}

// ocrKind is how a route reads documents.
type ocrKind int

const (
	ocrForward ocrKind = iota
	ocrReader
	ocrChat
)

func ocrKindOf(rt Route) ocrKind {
	if _, ok := forwarderFor(rt, providers.FormatMistralOCR); ok {
		return ocrForward
	}
	if _, ok := rt.Provider.(providers.DocumentReader); ok {
		return ocrReader
	}
	return ocrChat
}

// readable tells whether a route of kind k can be given the document: a chat model only an
// image, a DocumentReader only a URL.
func (q *ocrRequest) readable(k ocrKind) bool {
	switch k {
	case ocrForward:
		return true
	case ocrReader:
		return q.url != ""
	}
	return q.isImage
}

// pageBound is the most pages the document may have: one for an image, whatever pages
// were asked, else those asked, or the most Mistral reads of a document.
func (q *ocrRequest) pageBound() int64 {
	switch {
	case q.isImage:
		return 1
	case q.pages != nil:
		return int64(len(q.pages))
	}
	return maxOCRPages
}

// worst is the most the request may cost on rt: its pages at the page price, or for a chat
// model the prompt and one image as input and the route's largest answer as output, and the
// page.
func (q *ocrRequest) worst(rt Route) (int64, error) {
	if ocrKindOf(rt) == ocrChat {
		return pricing.WorstCase(rt.Price, estimateTokens(len(ocrPrompt))+visionImageTokens, rt.MaxOutputTokens) + rt.Price.Page, nil
	}
	_, total, err := rt.Price.Cost(pricing.Usage{Pages: q.pageBound()})
	return total, err
}

// ocr serves POST /ocr.
func (g *Gateway) ocr(w http.ResponseWriter, r *http.Request, caller *Caller) error {
	// An OCR request is JSON held whole: it is bounded by max_body_size, unless a route takes
	// larger documents inline (max_upload; a 50 MB PDF is about 67 MB as a data URL). A
	// document too large for that is sent by URL.
	body, apiErr := g.readBodyUpTo(w, r, max(g.MaxBodyBytes, g.uploadCeiling(&ocrCapability, g.MaxBodyBytes)))
	if apiErr != nil {
		return apiErr
	}
	q, apiErr := parseOCR(body)
	if apiErr != nil {
		return apiErr
	}
	return g.serveMedia(w, r, caller, &ocrEndpoint, &mediaRequest{
		model: q.model, promptBytes: len(body), meta: q.meta, fit: q.fit(int64(len(body)), g.MaxBodyBytes), worst: q.worst,
		attempt: func(c *call, ar *http.Request, rt Route) error {
			switch ocrKindOf(rt) {
			case ocrForward:
				fw, _ := forwarderFor(rt, providers.FormatMistralOCR)
				up, err := q.upstreamBody(body, rt.UpstreamModel)
				if err != nil {
					return fmt.Errorf("rewriting the request: %w", err)
				}
				return c.forward(w, ar, rt, fw, up, false, ocrWire(q), nil)
			case ocrReader:
				return c.ocrReader(w, ar, rt, q)
			}
			return c.ocrChat(w, ar, rt, q)
		},
	})
}

// ocrEndpoint caps a charge at the hold on routes priced by the page alone: the worst case
// is the most pages the request may read. A chat model's tokens are bounded by nothing the
// gateway knows before the call.
var ocrEndpoint = mediaEndpoint{cp: &ocrCapability, capAtHold: func(p pricing.Price) bool { return pricedOnlyBy(p, false, pricing.DimPage) }}

// fit keeps the routes that can read the document and take a body of size (def when they
// set no max_upload). With none left, a document no route reads is refused as such before a
// body too large for those that do.
func (q *ocrRequest) fit(size, def int64) *routeFit {
	return &routeFit{
		why: func(rt Route) string {
			switch {
			case !q.readable(ocrKindOf(rt)):
				return reasonUnsupportedDocument
			case size > rt.uploadLimit(def):
				return reasonUploadTooLarge
			}
			return ""
		},
		refuse: func(candidates []Route) *APIError {
			var limit int64
			readable := false
			for _, rt := range candidates {
				if q.readable(ocrKindOf(rt)) {
					readable = true
					limit = max(limit, rt.uploadLimit(def))
				}
			}
			if readable {
				return tooLarge(limit)
			}
			why := "its routes read images only (through a chat model), and this is a PDF or other document; send an image (document type image_url)"
			if q.fileID != "" {
				why = "only a Mistral OCR route reads an uploaded file id; send the document as a URL"
			}
			return badField(CodeValidation, "document", fmt.Sprintf("model %q cannot read this document: %s, or use a model routed to an OCR provider", q.model, why))
		},
	}
}

// upstreamBody is the request for a Mistral route: its model, no meta, the legacy image
// made a document, a typeless document typed, a pages string made the list it names.
func (q *ocrRequest) upstreamBody(body []byte, model string) ([]byte, error) {
	out, err := upstreamBody(body, model)
	if err == nil && (q.legacy || q.typeless) {
		doc := []byte(`{"type":"image_url","image_url":` + string(rawjson.AppendStringLikeMarshal(nil, q.url)) + `}`)
		if q.typeless {
			if doc, err = rawjson.Get(out, "document"); err == nil {
				doc, err = rawjson.Set(doc, "type", rawjson.AppendStringLikeMarshal(nil, q.kind))
			}
		}
		if err == nil {
			if out, err = rawjson.Delete(out, "image"); err == nil {
				out, err = rawjson.Set(out, "document", doc)
			}
		}
	}
	if err == nil && q.pagesText {
		list, _ := json.Marshal(q.pages)
		out, err = rawjson.Set(out, "pages", list)
	}
	return out, err
}

// ocrWire is the forwarding of a Mistral OCR answer: the gateway's members added, billed by
// its pages processed.
func ocrWire(q *ocrRequest) wireFormat {
	var pages int64
	return wireFormat{
		format: providers.FormatMistralOCR, finish: noFinish, appendUsage: appendTokenUsage,
		adapt: func(answer []byte) ([]byte, error) {
			var v struct {
				Pages []struct {
					Markdown string `json:"markdown"`
				} `json:"pages"`
				UsageInfo *struct {
					PagesProcessed *int64 `json:"pages_processed"`
					DocSizeBytes   *int64 `json:"doc_size_bytes"`
				} `json:"usage_info"`
			}
			if err := json.Unmarshal(answer, &v); err != nil || v.Pages == nil {
				return nil, errors.New("the provider's OCR answer has no pages")
			}
			pages = int64(len(v.Pages))
			usage := []byte(`{}`)
			if u := v.UsageInfo; u != nil {
				if u.PagesProcessed != nil {
					pages = max(*u.PagesProcessed, 0)
				}
				if u.DocSizeBytes != nil {
					usage = []byte(`{"doc_size_bytes":` + strconv.FormatInt(*u.DocSizeBytes, 10) + `}`)
				}
			}
			usage, _ = rawjson.Set(usage, "pages_processed", strconv.AppendInt(nil, pages, 10))
			text := make([]string, len(v.Pages))
			for i, p := range v.Pages {
				text[i] = p.Markdown
			}
			return rawjson.SetMany(answer,
				rawjson.Edit{Key: "object", Value: []byte(`"ocr"`)},
				rawjson.Edit{Key: "text", Value: rawjson.AppendStringLikeMarshal(nil, strings.Join(text, "\n\n"))},
				rawjson.Edit{Key: "usage", Value: usage})
		},
		meter: func(c *call, _ []byte) error {
			c.meter(pricing.Usage{Pages: pages})
			return nil
		},
	}
}

// appendPagesUsage appends the usage object of an OCR answer the gateway writes: the pages,
// and the tokens of a chat model when withTokens.
func appendPagesUsage(b []byte, pages int64, u providers.Usage, withTokens bool) []byte {
	b = strconv.AppendInt(append(b, `{"pages_processed":`...), pages, 10)
	if withTokens {
		b = strconv.AppendInt(append(b, `,"input_tokens":`...), u.PromptTokens(), 10)
		b = strconv.AppendInt(append(b, `,"output_tokens":`...), u.CompletionTokens(), 10)
		b = strconv.AppendInt(append(b, `,"total_tokens":`...), u.Total(), 10)
	}
	return append(b, '}')
}

// ocrReader serves the request through an adapter's DocumentReader.
func (c *call) ocrReader(w http.ResponseWriter, r *http.Request, rt Route, q *ocrRequest) error {
	dr, ok := rt.Provider.(providers.DocumentReader)
	if !ok {
		return &providers.UpstreamError{Provider: rt.ProviderName, Category: providers.CategoryModelUnavailable, Message: "the provider cannot read documents"}
	}
	began := c.g.Now()
	resp, err := dr.ReadDocument(r.Context(), &providers.OCRRequest{
		Model: rt.UpstreamModel, DocumentURL: q.url, IsImage: q.isImage, Pages: q.pages, IncludeImageBase64: q.includeImages,
	})
	if err == nil && len(resp.Pages) == 0 {
		err = c.providerFault(rt, "the provider read no page", nil)
	}
	if err := c.neutralDone(rt, began, err); err != nil {
		return err
	}
	pages := resp.Usage.Pages
	if pages <= 0 {
		pages = int64(len(resp.Pages))
	}
	c.meter(pricing.Usage{Pages: pages})
	return c.answerOCR(w, r, rt, q, resp.Pages, pages, providers.Usage{}, false)
}

// ocrChat asks a chat model to transcribe the image: one page, billed by its tokens and the
// page.
func (c *call) ocrChat(w http.ResponseWriter, r *http.Request, rt Route, q *ocrRequest) error {
	cp, ok := rt.Provider.(providers.ChatProvider)
	if !ok {
		return &providers.UpstreamError{Provider: rt.ProviderName, Category: providers.CategoryModelUnavailable, Message: "the provider cannot read documents"}
	}
	image, err := openai.DecodeImageURL(q.url)
	if err != nil {
		return badField(CodeValidation, "document", err.Error())
	}
	c.dropped = append(c.dropped[:0], q.options...)
	maxTokens := rt.MaxOutputTokens
	began := c.g.Now()
	resp, err := cp.Chat(r.Context(), &providers.Request{
		Model:     rt.UpstreamModel,
		Messages:  []providers.Message{{Role: providers.RoleUser, Content: []providers.Part{image, {Type: providers.PartText, Text: ocrPrompt}}}},
		MaxTokens: &maxTokens,
	})
	if err := c.neutralDone(rt, began, err); err != nil {
		return err
	}
	c.UpstreamID, c.FinishReason = resp.ID, string(resp.FinishReason)
	u := resp.Usage.Metered()
	u.Pages = 1
	c.meter(u)
	index := 0
	if len(q.pages) > 0 {
		index = q.pages[0]
	}
	return c.answerOCR(w, r, rt, q, []providers.OCRPage{{Index: index, Markdown: unfence(resp.Text)}}, 1, resp.Usage, true)
}

// answerOCR writes an OCR answer the gateway made, in Mistral's shape with its additions.
func (c *call) answerOCR(w http.ResponseWriter, r *http.Request, rt Route, q *ocrRequest, pages []providers.OCRPage, billed int64, tokens providers.Usage, withTokens bool) error {
	buf := answerBufs.Get()
	b := append((*buf)[:0], `{"object":"ocr","model":`...)
	b = rawjson.AppendStringLikeMarshal(b, rt.UpstreamModel)
	b = append(b, `,"pages":[`...)
	text := make([]string, len(pages))
	for i, p := range pages {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(append(b, `{"index":`...), int64(p.Index), 10)
		b = rawjson.AppendStringLikeMarshal(append(b, `,"markdown":`...), p.Markdown)
		b = append(b, `,"images":[],"dimensions":null}`...)
		text[i] = p.Markdown
	}
	b = rawjson.AppendStringLikeMarshal(append(b, `],"text":`...), strings.Join(text, "\n\n"))
	b = strconv.AppendInt(append(b, `,"usage_info":{"pages_processed":`...), billed, 10)
	b = append(b, `,"doc_size_bytes":`...)
	if n, ok := dataURLSize(q.url); ok {
		b = strconv.AppendInt(b, n, 10)
	} else {
		b = append(b, `null`...)
	}
	b = appendPagesUsage(append(b, `},"usage":`...), billed, tokens, withTokens)
	b = append(b, '}')
	defer answerBufs.Put(buf, b)
	return c.answerComplete(w, r, b, appendTokenUsage)
}

// dataURLSize is the size of a base64 data URL's content.
func dataURLSize(u string) (int64, bool) {
	meta, payload, ok := strings.Cut(u, ",")
	if !ok || !strings.HasPrefix(strings.ToLower(meta), "data:") || !strings.HasSuffix(meta, ";base64") {
		return 0, false
	}
	payload = strings.TrimRight(payload, "=")
	return int64(base64.RawStdEncoding.DecodedLen(len(payload))), true
}

// unfence removes the code fence a chat model may wrap its Markdown in despite being asked not to.
func unfence(s string) string {
	t := strings.TrimSpace(s)
	if !strings.HasPrefix(t, "```") || !strings.HasSuffix(t, "```") || len(t) < 6 {
		return t
	}
	nl := strings.IndexByte(t, '\n')
	if nl < 0 {
		return t
	}
	return strings.TrimSpace(t[nl+1 : len(t)-3])
}
