package gemini

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// GenerateContentRequest is the body of models/{model}:generateContent and
// :streamGenerateContent, limited to the fields the adapter writes. systemInstruction,
// tools and toolConfig are top-level siblings of contents; sampling settings sit under
// generationConfig.
type GenerateContentRequest struct {
	Contents          []Content         `json:"contents"`
	SystemInstruction *Content          `json:"systemInstruction,omitempty"`
	Tools             []Tool            `json:"tools,omitempty"`
	ToolConfig        *ToolConfig       `json:"toolConfig,omitempty"`
	GenerationConfig  *GenerationConfig `json:"generationConfig,omitempty"`
}

// Content is one turn: role "user" or "model" (none for systemInstruction) and its parts.
type Content struct {
	Role  string `json:"role,omitempty"`
	Parts []Part `json:"parts"`
}

// Part is one piece of a turn. Exactly one data field (Text, InlineData, FileData,
// FunctionCall, FunctionResponse) is set; Thought and ThoughtSignature ride along.
type Part struct {
	Text string `json:"text,omitempty"`
	// Thought marks a thought-summary text part of an answer.
	Thought bool `json:"thought,omitempty"`
	// ThoughtSignature is bytes on the wire, so a base64 string; it is kept as received.
	ThoughtSignature string            `json:"thoughtSignature,omitempty"`
	InlineData       *Blob             `json:"inlineData,omitempty"`
	FileData         *FileData         `json:"fileData,omitempty"`
	FunctionCall     *FunctionCall     `json:"functionCall,omitempty"`
	FunctionResponse *FunctionResponse `json:"functionResponse,omitempty"`
}

// Blob is inline media; Data is base64.
type Blob struct {
	MimeType string `json:"mimeType"`
	Data     string `json:"data"`
}

// FileData is media by URI: a Files API URI, a GCS URI or a public https URL.
type FileData struct {
	MimeType string `json:"mimeType,omitempty"`
	FileURI  string `json:"fileUri"`
}

// FunctionCall is a call the model made; Args is an object. ID is optional and often absent.
type FunctionCall struct {
	ID   string          `json:"id,omitempty"`
	Name string          `json:"name"`
	Args json.RawMessage `json:"args,omitempty"`
}

// FunctionResponse answers a FunctionCall: Name is always the function's name, Response an
// object ({"output": ...} for a plain result, {"error": ...} for a failure).
type FunctionResponse struct {
	ID       string          `json:"id,omitempty"`
	Name     string          `json:"name"`
	Response json.RawMessage `json:"response"`
}

// Tool holds function declarations; the adapter sends all of them in one Tool.
type Tool struct {
	FunctionDeclarations []FunctionDeclaration `json:"functionDeclarations,omitempty"`
}

// FunctionDeclaration declares a function. Parameters is Gemini's OpenAPI-subset Schema.
type FunctionDeclaration struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters,omitempty"`
}

// ToolConfig carries the function calling mode.
type ToolConfig struct {
	FunctionCallingConfig *FunctionCallingConfig `json:"functionCallingConfig,omitempty"`
}

// FunctionCallingConfig is mode AUTO, ANY or NONE, and for ANY optionally the functions
// allowed.
type FunctionCallingConfig struct {
	Mode                 string   `json:"mode"`
	AllowedFunctionNames []string `json:"allowedFunctionNames,omitempty"`
}

// GenerationConfig holds the sampling, length, output-format and thinking settings.
type GenerationConfig struct {
	StopSequences    []string        `json:"stopSequences,omitempty"`
	ResponseMimeType string          `json:"responseMimeType,omitempty"`
	ResponseSchema   json.RawMessage `json:"responseSchema,omitempty"`
	MaxOutputTokens  *int64          `json:"maxOutputTokens,omitempty"`
	Temperature      *float64        `json:"temperature,omitempty"`
	TopP             *float64        `json:"topP,omitempty"`
	TopK             *int64          `json:"topK,omitempty"`
	ThinkingConfig   *ThinkingConfig `json:"thinkingConfig,omitempty"`
	// ResponseModalities asks for audio or images ("AUDIO", "TEXT", "IMAGE"); chat leaves
	// it unset (text).
	ResponseModalities []string      `json:"responseModalities,omitempty"`
	SpeechConfig       *SpeechConfig `json:"speechConfig,omitempty"`
	ImageConfig        *ImageConfig  `json:"imageConfig,omitempty"`
}

// SpeechConfig picks the voice of an AUDIO answer.
type SpeechConfig struct {
	VoiceConfig *VoiceConfig `json:"voiceConfig,omitempty"`
}

// VoiceConfig names one of Gemini's prebuilt voices.
type VoiceConfig struct {
	PrebuiltVoiceConfig *PrebuiltVoiceConfig `json:"prebuiltVoiceConfig,omitempty"`
}

// PrebuiltVoiceConfig is a voice name ("Kore", "Puck"...).
type PrebuiltVoiceConfig struct {
	VoiceName string `json:"voiceName"`
}

// ImageConfig shapes the images of an IMAGE answer: AspectRatio "1:1", "3:2"...; ImageSize
// "1K", "2K" or "4K" (the models that take it).
type ImageConfig struct {
	AspectRatio string `json:"aspectRatio,omitempty"`
	ImageSize   string `json:"imageSize,omitempty"`
}

// ThinkingConfig asks for thought summaries and bounds the thinking tokens (0 turns thinking
// off where the model allows it, -1 lets the model decide).
type ThinkingConfig struct {
	IncludeThoughts bool   `json:"includeThoughts,omitempty"`
	ThinkingBudget  *int64 `json:"thinkingBudget,omitempty"`
}

// GenerateContentResponse is an answer, or one frame of a streamed answer. Error is set on
// the error frame some servers send inside a stream.
type GenerateContentResponse struct {
	Candidates     []Candidate     `json:"candidates"`
	PromptFeedback *PromptFeedback `json:"promptFeedback"`
	UsageMetadata  *UsageMetadata  `json:"usageMetadata"`
	ModelVersion   string          `json:"modelVersion"`
	ResponseID     string          `json:"responseId"`
	Error          json.RawMessage `json:"error"`
}

// Candidate is one generated answer; the adapter reads index 0 only.
type Candidate struct {
	Content       *Content `json:"content"`
	FinishReason  string   `json:"finishReason"`
	FinishMessage string   `json:"finishMessage"`
	Index         int      `json:"index"`
}

// PromptFeedback says why a prompt was blocked; it comes with no candidates.
type PromptFeedback struct {
	BlockReason        string `json:"blockReason"`
	BlockReasonMessage string `json:"blockReasonMessage"`
}

// UsageMetadata is Gemini's token accounting. PromptTokenCount includes the cached tokens;
// CandidatesTokenCount excludes the thoughts.
type UsageMetadata struct {
	PromptTokenCount        TokenCount `json:"promptTokenCount"`
	CachedContentTokenCount TokenCount `json:"cachedContentTokenCount"`
	CandidatesTokenCount    TokenCount `json:"candidatesTokenCount"`
	ToolUsePromptTokenCount TokenCount `json:"toolUsePromptTokenCount"`
	ThoughtsTokenCount      TokenCount `json:"thoughtsTokenCount"`
	TotalTokenCount         TokenCount `json:"totalTokenCount"`
}

// MediaUsageMetadata is usageMetadata with the per-modality counts that audio and image
// answers are billed by. PromptTokenCount and CandidatesTokenCount are totals over the
// modalities; the details split them (TEXT, IMAGE, AUDIO, VIDEO, DOCUMENT).
type MediaUsageMetadata struct {
	PromptTokenCount        TokenCount           `json:"promptTokenCount"`
	CandidatesTokenCount    TokenCount           `json:"candidatesTokenCount"`
	ThoughtsTokenCount      TokenCount           `json:"thoughtsTokenCount"`
	PromptTokensDetails     []ModalityTokenCount `json:"promptTokensDetails"`
	CandidatesTokensDetails []ModalityTokenCount `json:"candidatesTokensDetails"`
}

// ModalityTokenCount is the share of one modality in a token count.
type ModalityTokenCount struct {
	Modality   string     `json:"modality"`
	TokenCount TokenCount `json:"tokenCount"`
}

// PredictRequest is the body of an Imagen model's :predict.
type PredictRequest struct {
	Instances  []PredictInstance `json:"instances"`
	Parameters PredictParameters `json:"parameters"`
}

// PredictInstance is one prompt.
type PredictInstance struct {
	Prompt string `json:"prompt"`
}

// PredictParameters are Imagen's settings: SampleCount images (1 to 4) of AspectRatio
// ("1:1", "3:4", "4:3", "9:16", "16:9").
type PredictParameters struct {
	SampleCount int    `json:"sampleCount"`
	AspectRatio string `json:"aspectRatio,omitempty"`
}

// PredictResponse is Imagen's answer: one prediction per image made. A prediction the
// safety filter removed carries RaiFilteredReason instead of bytes.
type PredictResponse struct {
	Predictions []Prediction    `json:"predictions"`
	Error       json.RawMessage `json:"error"`
}

// Prediction is one image, base64-encoded.
type Prediction struct {
	BytesBase64Encoded string `json:"bytesBase64Encoded"`
	MimeType           string `json:"mimeType"`
	RaiFilteredReason  string `json:"raiFilteredReason"`
}

// TokenCount reads a count written as a number or, as protobuf JSON writes 64-bit integers,
// as a string; null is 0.
type TokenCount int64

// UnmarshalJSON implements json.Unmarshaler.
func (c *TokenCount) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if string(b) == "null" {
		*c = 0
		return nil
	}
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		b = []byte(s)
	}
	if n, err := strconv.ParseInt(string(b), 10, 64); err == nil {
		*c = TokenCount(n)
		return nil
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("token count %.32q is not a number", b)
	}
	*c = TokenCount(math.Max(math.Min(f, math.MaxInt64/2), math.MinInt64/2))
	return nil
}

// ErrorStatus is the "error" of Google's error envelope {"error":{...}}, a google.rpc.Status: code is the HTTP status, status the canonical code
// name (INVALID_ARGUMENT, RESOURCE_EXHAUSTED...).
type ErrorStatus struct {
	Code    TokenCount `json:"code"`
	Message string     `json:"message"`
	Status  string     `json:"status"`
	// Details are kept raw: each is read on its own, so that one odd entry does not hide
	// the others.
	Details []json.RawMessage `json:"details"`
}

// ErrorDetail is one entry of details: the fields of google.rpc.ErrorInfo (reason,
// domain), google.rpc.RetryInfo (retryDelay) and google.rpc.QuotaFailure (violations)
// that the classification reads.
type ErrorDetail struct {
	Type       string           `json:"@type"`
	Reason     string           `json:"reason"`
	Domain     string           `json:"domain"`
	RetryDelay string           `json:"retryDelay"`
	Violations []QuotaViolation `json:"violations"`
}

// QuotaViolation is one violated quota of a google.rpc.QuotaFailure.
type QuotaViolation struct {
	QuotaMetric string `json:"quotaMetric"`
	QuotaID     string `json:"quotaId"`
	Subject     string `json:"subject"`
	Description string `json:"description"`
}
