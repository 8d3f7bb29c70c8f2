package notify

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"

	"github.com/modelgateway/caddy-modelgateway/delivery"
)

// Teams posts to a Microsoft Teams Workflows webhook (the "Post to a channel when a
// webhook request is received" workflow; its URL is on a *.logic.azure.com or
// *.powerplatform.com host) an Adaptive Card 1.4 in the message envelope the workflow
// reads: the title coloured by how urgent the event is, the text, the fields as a fact
// set, the event and its time, and a button to the matter when there is a place for it.
//
// Any https URL the client admits is taken (a workflow's host varies with its region and
// environment); one on those hosts must be a workflow's trigger URL.
type Teams struct {
	client *delivery.Client
}

// NewTeams returns the Teams kind; client checks targets' URLs as it calls them (nil: the
// default guard).
func NewTeams(client *delivery.Client) *Teams { return &Teams{client: guardOr(client)} }

// Check validates {"url": ...}.
func (k *Teams) Check(target json.RawMessage) ([]byte, string, error) {
	return checkURLTarget(k.client, target, teamsShape)
}

func teamsShape(u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	if !strings.HasSuffix(host, ".logic.azure.com") && !strings.HasSuffix(host, ".powerplatform.com") {
		return ""
	}
	if !strings.Contains(u.Path, "/workflows/") {
		return "a Teams Workflows webhook URL is the workflow's HTTP trigger URL (…/workflows/…/triggers/manual/paths/invoke?…)"
	}
	return ""
}

// Send posts the card.
func (k *Teams) Send(ctx context.Context, env Env, target []byte, n Notification) (int, error) {
	u, err := readURLTarget(target)
	if err != nil {
		return 0, err
	}
	return postJSON(ctx, env, u, nil, teamsMessage(n))
}

// AdaptiveCardContentType is the attachment content type of an Adaptive Card.
const AdaptiveCardContentType = "application/vnd.microsoft.card.adaptive"

// Title colours, by severity, from the card's host palette.
var teamsColors = map[severity]string{
	severityInfo:    "accent",
	severityWarning: "warning",
	severityError:   "attention",
}

type teamsPayload struct {
	Type        string            `json:"type"`
	Attachments []teamsAttachment `json:"attachments"`
}

type teamsAttachment struct {
	ContentType string       `json:"contentType"`
	Content     adaptiveCard `json:"content"`
}

type adaptiveCard struct {
	Schema  string          `json:"$schema"`
	Type    string          `json:"type"`
	Version string          `json:"version"`
	Body    []adaptiveBlock `json:"body"`
	Actions []adaptiveBlock `json:"actions,omitempty"`
	// MSTeams widens the card to the channel's width, where the facts read better.
	MSTeams map[string]string `json:"msteams,omitempty"`
}

// adaptiveBlock is a card element or action: a TextBlock, a FactSet, an Action.OpenUrl.
type adaptiveBlock struct {
	Type     string         `json:"type"`
	Text     string         `json:"text,omitempty"`
	Wrap     bool           `json:"wrap,omitempty"`
	Weight   string         `json:"weight,omitempty"`
	Size     string         `json:"size,omitempty"`
	Style    string         `json:"style,omitempty"`
	Color    string         `json:"color,omitempty"`
	IsSubtle bool           `json:"isSubtle,omitempty"`
	Spacing  string         `json:"spacing,omitempty"`
	Facts    []adaptiveFact `json:"facts,omitempty"`
	Title    string         `json:"title,omitempty"`
	URL      string         `json:"url,omitempty"`
}

type adaptiveFact struct {
	Title string `json:"title"`
	Value string `json:"value"`
}

// teamsMessage renders n as an Adaptive Card in a Workflows message. Texts go as written:
// the markdown subset of TextBlocks has no escape that every Teams client honours, and a
// stray backslash in a key's name would read worse than its emphasis.
func teamsMessage(n Notification) teamsPayload {
	body := []adaptiveBlock{{
		Type: "TextBlock", Text: titleOf(n), Wrap: true, Weight: "Bolder", Size: "Medium",
		Style: "heading", Color: teamsColors[eventSeverity(n.Event)],
	}}
	if n.Text != "" {
		body = append(body, adaptiveBlock{Type: "TextBlock", Text: n.Text, Wrap: true})
	}
	if len(n.Fields) > 0 {
		facts := make([]adaptiveFact, len(n.Fields))
		for i, f := range n.Fields {
			facts[i] = adaptiveFact{Title: orDash(f.Label), Value: orDash(f.Value)}
		}
		body = append(body, adaptiveBlock{Type: "FactSet", Facts: facts})
	}
	body = append(body, adaptiveBlock{
		Type: "TextBlock", Text: eventLabel(n.Event) + " · " + occurredAt(n).Format("2006-01-02 15:04 UTC"),
		Wrap: true, IsSubtle: true, Size: "Small", Spacing: "Medium",
	})
	card := adaptiveCard{
		Schema: "http://adaptivecards.io/schemas/adaptive-card.json", Type: "AdaptiveCard", Version: "1.4",
		Body: body, MSTeams: map[string]string{"width": "Full"},
	}
	if n.URL != "" {
		card.Actions = []adaptiveBlock{{Type: "Action.OpenUrl", Title: "Open", URL: n.URL}}
	}
	return teamsPayload{Type: "message", Attachments: []teamsAttachment{{ContentType: AdaptiveCardContentType, Content: card}}}
}

var _ Kind = (*Teams)(nil)
