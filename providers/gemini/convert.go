package gemini

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// maxStopSequences is Gemini's limit on generationConfig.stopSequences.
const maxStopSequences = 5

// syntheticIDPrefix starts the ids the adapter makes up for function calls Gemini sent
// without one: "call_gemini_<12 random base62>_<n>", n the call's position in the answer.
// The random part keeps ids unique across the turns of a conversation (Anthropic rejects
// duplicate tool_use ids); the prefix lets the adapter recognise them in history and not
// send them back to Gemini as functionCall.id.
const syntheticIDPrefix = "call_gemini_"

// dummySignature is the value Gemini accepts in place of a thought signature on a function
// call it did not produce (history from another provider, or from a surface that cannot
// carry signatures, such as chat completions). Gemini 3 rejects function calls of the
// current turn that have no signature at all.
const dummySignature = "skip_thought_signature_validator"

// notExecuted is the result sent for a tool call the history never answered: Gemini, like
// every other provider, rejects a call without a response.
var notExecuted = json.RawMessage(`{"error":"tool call was not executed"}`)

// EncodeRequest writes the neutral request as a generateContent body, by the rules of the
// package documentation. The model and streaming are not part of the body: they are in the
// URL. Tool names Gemini would reject are rewritten; the adapter's own calls restore them in
// the answer.
func EncodeRequest(req *providers.Request) ([]byte, error) {
	body, _, err := encodeRequest(req)
	return body, err
}

// encodeRequest also returns the tool name mapping, to restore the client's names in the
// answer.
func encodeRequest(req *providers.Request) ([]byte, *toolNames, error) {
	e := &encoder{names: newToolNames(), callNames: map[string]string{}}
	gr := GenerateContentRequest{}
	if strings.TrimSpace(req.System) != "" {
		gr.SystemInstruction = &Content{Parts: []Part{{Text: req.System}}}
	}
	// Names Gemini accepts are kept, so they are reserved before any other is rewritten.
	for _, t := range req.Tools {
		if validToolName(t.Name) {
			e.names.gemini(t.Name)
		}
	}
	var decls []FunctionDeclaration
	for i, t := range req.Tools {
		if t.Name == "" {
			return nil, nil, fmt.Errorf("tools[%d].name: required", i)
		}
		d := FunctionDeclaration{Name: e.names.gemini(t.Name), Description: t.Description}
		params, err := toolParameters(t.Parameters)
		if err != nil {
			return nil, nil, fmt.Errorf("tools[%d].parameters: %w", i, err)
		}
		d.Parameters = params
		decls = append(decls, d)
	}
	if len(decls) > 0 {
		gr.Tools = []Tool{{FunctionDeclarations: decls}}
		if mode := toolMode(req.ToolChoice, e.names); mode != nil {
			gr.ToolConfig = &ToolConfig{FunctionCallingConfig: mode}
		}
	}
	if err := e.messages(req.Messages); err != nil {
		return nil, nil, err
	}
	if len(e.contents) == 0 {
		return nil, nil, errors.New("messages: nothing to send once empty content is dropped")
	}
	gr.Contents = e.contents
	gc, err := generationConfig(req)
	if err != nil {
		return nil, nil, err
	}
	gr.GenerationConfig = gc
	body, err := json.Marshal(gr)
	if err != nil {
		return nil, nil, err
	}
	return body, e.names, nil
}

// toolParameters rewrites a tool's JSON Schema for Gemini, nil when it declares nothing:
// Gemini rejects an OBJECT parameters schema with no properties, so a tool without
// arguments has no parameters at all.
func toolParameters(raw json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	s, err := sanitizeSchema(raw, false)
	if err != nil || s == nil {
		return nil, err
	}
	if t, _ := s.get("type"); t == "OBJECT" && !s.has("properties") {
		return nil, nil
	}
	return json.Marshal(s)
}

// toolMode maps the neutral tool choice to functionCallingConfig: auto → AUTO, none → NONE,
// required → ANY, a tool name → ANY restricted to that function.
func toolMode(choice string, names *toolNames) *FunctionCallingConfig {
	switch choice {
	case "":
		return nil
	case "auto":
		return &FunctionCallingConfig{Mode: "AUTO"}
	case "none":
		return &FunctionCallingConfig{Mode: "NONE"}
	case "required":
		return &FunctionCallingConfig{Mode: "ANY"}
	}
	return &FunctionCallingConfig{Mode: "ANY", AllowedFunctionNames: []string{names.gemini(choice)}}
}

// effortBudgets are the thinking budgets of the reasoning efforts (translation map §3.9,
// the Gemini 2.5 row; Gemini 3 models still honour thinkingBudget). Every value is inside
// the ranges of 2.5 Pro (128-32768), Flash (0-24576) and Flash-Lite (512-24576).
var effortBudgets = map[string]int64{
	"minimal": 512,
	"low":     1024,
	"medium":  8192,
	"high":    24576,
	"xhigh":   24576,
	"max":     24576,
}

func generationConfig(req *providers.Request) (*GenerationConfig, error) {
	gc := &GenerationConfig{
		MaxOutputTokens: req.MaxTokens,
		Temperature:     req.Temperature,
		TopP:            req.TopP,
		TopK:            req.TopK,
	}
	for _, s := range req.Stop {
		if s != "" && len(gc.StopSequences) < maxStopSequences {
			gc.StopSequences = append(gc.StopSequences, s)
		}
	}
	switch req.ResponseFormat {
	case "":
	case "json_object":
		gc.ResponseMimeType = "application/json"
	case "json_schema":
		gc.ResponseMimeType = "application/json"
		if len(bytes.TrimSpace(req.JSONSchema)) > 0 {
			s, err := sanitizeSchema(req.JSONSchema, true)
			if err != nil {
				return nil, fmt.Errorf("response schema: %w", err)
			}
			if s != nil {
				if gc.ResponseSchema, err = json.Marshal(s); err != nil {
					return nil, fmt.Errorf("response schema: %w", err)
				}
			}
		}
	default:
		return nil, fmt.Errorf("unsupported response format %q", req.ResponseFormat)
	}
	gc.ThinkingConfig = thinkingConfig(req)
	if gc.MaxOutputTokens == nil && gc.Temperature == nil && gc.TopP == nil && gc.TopK == nil &&
		len(gc.StopSequences) == 0 && gc.ResponseMimeType == "" && gc.ThinkingConfig == nil {
		return nil, nil
	}
	return gc, nil
}

// thinkingConfig maps ThinkingBudget (which wins) or ReasoningEffort to thinkingConfig.
// Asking for reasoning also asks for thought summaries (includeThoughts); effort "none"
// turns thinking off (budget 0), which models that cannot stop thinking reject. A budget
// derived from an effort is capped at half of MaxTokens, because maxOutputTokens bounds the
// thoughts and the answer together and a budget as large as the limit leaves an empty
// answer.
func thinkingConfig(req *providers.Request) *ThinkingConfig {
	if b := req.ThinkingBudget; b != 0 {
		if b < 0 {
			b = -1 // dynamic
		}
		return &ThinkingConfig{IncludeThoughts: true, ThinkingBudget: &b}
	}
	if req.ReasoningEffort == "none" {
		var zero int64
		return &ThinkingConfig{ThinkingBudget: &zero}
	}
	b, ok := effortBudgets[req.ReasoningEffort]
	if !ok {
		return nil
	}
	if req.MaxTokens != nil && *req.MaxTokens > 0 {
		b = min(b, max(*req.MaxTokens/2, 128))
	}
	return &ThinkingConfig{IncludeThoughts: true, ThinkingBudget: &b}
}

// encoder builds contents from the neutral messages.
type encoder struct {
	names    *toolNames
	contents []Content
	// callNames maps a tool call id to its function name, from the most recent assistant
	// turn that made a call with that id.
	callNames map[string]string
}

// add appends parts as a turn of role, merged into the previous turn when it has the same
// role: Gemini wants user and model turns to alternate.
func (e *encoder) add(role string, parts ...Part) {
	if len(parts) == 0 {
		return
	}
	if n := len(e.contents); n > 0 && e.contents[n-1].Role == role {
		e.contents[n-1].Parts = append(e.contents[n-1].Parts, parts...)
		return
	}
	e.contents = append(e.contents, Content{Role: role, Parts: parts})
}

func (e *encoder) messages(msgs []providers.Message) error {
	// Gemini 3 validates the signatures of the current turn's function calls: those after
	// the last user message.
	active := 0
	for i, m := range msgs {
		if m.Role == providers.RoleUser {
			active = i + 1
		}
	}
	// pending holds the calls of the assistant turn just written, until their results.
	var pending []providers.ToolCall
	for i := 0; i < len(msgs); i++ {
		m := msgs[i]
		switch m.Role {
		case providers.RoleTool:
			j := i
			for j < len(msgs) && msgs[j].Role == providers.RoleTool {
				j++
			}
			parts, err := e.toolResults(msgs[i:j], pending, i)
			if err != nil {
				return err
			}
			pending = nil
			e.add("user", parts...)
			i = j - 1
		case providers.RoleUser:
			e.add("user", e.unanswered(pending)...)
			pending = nil
			parts, err := e.userParts(m.Content)
			if err != nil {
				return fmt.Errorf("message %d: %w", i, err)
			}
			e.add("user", parts...)
		case providers.RoleAssistant:
			e.add("user", e.unanswered(pending)...)
			pending = nil
			parts, err := e.assistantParts(m, i >= active)
			if err != nil {
				return fmt.Errorf("message %d: %w", i, err)
			}
			e.add("model", parts...)
			pending = m.ToolCalls
		default:
			return fmt.Errorf("message %d: unknown role %q", i, m.Role)
		}
	}
	return nil
}

func (e *encoder) userParts(content []providers.Part) ([]Part, error) {
	parts := make([]Part, 0, len(content))
	for _, p := range content {
		switch p.Type {
		case providers.PartText:
			if strings.TrimSpace(p.Text) != "" {
				parts = append(parts, Part{Text: p.Text})
			}
		case providers.PartImage:
			ip, err := imagePart(p)
			if err != nil {
				return nil, err
			}
			parts = append(parts, ip)
		case providers.PartReasoning:
			// Reasoning belongs to assistant turns; there is nothing to send.
		default:
			return nil, fmt.Errorf("unsupported content part type %q", p.Type)
		}
	}
	return parts, nil
}

// assistantParts writes a model turn: its text, then its function calls. Reasoning text is
// not sent back (Gemini does not need its thought summaries); the turn's thought signature
// goes back on its first function call, or on its last text part when it made none, where
// Gemini put it.
func (e *encoder) assistantParts(m providers.Message, active bool) ([]Part, error) {
	sig := ""
	parts := make([]Part, 0, len(m.Content)+len(m.ToolCalls))
	for _, p := range m.Content {
		// A signature tagged by another provider is not Gemini's: it is dropped (a function
		// call then gets the placeholder as before). See providers.ReplaySignature.
		if raw, ok := providers.ReplaySignature(providers.SigGemini, p.Signature); ok && sig == "" && validSignature(raw) {
			sig = raw
		}
		switch p.Type {
		case providers.PartText:
			if strings.TrimSpace(p.Text) != "" {
				parts = append(parts, Part{Text: p.Text})
			}
		case providers.PartImage:
			ip, err := imagePart(p)
			if err != nil {
				return nil, err
			}
			parts = append(parts, ip)
		case providers.PartReasoning:
		default:
			return nil, fmt.Errorf("unsupported content part type %q", p.Type)
		}
	}
	lastText := len(parts) - 1
	for lastText >= 0 && parts[lastText].Text == "" {
		lastText--
	}
	for j, tc := range m.ToolCalls {
		if tc.Name == "" {
			return nil, fmt.Errorf("tool call %d: name required", j)
		}
		if tc.ID != "" {
			e.callNames[tc.ID] = tc.Name
		}
		parts = append(parts, Part{FunctionCall: &FunctionCall{
			ID:   geminiID(tc.ID),
			Name: e.names.gemini(tc.Name),
			Args: argsObject(tc.Arguments),
		}})
	}
	switch {
	case len(m.ToolCalls) > 0:
		first := &parts[len(parts)-len(m.ToolCalls)]
		first.ThoughtSignature = sig
		if sig == "" && active {
			first.ThoughtSignature = dummySignature
		}
	case sig != "" && lastText >= 0:
		parts[lastText].ThoughtSignature = sig
	}
	return parts, nil
}

// toolResults writes a run of tool messages as functionResponse parts, in the order of the
// calls of the assistant turn before them (pending), with a "not executed" result for each
// call left unanswered. A result is paired with its call by id, and by position for calls
// without ids; its function name comes from that call, or from any earlier call with its
// id, or from the message's own Name. Images of results follow the responses in the same
// user turn, which every Gemini model reads.
func (e *encoder) toolResults(run []providers.Message, pending []providers.ToolCall, first int) ([]Part, error) {
	answered := make([][]Part, len(pending))
	var extra, media []Part
	for k, m := range run {
		slot := -1
		for c := range pending {
			if answered[c] == nil && pending[c].ID == m.ToolCallID {
				slot = c
				break
			}
		}
		name := m.Name
		known := slot >= 0
		if known {
			name = pending[slot].Name
		} else if n, ok := e.callNames[m.ToolCallID]; ok && m.ToolCallID != "" {
			name, known = n, true
		}
		if name == "" {
			return nil, fmt.Errorf("message %d: tool result %q answers no tool call of the conversation", first+k, m.ToolCallID)
		}
		output, images, err := toolOutput(m.Content)
		if err != nil {
			return nil, fmt.Errorf("message %d: %w", first+k, err)
		}
		media = append(media, images...)
		fr := &FunctionResponse{Name: e.names.gemini(name), Response: output}
		if known {
			// The call went out with this id, so the response may carry it too.
			fr.ID = geminiID(m.ToolCallID)
		}
		if slot >= 0 {
			answered[slot] = []Part{{FunctionResponse: fr}}
		} else {
			extra = append(extra, Part{FunctionResponse: fr})
		}
	}
	parts := make([]Part, 0, len(pending)+len(extra)+len(media))
	for c, a := range answered {
		if a == nil {
			a = e.unanswered(pending[c : c+1])
		}
		parts = append(parts, a...)
	}
	parts = append(parts, extra...)
	return append(parts, media...), nil
}

// unanswered writes a "not executed" result for each call.
func (e *encoder) unanswered(calls []providers.ToolCall) []Part {
	parts := make([]Part, 0, len(calls))
	for _, tc := range calls {
		parts = append(parts, Part{FunctionResponse: &FunctionResponse{
			ID:       geminiID(tc.ID),
			Name:     e.names.gemini(tc.Name),
			Response: notExecuted,
		}})
	}
	return parts
}

// toolOutput makes a functionResponse.response from a tool result: its text when that is a
// JSON object, {"output": text} otherwise. Images are returned apart.
func toolOutput(content []providers.Part) (json.RawMessage, []Part, error) {
	var text strings.Builder
	var images []Part
	for _, p := range content {
		switch p.Type {
		case providers.PartText:
			if text.Len() > 0 && p.Text != "" {
				text.WriteByte('\n')
			}
			text.WriteString(p.Text)
		case providers.PartImage:
			ip, err := imagePart(p)
			if err != nil {
				return nil, nil, err
			}
			images = append(images, ip)
		case providers.PartReasoning:
		default:
			return nil, nil, fmt.Errorf("unsupported content part type %q", p.Type)
		}
	}
	s := strings.TrimSpace(text.String())
	if strings.HasPrefix(s, "{") && json.Valid([]byte(s)) {
		var b bytes.Buffer
		if json.Compact(&b, []byte(s)) == nil {
			return b.Bytes(), images, nil
		}
	}
	out, err := json.Marshal(map[string]string{"output": text.String()})
	return out, images, err
}

// argsObject turns a call's arguments, a JSON string, into the object Gemini wants. Empty
// arguments are {}; arguments that are not a JSON object are kept as {"_raw": "<string>"}
// rather than lost.
func argsObject(args string) json.RawMessage {
	s := strings.TrimSpace(args)
	if s == "" || s == "null" {
		return json.RawMessage(`{}`)
	}
	if strings.HasPrefix(s, "{") && json.Valid([]byte(s)) {
		var b bytes.Buffer
		if json.Compact(&b, []byte(s)) == nil {
			return b.Bytes()
		}
	}
	raw, _ := json.Marshal(map[string]string{"_raw": args}) // a string map always marshals
	return raw
}

// geminiID is the id sent back for a call: none for the ids the adapter made up.
func geminiID(id string) string {
	if strings.HasPrefix(id, syntheticIDPrefix) {
		return ""
	}
	return id
}

// validSignature tells whether s can be a Gemini thought signature: base64 (standard or
// URL-safe, as protobuf JSON reads bytes). Anything else would fail the whole request.
func validSignature(s string) bool {
	if s == "" || len(s) > 1<<20 {
		return false
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
		if _, err := enc.DecodeString(s); err == nil {
			return true
		}
	}
	return false
}

// imagePart writes an image: inline data as inlineData, an https URL as fileData, which
// Gemini fetches itself. A plain http URL is refused (ErrUnsupportedRequest): Gemini only
// fetches https and signed URLs, and the adapter does not download images for it.
func imagePart(p providers.Part) (Part, error) {
	if len(p.Data) > 0 {
		mt := p.MediaType
		if mt == "" {
			mt = http.DetectContentType(p.Data)
		}
		return Part{InlineData: &Blob{MimeType: mt, Data: base64.StdEncoding.EncodeToString(p.Data)}}, nil
	}
	u := strings.TrimSpace(p.ImageURL)
	if u == "" {
		return Part{}, errors.New("image part has neither a URL nor data")
	}
	scheme, _, _ := strings.Cut(u, ":")
	switch strings.ToLower(scheme) {
	case "data":
		mt, data, err := parseDataURL(u)
		if err != nil {
			return Part{}, err
		}
		return Part{InlineData: &Blob{MimeType: mt, Data: data}}, nil
	case "https", "gs":
		mt := p.MediaType
		if mt == "" {
			mt = mimeFromURL(u)
		}
		return Part{FileData: &FileData{MimeType: mt, FileURI: u}}, nil
	case "http":
		return Part{}, fmt.Errorf("%w: Gemini fetches images from https URLs only; send this image as https or inline data", ErrUnsupportedRequest)
	}
	return Part{}, errors.New("image URL must be an https URL or a data URL")
}

// parseDataURL reads data:<media type>;base64,<payload>, returning the payload as standard
// base64.
func parseDataURL(u string) (string, string, error) {
	meta, payload, ok := strings.Cut(u[len("data:"):], ",")
	mt, isBase64 := strings.CutSuffix(meta, ";base64")
	if !ok || !isBase64 || mt == "" {
		return "", "", errors.New("data URL must be data:<media type>;base64,<data>")
	}
	data, err := base64.StdEncoding.DecodeString(payload)
	if err != nil {
		if data, err = base64.RawStdEncoding.DecodeString(payload); err != nil {
			return "", "", errors.New("data URL payload is not valid base64")
		}
	}
	return strings.ToLower(mt), base64.StdEncoding.EncodeToString(data), nil
}

// urlMediaTypes are the media types guessed from a URL's extension.
var urlMediaTypes = map[string]string{
	".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".webp": "image/webp",
	".gif": "image/gif", ".heic": "image/heic", ".heif": "image/heif", ".pdf": "application/pdf",
}

// mimeFromURL guesses a media type from the URL's path, "" when it cannot (Files API URIs
// need none).
func mimeFromURL(u string) string {
	parsed, err := url.Parse(u)
	if err != nil {
		return ""
	}
	return urlMediaTypes[strings.ToLower(path.Ext(parsed.Path))]
}

// Unsupported lists the request parameters Gemini cannot honour, by their chat completions
// names, so that the gateway can report them: they are dropped (or, for stop, cut to
// Gemini's five sequences), not refused.
func Unsupported(req *providers.Request) []string {
	var out []string
	if req.ParallelToolCalls != nil && !*req.ParallelToolCalls {
		out = append(out, "parallel_tool_calls")
	}
	if req.User != "" {
		out = append(out, "user")
	}
	n := 0
	for _, s := range req.Stop {
		if s != "" {
			n++
		}
	}
	if n > maxStopSequences {
		out = append(out, "stop")
	}
	if e := req.ReasoningEffort; e != "" && e != "none" && req.ThinkingBudget == 0 {
		if _, ok := effortBudgets[e]; !ok {
			out = append(out, "reasoning_effort")
		}
	}
	for _, m := range req.Messages {
		if m.Name != "" && m.Role != providers.RoleTool {
			out = append(out, "name")
			break
		}
	}
	return out
}

// toolNames maps tool names to names Gemini accepts (a letter or underscore, then letters,
// digits, "_", ".", ":" or "-", at most 64) and back. Valid names are kept as they are.
type toolNames struct {
	toGemini   map[string]string
	fromGemini map[string]string
}

func newToolNames() *toolNames {
	return &toolNames{toGemini: map[string]string{}, fromGemini: map[string]string{}}
}

const maxToolName = 64

func (n *toolNames) gemini(name string) string {
	if g, ok := n.toGemini[name]; ok {
		return g
	}
	g := name
	if !validToolName(name) {
		g = sanitizeToolName(name)
	}
	base := g
	for i := 2; ; i++ {
		if orig, taken := n.fromGemini[g]; !taken || orig == name {
			break
		}
		suffix := "_" + strconv.Itoa(i)
		g = base[:min(len(base), maxToolName-len(suffix))] + suffix
	}
	n.toGemini[name] = g
	n.fromGemini[g] = name
	return g
}

// client restores the client's name of a function Gemini called; names the request did not
// declare are returned as they are.
func (n *toolNames) client(g string) string {
	if n == nil {
		return g
	}
	if name, ok := n.fromGemini[g]; ok {
		return name
	}
	return g
}

func validToolName(s string) bool {
	if s == "" || len(s) > maxToolName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case i > 0 && (c >= '0' && c <= '9' || c == '.' || c == ':' || c == '-'):
		default:
			return false
		}
	}
	return true
}

func sanitizeToolName(s string) string {
	b := make([]byte, 0, min(len(s)+1, maxToolName))
	for i := 0; i < len(s) && len(b) < maxToolName; i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == ':' || c == '-'
		if !ok {
			c = '_'
		}
		if len(b) == 0 && !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_') {
			b = append(b, '_')
		}
		b = append(b, c)
	}
	if len(b) == 0 {
		b = append(b, '_')
	}
	return string(b[:min(len(b), maxToolName)])
}

// DecodeResponse reads a generateContent answer into the neutral model. A prompt blocked
// before generation (no candidates, promptFeedback.blockReason set) is an empty answer
// with finish reason content_filter, not an error. Function calls without an id get a
// synthetic one (see the package documentation). A finish reason that means the model's
// tool call was unusable (MALFORMED_FUNCTION_CALL...) is an error wrapping
// ErrUnusableAnswer, as is an answer with neither candidates nor a block reason.
func DecodeResponse(body []byte) (*providers.Response, error) {
	var r GenerateContentResponse
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("decoding generateContent response: %w", err)
	}
	resp, fail, err := responseFrom(&r, nil)
	if err != nil {
		return nil, err
	}
	if fail != nil {
		return nil, fmt.Errorf("%w: %s", ErrUnusableAnswer, fail.FinishReason)
	}
	return resp, nil
}

// errNoCandidates is the error of an answer with no candidates and no block reason.
var errNoCandidates = errors.New("response has no candidates")

// responseFrom builds the neutral answer. fail is the candidate when its finish reason
// makes the answer unusable.
func responseFrom(r *GenerateContentResponse, names *toolNames) (*providers.Response, *Candidate, error) {
	resp := &providers.Response{ID: r.ResponseID, Model: r.ModelVersion}
	if r.UsageMetadata != nil {
		resp.Usage = usageFrom(r.UsageMetadata)
	}
	c := firstCandidate(r.Candidates)
	if c == nil {
		if r.PromptFeedback != nil && r.PromptFeedback.BlockReason != "" {
			resp.FinishReason = providers.FinishContentFilter
			return resp, nil, nil
		}
		return nil, nil, errNoCandidates
	}
	t := newTurn(names)
	var text, reasoning strings.Builder
	if c.Content != nil {
		for _, p := range c.Content.Parts {
			t.part(p, func(ev providers.Event) {
				switch ev.Type {
				case providers.EventText:
					text.WriteString(ev.Text)
				case providers.EventReasoning:
					reasoning.WriteString(ev.Text)
					if ev.Signature != "" {
						resp.ReasoningSignature = ev.Signature
					}
				case providers.EventToolCall:
					resp.ToolCalls = append(resp.ToolCalls, ev.ToolCall)
				}
			})
		}
	}
	resp.Text, resp.Reasoning = text.String(), reasoning.String()
	reason, ok := finishReason(c.FinishReason, t.calls > 0)
	if !ok {
		return resp, c, nil
	}
	resp.FinishReason = reason
	return resp, nil, nil
}

// firstCandidate is the candidate of index 0: the neutral model has one answer.
func firstCandidate(cs []Candidate) *Candidate {
	for i := range cs {
		if cs[i].Index == 0 {
			return &cs[i]
		}
	}
	return nil
}

// finishReason maps Gemini's finishReason (translation map §3.10). STOP, and every
// unremarkable reason (OTHER, unspecified, unknown), is tool_calls when the answer called a
// function, since Gemini never says so. ok is false for the reasons that mean the model
// failed to produce a usable tool call.
func finishReason(r string, sawToolCall bool) (providers.FinishReason, bool) {
	switch r {
	case "MAX_TOKENS":
		return providers.FinishLength, true
	case "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "LANGUAGE",
		"IMAGE_SAFETY", "IMAGE_PROHIBITED_CONTENT", "IMAGE_RECITATION":
		return providers.FinishContentFilter, true
	case "MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL", "TOO_MANY_TOOL_CALLS", "MALFORMED_RESPONSE":
		return "", false
	}
	if sawToolCall {
		return providers.FinishToolCalls, true
	}
	return providers.FinishStop, true
}

// usageFrom reads usageMetadata into the disjoint neutral counters (translation map §2.2):
// the prompt count includes the cached tokens, tool-use prompt tokens are input, and the
// candidates count excludes the thoughts.
func usageFrom(m *UsageMetadata) providers.Usage {
	prompt := max(int64(m.PromptTokenCount), 0)
	cached := max(int64(m.CachedContentTokenCount), 0)
	return providers.Usage{
		Input:     max(prompt-cached, 0) + max(int64(m.ToolUsePromptTokenCount), 0),
		CacheRead: cached,
		Output:    max(int64(m.CandidatesTokenCount), 0),
		Reasoning: max(int64(m.ThoughtsTokenCount), 0),
	}
}

// turn turns the parts of one answer, whole or streamed, into neutral events. It numbers
// the function calls, makes up the ids Gemini left out, and picks the answer's thought
// signature: the first one on a function call (the one Gemini 3 requires back), else the
// last one seen. A signature event is emitted each time that choice changes, so the last
// signature event of a stream is the answer's signature.
type turn struct {
	names       *toolNames
	idToken     string
	calls       int
	sig         string
	sigFromCall bool
}

func newTurn(names *toolNames) *turn {
	return &turn{names: names, idToken: randomToken(12)}
}

func (t *turn) part(p Part, emit func(providers.Event)) {
	if p.FunctionCall != nil {
		if t.signature(p.ThoughtSignature, true) {
			emit(providers.Event{Type: providers.EventReasoning, Signature: providers.Tag(providers.SigGemini, t.sig)})
		}
		id := p.FunctionCall.ID
		if id == "" {
			id = syntheticIDPrefix + t.idToken + "_" + strconv.Itoa(t.calls)
		}
		emit(providers.Event{
			Type:  providers.EventToolCall,
			Index: t.calls,
			ToolCall: providers.ToolCall{
				ID:        id,
				Name:      t.names.client(p.FunctionCall.Name),
				Arguments: argsString(p.FunctionCall.Args),
			},
		})
		t.calls++
		return
	}
	if p.Thought {
		if p.Text != "" {
			emit(providers.Event{Type: providers.EventReasoning, Text: p.Text})
		}
		if t.signature(p.ThoughtSignature, false) {
			emit(providers.Event{Type: providers.EventReasoning, Signature: providers.Tag(providers.SigGemini, t.sig)})
		}
		return
	}
	if t.signature(p.ThoughtSignature, false) {
		emit(providers.Event{Type: providers.EventReasoning, Signature: providers.Tag(providers.SigGemini, t.sig)})
	}
	if p.Text != "" {
		emit(providers.Event{Type: providers.EventText, Text: p.Text})
	}
}

// signature offers a part's signature and reports whether it became the answer's.
func (t *turn) signature(sig string, onCall bool) bool {
	if sig == "" || t.sigFromCall {
		return false
	}
	changed := sig != t.sig
	t.sig, t.sigFromCall = sig, onCall
	return changed
}

// argsString writes a call's args object as the neutral JSON string, {} when absent.
func argsString(args json.RawMessage) string {
	s := bytes.TrimSpace(args)
	if len(s) == 0 || string(s) == "null" {
		return "{}"
	}
	var b bytes.Buffer
	if json.Compact(&b, s) != nil {
		return string(s)
	}
	return b.String()
}

const base62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"

// randomToken returns n random base62 characters.
func randomToken(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	for i := range b {
		b[i] = base62[int(b[i])%len(base62)]
	}
	return string(b)
}
