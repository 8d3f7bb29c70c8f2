package providers

import (
	"context"
	"encoding/json"
	"io"
	"time"

	"github.com/modelgateway/caddy-modelgateway/internal/meter"
)

// A capability is what an endpoint family needs of a route's adapter. Each has one named
// interface here, which an adapter that has the capability implements (with an interface
// guard); routing drops the routes whose adapter lacks the capability of the endpoint asked.
// An adapter may instead accept the endpoint's own wire format as a Forwarder, which then
// serves the endpoint byte for byte. ChatProvider is the text capability. Speech,
// transcription, images, OCR, video, files and batches come next, each with its interface
// beside these.

// The wire formats of the non-text endpoints an adapter may forward as they are. The
// multipart ones (transcriptions, translations, image edits) come as a RawRequest.Reader.
const (
	FormatOpenAIEmbeddings     WireFormat = "openai_embeddings"
	FormatOpenAIModerations    WireFormat = "openai_moderations"
	FormatOpenAISpeech         WireFormat = "openai_speech"
	FormatOpenAITranscriptions WireFormat = "openai_transcriptions"
	FormatOpenAITranslations   WireFormat = "openai_translations"
	FormatOpenAIImages         WireFormat = "openai_images"
	FormatOpenAIImageEdits     WireFormat = "openai_image_edits"
	// FormatMistralOCR is Mistral's POST /v1/ocr.
	FormatMistralOCR WireFormat = "mistral_ocr"
)

// Embedder computes embeddings from the neutral model.
type Embedder interface {
	Embed(ctx context.Context, req *EmbeddingRequest) (*EmbeddingResponse, error)
}

// EmbeddingRequest is the neutral embeddings request: texts, or token arrays for upstreams
// that take them.
type EmbeddingRequest struct {
	// Model is the upstream model id.
	Model  string
	Inputs []string
	// Tokens holds pre-tokenized inputs, which only OpenAI-wire upstreams accept; an adapter
	// without them refuses the request as invalid.
	Tokens [][]int64
	// Dimensions asks for shorter vectors; nil means the model's own size.
	Dimensions *int64
	User       string
}

// EmbeddingResponse holds one vector per input, in input order, each the upstream's JSON
// array of numbers as it came (so that a float answer is the upstream's to the digit).
type EmbeddingResponse struct {
	Vectors []json.RawMessage
	// Usage counts the input tokens billed; UsageKnown is false when the upstream reports
	// none and the adapter could not count them either.
	Usage      Usage
	UsageKnown bool
}

// Moderator classifies content against a moderation policy from the neutral model.
type Moderator interface {
	Moderate(ctx context.Context, req *ModerationRequest) (*ModerationResponse, error)
}

// ModerationRequest is the neutral moderation request: one result is expected per input.
type ModerationRequest struct {
	// Model is the upstream model id.
	Model  string
	Inputs []ModerationInput
}

// ModerationInput is a text or an image to classify.
type ModerationInput struct {
	Text     string
	ImageURL string
}

// ModerationResponse is one result per input.
type ModerationResponse struct {
	ID      string
	Results []ModerationResult
}

// ModerationResult is the verdict on one input, with OpenAI's category names
// ("harassment", "self-harm/intent"...).
type ModerationResult struct {
	Flagged                   bool                `json:"flagged"`
	Categories                map[string]bool     `json:"categories"`
	CategoryScores            map[string]float64  `json:"category_scores"`
	CategoryAppliedInputTypes map[string][]string `json:"category_applied_input_types"`
}

// ModerationCategories are OpenAI's moderation categories, the keys every result carries.
var ModerationCategories = []string{
	"harassment", "harassment/threatening", "hate", "hate/threatening", "illicit", "illicit/violent",
	"self-harm", "self-harm/instructions", "self-harm/intent", "sexual", "sexual/minors",
	"violence", "violence/graphic",
}

// MediaUsage is what a media call consumed, as far as the upstream reported it: each field
// zero when not reported. It is the usage by dimension that pricing prices and the store
// records (meter.Usage): tokens are counted once each (Input leaves out audio and image
// tokens).
type MediaUsage = meter.Usage

// SpeechSynthesizer turns text into audio from the neutral model.
type SpeechSynthesizer interface {
	// Synthesize starts the speech: the response's Body yields the audio as the upstream
	// produces it, never the whole clip first.
	Synthesize(ctx context.Context, req *SpeechRequest) (*SpeechResponse, error)
}

// SpeechRequest is the neutral speech request (OpenAI's POST /audio/speech).
type SpeechRequest struct {
	// Model is the upstream model id.
	Model string
	Input string
	// Voice is a voice name or id ("alloy", an ElevenLabs voice id).
	Voice        string
	Instructions string
	// Format is mp3, opus, aac, flac, wav or pcm (24 kHz 16-bit mono little-endian). An
	// adapter that cannot produce it refuses with CategoryInvalidRequest before any call.
	Format string
	// Speed is 0.25 to 4; 0 means the upstream's default.
	Speed float64
}

// openAIVoices are OpenAI's built-in speech voices.
var openAIVoices = map[string]bool{"alloy": true, "ash": true, "ballad": true, "coral": true, "echo": true, "fable": true,
	"onyx": true, "nova": true, "sage": true, "shimmer": true, "verse": true, "marin": true, "cedar": true}

// OpenAIVoice reports whether voice is one of OpenAI's built-in speech voices, which no
// other upstream knows: the adapter of another upstream refuses it before any call
// (CategoryInvalidRequest, Param "voice"), so that a route that knows it is tried.
func OpenAIVoice(voice string) bool { return openAIVoices[voice] }

// SpeechResponse is audio being produced.
type SpeechResponse struct {
	// ContentType is the audio's media type (audio/mpeg, audio/wav...).
	ContentType string
	// Body is the audio in the requested format; the caller closes it. Read errors after
	// the first bytes are *UpstreamError.
	Body io.ReadCloser
	// Usage is what the call is billed, known before the audio ends (characters, tokens
	// when the upstream reports them up front); UsageKnown false when it reports nothing.
	Usage      MediaUsage
	UsageKnown bool
}

// UsageReporter is a response body (SpeechResponse.Body) that knows its usage once read to
// its end: an upstream that reports tokens after the audio.
type UsageReporter interface {
	Usage() (MediaUsage, bool)
}

// Transcriber turns speech into text from the neutral model.
type Transcriber interface {
	Transcribe(ctx context.Context, req *TranscriptionRequest) (*Transcription, error)
}

// TranscriptionRequest is the neutral transcription or translation request.
type TranscriptionRequest struct {
	// Model is the upstream model id.
	Model string
	// Translate asks for English text whatever the spoken language (/audio/translations).
	Translate bool
	// File is the audio, read once as it is sent; Size is its length or -1 when unknown.
	File            io.Reader
	Size            int64
	FileName        string
	FileContentType string
	Language        string
	Prompt          string
	Temperature     *float64
	// Timestamps are the granularities asked: "word", "segment".
	Timestamps []string
	// Diarize asks for speakers on the segments.
	Diarize bool
}

// Transcription is the text of the audio.
type Transcription struct {
	Text     string
	Language string
	// Duration is the audio's length when the upstream reports it.
	Duration time.Duration
	Segments []TranscriptionSegment
	Words    []TranscriptionWord
	// Usage is what the upstream reported (seconds or tokens); UsageKnown false when nothing.
	Usage      MediaUsage
	UsageKnown bool
}

// TranscriptionSegment is a span of the transcript.
type TranscriptionSegment struct {
	Start, End time.Duration
	Text       string
	Speaker    string
}

// TranscriptionWord is one word with its time.
type TranscriptionWord struct {
	Start, End time.Duration
	Word       string
	Speaker    string
}

// ImageGenerator makes or edits images from the neutral model.
type ImageGenerator interface {
	GenerateImages(ctx context.Context, req *ImageRequest) (*ImageResponse, error)
}

// ImageRequest is the neutral image generation or edit request.
type ImageRequest struct {
	// Model is the upstream model id.
	Model  string
	Prompt string
	// N is how many images; at least 1.
	N int
	// Size ("1024x1024", "auto" or ""), Quality, OutputFormat (png, jpeg, webp) and
	// Background as the client asked; an adapter maps what its upstream knows.
	Size, Quality, OutputFormat, Background string
	// Images are the pictures to edit, in order; Mask, when set, marks the area to change.
	Images []ImageInput
	Mask   *ImageInput
}

// ImageInput is an uploaded picture, whole: the upstreams that take edits as JSON need it
// inline (bounded by the route's upload limit).
type ImageInput struct {
	Data     []byte
	MIMEType string
	FileName string
}

// ImageResponse is the images made.
type ImageResponse struct {
	Images []GeneratedImage
	// Size and Quality are what the upstream says it made, when it says.
	Size, Quality string
	Usage         MediaUsage
	UsageKnown    bool
}

// GeneratedImage is one image, its bytes base64-encoded as the upstreams send them.
type GeneratedImage struct {
	B64JSON       string
	MIMEType      string
	RevisedPrompt string
}

// DocumentReader reads the text of documents and images (OCR) from the neutral model.
type DocumentReader interface {
	ReadDocument(ctx context.Context, req *OCRRequest) (*OCRResponse, error)
}

// OCRRequest is the neutral OCR request.
type OCRRequest struct {
	// Model is the upstream model id.
	Model string
	// DocumentURL is an https or data: URL of a PDF or image; IsImage tells an image.
	DocumentURL string
	IsImage     bool
	// Pages are the 0-based pages asked, nil for all.
	Pages              []int
	IncludeImageBase64 bool
}

// OCRResponse is the text of each page read.
type OCRResponse struct {
	Pages []OCRPage
	// Usage.Pages counts the pages billed.
	Usage MediaUsage
}

// OCRPage is one page's text as markdown.
type OCRPage struct {
	Index    int
	Markdown string
}
