package handlers

import (
	"bytes"

	"github.com/modelgateway/caddy-modelgateway/internal/rawjson"
)

// The estimate of a prompt's tokens billed when the upstream never reported them (a stream
// the client cancelled before its usage): what the model reads, not the JSON around it.
const (
	// promptBytesPerToken: the tokenizers of the day pack about four bytes of English and
	// three of CJK a token; three keeps the estimate above what is billed for most text.
	promptBytesPerToken = 3
	// messageOverheadTokens frames each message (its role and separators; OpenAI counts 3),
	// and replyPrimingTokens the assistant's turn the answer starts with.
	messageOverheadTokens = 4
	replyPrimingTokens    = 3
)

// promptSize is what a text request gives the model to read.
type promptSize struct {
	// text is the bytes of the prompt's text and tool definitions, messages its messages
	// (or embedding inputs), media the pictures and files sent inline.
	text, messages, media int
}

// tokens is the estimate of the prompt's tokens: its text at promptBytesPerToken, each
// message framed, each picture or file at the most a provider bills one.
func (p promptSize) tokens() int64 {
	return int64((p.text+promptBytesPerToken-1)/promptBytesPerToken+messageOverheadTokens*p.messages+replyPrimingTokens) +
		int64(p.media)*visionImageTokens
}

// estimatePromptTokens is a close upper bound on the input tokens of a text or embeddings
// request body: the text of its messages or input, system prompt and instructions, its tool
// definitions as the model reads them (their JSON), each message's framing, and each inline
// picture or file at the most a provider bills one. A body it cannot read is counted a token
// a byte.
func estimatePromptTokens(body []byte) int64 {
	var p promptSize
	c := rawjson.NewCursor(body)
	for more := c.Enter('{'); more; more = c.More('{') {
		switch string(c.Key()) {
		case "messages", "input", "contents":
			p.addMessages(c.Value())
		case "system", "instructions", "prompt":
			p.addText(c.Value(), false)
		case "tools", "functions":
			p.text += len(c.Value())
		default:
			c.Skip()
		}
	}
	if !c.Done() {
		return estimateTokens(len(body))
	}
	return p.tokens()
}

// addMessages counts a list of messages (or inputs), or one given as a string.
func (p *promptSize) addMessages(v []byte) {
	if len(v) == 0 || v[0] != '[' {
		p.messages++
		p.addText(v, false)
		return
	}
	c := rawjson.NewCursor(v)
	for more := c.Enter('['); more; more = c.More('[') {
		p.messages++
		p.addText(c.Value(), false)
	}
}

// addText counts the strings of a value, wherever they are, but not the keys around them
// nor the roles and types that frame messages and parts: a
// string that is inline data (a data: URL, or the data of a base64 source) counts as media,
// a number as a token (the token ids of a pre-tokenized input).
func (p *promptSize) addText(v []byte, data bool) {
	if len(v) == 0 {
		return
	}
	switch v[0] {
	case '"':
		switch {
		case data, bytes.HasPrefix(v, []byte(`"data:`)):
			p.media++
		default:
			p.text += len(v) - 2
		}
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		// A token id of a pre-tokenized input is one token.
		p.text += promptBytesPerToken
	case '[':
		c := rawjson.NewCursor(v)
		for more := c.Enter('['); more; more = c.More('[') {
			p.addText(c.Value(), false)
		}
	case '{':
		c := rawjson.NewCursor(v)
		for more := c.Enter('{'); more; more = c.More('{') {
			switch k := string(c.Key()); k {
			case "role", "type":
				// A message's role and a part's type are its framing, counted apart.
				c.Skip()
			default:
				p.addText(c.Value(), k == "data" || k == "file_data")
			}
		}
	}
}
