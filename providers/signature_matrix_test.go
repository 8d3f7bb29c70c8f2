package providers_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/anthropic"
	"github.com/modelgateway/caddy-modelgateway/providers/gemini"
	"github.com/modelgateway/caddy-modelgateway/providers/openai"
)

// rawSig is valid for every upstream's format (base64), so that only its origin decides.
const rawSig = "c2lnbmVk"

// decodeSigned decodes a complete upstream answer of the given origin carrying rawSig.
func decodeSigned(t *testing.T, origin string) *providers.Response {
	t.Helper()
	var (
		r   *providers.Response
		err error
	)
	switch origin {
	case providers.SigAnthropic:
		r, err = anthropic.DecodeResponse([]byte(`{"id":"msg_1","type":"message","role":"assistant","model":"m",
			"content":[{"type":"thinking","thinking":"hmm","signature":"` + rawSig + `"},{"type":"text","text":"hi"}],
			"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`))
	case providers.SigGemini:
		r, err = gemini.DecodeResponse([]byte(`{"candidates":[{"content":{"role":"model","parts":[
			{"text":"hmm","thought":true,"thoughtSignature":"` + rawSig + `"},{"text":"hi"}]},"finishReason":"STOP"}]}`))
	case providers.SigOpenAI:
		r, err = openai.DecodeResponsesResponse([]byte(`{"id":"resp_1","object":"response","status":"completed","model":"m","output":[
			{"id":"rs_1","type":"reasoning","summary":[{"type":"summary_text","text":"hmm"}],"encrypted_content":"` + rawSig + `"},
			{"id":"msg_1","type":"message","role":"assistant","status":"completed","content":[{"type":"output_text","text":"hi","annotations":[]}]}]}`))
	}
	if err != nil {
		t.Fatal(err)
	}
	if want := providers.Tag(origin, rawSig); r.ReasoningSignature != want {
		t.Fatalf("%s decoder: signature %q, want %q", origin, r.ReasoningSignature, want)
	}
	return r
}

func replayRequest(sig string) *providers.Request {
	return &providers.Request{
		Model: "m",
		Messages: []providers.Message{
			{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: "q"}}},
			{Role: providers.RoleAssistant, Content: []providers.Part{
				{Type: providers.PartReasoning, Text: "hmm", Signature: sig},
				{Type: providers.PartText, Text: "hi"},
			}},
			{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: "again"}}},
		},
	}
}

// sentSignature encodes req for an upstream of the given origin and returns the reasoning
// signature it sends ("" for none) and whether the reasoning part itself went out.
func sentSignature(t *testing.T, upstream string, req *providers.Request) (sig string, part bool) {
	t.Helper()
	var (
		body []byte
		err  error
	)
	switch upstream {
	case providers.SigAnthropic:
		body, err = anthropic.EncodeRequest(req)
	case providers.SigGemini:
		body, err = gemini.EncodeRequest(req)
	case providers.SigOpenAI:
		body, err = openai.EncodeResponsesRequest(req)
	}
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), "gw1:") {
		t.Errorf("%s request carries a tagged token: %s", upstream, body)
	}
	switch upstream {
	case providers.SigAnthropic:
		var w struct {
			Messages []struct {
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		mustUnmarshal(t, body, &w)
		for _, m := range w.Messages {
			var blocks []struct{ Type, Signature string }
			if json.Unmarshal(m.Content, &blocks) != nil {
				continue
			}
			for _, b := range blocks {
				if b.Type == "thinking" {
					return b.Signature, true
				}
			}
		}
	case providers.SigGemini:
		var w struct {
			Contents []struct {
				Parts []struct {
					ThoughtSignature string `json:"thoughtSignature"`
				} `json:"parts"`
			} `json:"contents"`
		}
		mustUnmarshal(t, body, &w)
		for _, c := range w.Contents {
			for _, p := range c.Parts {
				if p.ThoughtSignature != "" {
					// Gemini has no reasoning part: the signature rides on the answer's text.
					return p.ThoughtSignature, true
				}
			}
		}
	case providers.SigOpenAI:
		var w struct {
			Input []struct {
				Type             string `json:"type"`
				EncryptedContent string `json:"encrypted_content"`
			} `json:"input"`
		}
		mustUnmarshal(t, body, &w)
		for _, it := range w.Input {
			if it.Type == "reasoning" {
				return it.EncryptedContent, true
			}
		}
	}
	return "", false
}

func mustUnmarshal(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
}

var origins = []string{providers.SigAnthropic, providers.SigOpenAI, providers.SigGemini}

// TestSignatureReplayMatrix replays reasoning signed by each upstream to each upstream: the
// same provider gets its raw signature back, another one neither the signature nor (where
// a reasoning part needs one) the part.
func TestSignatureReplayMatrix(t *testing.T) {
	for _, from := range origins {
		resp := decodeSigned(t, from)
		for _, to := range origins {
			t.Run(from+"->"+to, func(t *testing.T) {
				sig, part := sentSignature(t, to, replayRequest(resp.ReasoningSignature))
				if from == to {
					if sig != rawSig || !part {
						t.Errorf("same provider: sent %q (part %v), want %q", sig, part, rawSig)
					}
					return
				}
				if sig != "" || part {
					t.Errorf("foreign signature sent: %q (part %v)", sig, part)
				}
			})
		}
	}
}

// TestSignatureUntaggedPassesThrough checks that a signature of unknown origin (a raw one a
// client sent) is sent to every upstream as before.
func TestSignatureUntaggedPassesThrough(t *testing.T) {
	for _, to := range origins {
		if sig, part := sentSignature(t, to, replayRequest(rawSig)); sig != rawSig || !part {
			t.Errorf("%s: sent %q (part %v), want %q", to, sig, part, rawSig)
		}
	}
}

// TestSignatureGeminiCallPlaceholder checks that a function call whose turn was signed by
// another provider gets Gemini's placeholder signature, as an unsigned one does.
func TestSignatureGeminiCallPlaceholder(t *testing.T) {
	req := replayRequest(providers.Tag(providers.SigAnthropic, rawSig))
	req.Messages = req.Messages[:2]
	req.Messages[1].ToolCalls = []providers.ToolCall{{ID: "call_1", Name: "f", Arguments: "{}"}}
	req.Messages = append(req.Messages, providers.Message{Role: providers.RoleTool, ToolCallID: "call_1",
		Content: []providers.Part{{Type: providers.PartText, Text: "ok"}}})
	body, err := gemini.EncodeRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(body), rawSig) || !strings.Contains(string(body), `"thoughtSignature":"skip_thought_signature_validator"`) {
		t.Errorf("body %s", body)
	}
}

// TestAnthropicSurfaceSignatureRoundTrip checks that what the Messages surface shows a
// client comes back through its request decoder intact: a token of another origin as is,
// an Anthropic one raw, which an Anthropic upstream is sent again.
func TestAnthropicSurfaceSignatureRoundTrip(t *testing.T) {
	for _, from := range origins {
		resp := decodeSigned(t, from)
		b, err := anthropic.EncodeResponse(resp, "msg_x", "m")
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Content json.RawMessage `json:"content"`
		}
		mustUnmarshal(t, b, &out)
		body := `{"model":"m","max_tokens":100,"messages":[{"role":"user","content":"q"},{"role":"assistant","content":` +
			string(out.Content) + `},{"role":"user","content":"again"}]}`
		req, err := anthropic.DecodeRequest([]byte(body))
		if err != nil {
			t.Fatalf("%v\n%s", err, body)
		}
		got := req.Messages[1].Content[0]
		want := providers.NativeSignature(providers.SigAnthropic, resp.ReasoningSignature)
		if got.Type != providers.PartReasoning || got.Signature != want {
			t.Errorf("%s: read back %+v, want signature %q", from, got, want)
		}
		if from == providers.SigAnthropic && want != rawSig {
			t.Errorf("anthropic signature shown as %q, want raw", want)
		}
		sig, _ := sentSignature(t, from, req)
		if sig != rawSig {
			t.Errorf("%s: replayed to its provider as %q", from, sig)
		}
	}
}

// TestResponsesSurfaceSignatureRoundTrip is the same for the Responses surface: its output
// items, sent back as input, keep the signature.
func TestResponsesSurfaceSignatureRoundTrip(t *testing.T) {
	for _, from := range origins {
		resp := decodeSigned(t, from)
		b, err := openai.EncodeResponsesResponse(resp, "resp_x", 1, "m")
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Output json.RawMessage `json:"output"`
		}
		mustUnmarshal(t, b, &out)
		body := `{"model":"m","input":` + string(out.Output) + `}`
		req, err := openai.DecodeResponsesRequest([]byte(body))
		if err != nil {
			t.Fatalf("%v\n%s", err, body)
		}
		var got *providers.Part
		for _, m := range req.Messages {
			for i := range m.Content {
				if m.Content[i].Type == providers.PartReasoning {
					got = &m.Content[i]
				}
			}
		}
		want := providers.NativeSignature(providers.SigOpenAI, resp.ReasoningSignature)
		if got == nil || got.Signature != want {
			t.Errorf("%s: read back %+v, want signature %q", from, got, want)
		}
		if from == providers.SigOpenAI && want != rawSig {
			t.Errorf("openai signature shown as %q, want raw", want)
		}
		req.Messages = append(req.Messages, providers.Message{Role: providers.RoleUser, Content: []providers.Part{{Type: providers.PartText, Text: "again"}}})
		if sig, _ := sentSignature(t, from, req); sig != rawSig {
			t.Errorf("%s: replayed to its provider as %q", from, sig)
		}
	}
}

// TestSurfaceStreamEncodersSignature checks that the stream encoders of the Messages and
// Responses surfaces show their own provider's signature raw and any other token as is.
func TestSurfaceStreamEncodersSignature(t *testing.T) {
	for _, from := range origins {
		tok := providers.Tag(from, rawSig)
		ev := providers.Event{Type: providers.EventReasoning, Signature: tok}

		enc := anthropic.NewStreamEncoder("msg_x", "m")
		var sb strings.Builder
		for _, f := range enc.Encode(ev) {
			sb.Write(f.Data)
		}
		want := providers.NativeSignature(providers.SigAnthropic, tok)
		if !strings.Contains(sb.String(), `"signature":"`+want+`"`) || (from == providers.SigAnthropic) != (want == rawSig) {
			t.Errorf("messages stream, %s: %s", from, sb.String())
		}

		renc := openai.NewResponsesStreamEncoder("resp_x", "m", 1)
		sb.Reset()
		frames := renc.Encode(ev)
		frames = append(frames, renc.Finish(providers.FinishStop, providers.Usage{})...)
		for _, f := range frames {
			sb.Write(f.Data)
		}
		want = providers.NativeSignature(providers.SigOpenAI, tok)
		if !strings.Contains(sb.String(), `"encrypted_content":"`+want+`"`) || (from == providers.SigOpenAI) != (want == rawSig) {
			t.Errorf("responses stream, %s: %s", from, sb.String())
		}
	}
}
