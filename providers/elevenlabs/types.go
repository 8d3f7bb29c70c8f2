package elevenlabs

// SpeechBody is the JSON body of POST /v1/text-to-speech/{voice_id}/stream.
type SpeechBody struct {
	Text          string         `json:"text"`
	ModelID       string         `json:"model_id,omitempty"`
	VoiceSettings *VoiceSettings `json:"voice_settings,omitempty"`
}

// VoiceSettings overrides the voice's stored settings for one request; only what the
// neutral request carries is set.
type VoiceSettings struct {
	Speed float64 `json:"speed,omitempty"`
}

// Transcript is the answer of POST /v1/speech-to-text (one channel).
type Transcript struct {
	LanguageCode        string  `json:"language_code"`
	LanguageProbability float64 `json:"language_probability"`
	Text                string  `json:"text"`
	Words               []Word  `json:"words"`
}

// Word is one item of a transcript: a word, the spacing between two words, or an audio
// event such as "(laughter)". Start and End are in seconds, absent when no timestamps
// were asked.
type Word struct {
	Text      string   `json:"text"`
	Start     *float64 `json:"start"`
	End       *float64 `json:"end"`
	Type      string   `json:"type"`
	SpeakerID *string  `json:"speaker_id"`
}

// The kinds of transcript items (Word.Type).
const (
	WordWord       = "word"
	WordSpacing    = "spacing"
	WordAudioEvent = "audio_event"
)
