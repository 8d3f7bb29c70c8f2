package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/modelgateway/caddy-modelgateway/delivery"
)

// maxURLLength bounds a target's URL: every service's webhook URL is far shorter, and a
// longer one is a paste gone wrong.
const maxURLLength = 2048

// maxAnswerPreview is the most characters of a service's answer a SendError quotes: enough
// for its error code and sentence ("invalid_payload", "Unknown Webhook").
const maxAnswerPreview = 200

// userAgent names the gateway to the services it posts to.
const userAgent = "modelgateway-notifications/1"

// decodeTarget reads target, which must be one JSON object with no field but v's, into v.
// Its error is a *TargetError that quotes no value of the target.
func decodeTarget(target json.RawMessage, v any) error {
	trimmed := bytes.TrimSpace(target)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return &TargetError{Message: "must be a JSON object"}
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &typeErr):
			return &TargetError{Field: typeErr.Field, Message: "must be a " + jsonTypeName(typeErr.Type.Kind().String())}
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			// The field's name is the user's own key, not a value: quoting it is what
			// tells them which one to remove.
			name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
			return &TargetError{Field: name, Message: "is not a field of this kind's target"}
		}
		return &TargetError{Message: "is not valid JSON"}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &TargetError{Message: "must be one JSON object, with nothing after it"}
	}
	return nil
}

// jsonTypeName says a Go kind as the JSON type a user writes.
func jsonTypeName(kind string) string {
	switch kind {
	case "string":
		return "string"
	case "slice", "array":
		return "list"
	case "struct", "map":
		return "object"
	case "bool":
		return "boolean"
	}
	return "number"
}

// guardOr is client, or the default guard (https only, no internal address) when it is
// nil: a kind never checks a URL with nothing.
func guardOr(client *delivery.Client) *delivery.Client {
	if client == nil {
		return delivery.NewClient(delivery.ClientOptions{})
	}
	return client
}

// checkTargetURL checks the URL of a target's field with client, as client will call it,
// and returns it trimmed and parsed. Its error is a *TargetError that quotes no part of
// the URL: a webhook URL's path is its credential.
func checkTargetURL(client *delivery.Client, field, raw string) (string, *url.URL, error) {
	raw = strings.TrimSpace(raw)
	switch {
	case raw == "":
		return "", nil, &TargetError{Field: field, Message: "is required"}
	case len(raw) > maxURLLength:
		return "", nil, &TargetError{Field: field, Message: fmt.Sprintf("is longer than %d characters", maxURLLength)}
	}
	u, err := client.CheckURL(raw)
	if err != nil {
		var parseErr *url.Error
		switch {
		case errors.As(err, &parseErr):
			// url.Parse's error quotes the whole URL.
			return "", nil, &TargetError{Field: field, Message: "is not a valid URL"}
		case errors.Is(err, delivery.ErrSchemeNotAllowed):
			return "", nil, &TargetError{Field: field, Message: "must be an https URL"}
		case errors.Is(err, delivery.ErrForbiddenAddress):
			// The error names the address class and the literal address, which is the host
			// the user wrote: no secret.
			return "", nil, &TargetError{Field: field, Message: "must lead to a public address: " + err.Error()}
		}
		// The remaining refusals (no host, credentials in the URL) quote nothing of it.
		return "", nil, &TargetError{Field: field, Message: err.Error()}
	}
	return raw, u, nil
}

// urlPreview masks a target's URL for display: its host and its last four characters,
// which tell two destinations apart without showing the path or query that authorize a
// post ("hooks.slack.com/…/a1b2").
func urlPreview(u *url.URL, raw string) string {
	runes := []rune(raw)
	return u.Host + "/…/" + string(runes[max(0, len(runes)-4):])
}

// urlTarget is the target of the kinds that post to a URL the service issued.
type urlTarget struct {
	URL string `json:"url"`
}

// checkURLTarget checks a {"url": ...} target with client; shape, when it is not nil,
// returns what is wrong with a URL on one of the service's own hosts ("" when nothing
// is), so that a URL copied from the wrong page is refused when it is given rather than
// when the first notification fails.
func checkURLTarget(client *delivery.Client, target json.RawMessage, shape func(*url.URL) string) ([]byte, string, error) {
	var t urlTarget
	if err := decodeTarget(target, &t); err != nil {
		return nil, "", err
	}
	raw, u, err := checkTargetURL(client, "url", t.URL)
	if err != nil {
		return nil, "", err
	}
	if shape != nil {
		if msg := shape(u); msg != "" {
			return nil, "", &TargetError{Field: "url", Message: msg}
		}
	}
	normalized, err := json.Marshal(urlTarget{URL: raw})
	if err != nil {
		return nil, "", fmt.Errorf("encoding the target: %w", err)
	}
	return normalized, urlPreview(u, raw), nil
}

// readURLTarget reads a target that checkURLTarget normalized.
func readURLTarget(target []byte) (string, error) {
	var t urlTarget
	if err := json.Unmarshal(target, &t); err != nil || t.URL == "" {
		return "", errors.New("the stored target does not read as {\"url\": ...}")
	}
	return t.URL, nil
}

// postJSON posts payload as JSON to rawURL through env's client, with header h added, and
// returns the answer's status; a non-2xx answer is a *SendError.
func postJSON(ctx context.Context, env Env, rawURL string, h http.Header, payload any) (int, error) {
	if env.Client == nil {
		return 0, errors.New("no outbound client to post with")
	}
	body, err := json.Marshal(payload)
	if err != nil {
		return 0, fmt.Errorf("encoding the message: %w", err)
	}
	return postBody(ctx, env, rawURL, h, body)
}

// postBody posts body, JSON already encoded, as postJSON does.
func postBody(ctx context.Context, env Env, rawURL string, h http.Header, body []byte) (int, error) {
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", userAgent)
	resp, err := env.Client.Post(ctx, rawURL, h, body)
	if err != nil {
		return 0, redactURLError(err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.StatusCode, &SendError{Status: resp.StatusCode, Message: answerPreview(resp.Preview)}
	}
	return resp.StatusCode, nil
}

// redactURLError rewrites the *url.Error of a failed post, whose message quotes the whole
// URL (a webhook's token is in its path or query), to name the host alone; what failed is
// kept for errors.Is (a deadline, a refused address).
func redactURLError(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	host := "the destination"
	if u, perr := url.Parse(ue.URL); perr == nil && u.Host != "" {
		host = u.Host
	}
	return fmt.Errorf("posting to %s: %w", host, ue.Err)
}

// answerPreview is the start of a service's answer for a SendError: one line of valid
// UTF-8, at most maxAnswerPreview characters.
func answerPreview(b []byte) string {
	s := strings.Join(strings.Fields(strings.ToValidUTF8(string(b), "�")), " ")
	if s == "" {
		return "(no body)"
	}
	return cut(s, maxAnswerPreview)
}

// cut shortens s to at most n characters, the last an ellipsis when it was longer.
func cut(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	runes := []rune(s)
	return string(runes[:n-1]) + "…"
}

// orDash stands in for an empty value where a service refuses an empty string (a
// Discord field, a Teams fact).
func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "—"
	}
	return s
}
