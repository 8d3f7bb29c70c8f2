package notify

import (
	"context"
	"encoding/json"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/modelgateway/caddy-modelgateway/delivery"
)

// Discord posts to a Discord channel webhook ({"url":
// "https://discord.com/api/webhooks/{id}/{token}"}) an embed: title, description, the
// fields inline, the time, and a colour by how urgent the event is. Mentions are off:
// a name in a notification cannot ping @everyone.
//
// As for Slack, any https URL the client admits is taken; one on Discord's own hosts
// (discord.com, discordapp.com and their ptb. and canary. hosts) must be a webhook's
// execute URL.
type Discord struct {
	client *delivery.Client
}

// NewDiscord returns the Discord kind; client checks targets' URLs as it calls them (nil: the
// default guard).
func NewDiscord(client *delivery.Client) *Discord { return &Discord{client: guardOr(client)} }

// Check validates {"url": ...}.
func (k *Discord) Check(target json.RawMessage) ([]byte, string, error) {
	return checkURLTarget(k.client, target, discordShape)
}

// discordWebhookPath is a webhook's execute path, with or without an API version: the
// /slack and /github variants take other payloads.
var discordWebhookPath = regexp.MustCompile(`^/api(/v[0-9]+)?/webhooks/[0-9]+/[A-Za-z0-9_-]+/?$`)

func discordShape(u *url.URL) string {
	host := strings.ToLower(u.Hostname())
	for _, prefix := range []string{"", "ptb.", "canary."} {
		if host == prefix+"discord.com" || host == prefix+"discordapp.com" {
			if !discordWebhookPath.MatchString(u.Path) {
				return "a Discord webhook URL is https://discord.com/api/webhooks/{id}/{token}"
			}
			return ""
		}
	}
	return ""
}

// Send posts the message.
func (k *Discord) Send(ctx context.Context, env Env, target []byte, n Notification) (int, error) {
	u, err := readURLTarget(target)
	if err != nil {
		return 0, err
	}
	return postJSON(ctx, env, u, nil, discordMessage(n))
}

// Discord's embed limits (discord.com/developers/docs/resources/message#embed-object-embed-limits):
// past them the whole message is refused with 400.
const (
	discordTitleMax       = 256
	discordDescriptionMax = 4096
	discordFieldsMax      = 25
	discordFieldNameMax   = 256
	discordFieldValueMax  = 1024
	discordFooterMax      = 2048
)

// Embed colours, by severity: Discord's blurple, amber and red.
var discordColors = map[severity]int{
	severityInfo:    0x5865F2,
	severityWarning: 0xF59E0B,
	severityError:   0xED4245,
}

type discordPayload struct {
	Embeds          []discordEmbed         `json:"embeds"`
	AllowedMentions discordAllowedMentions `json:"allowed_mentions"`
}

type discordAllowedMentions struct {
	// Parse empty (not absent) turns every kind of mention off.
	Parse []string `json:"parse"`
}

type discordEmbed struct {
	Title       string              `json:"title"`
	Description string              `json:"description,omitempty"`
	URL         string              `json:"url,omitempty"`
	Color       int                 `json:"color"`
	Fields      []discordEmbedField `json:"fields,omitempty"`
	Timestamp   string              `json:"timestamp"`
	Footer      *discordEmbedFooter `json:"footer,omitempty"`
}

type discordEmbedField struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Inline bool   `json:"inline"`
}

type discordEmbedFooter struct {
	Text string `json:"text"`
}

// discordMessage renders n as one embed.
func discordMessage(n Notification) discordPayload {
	embed := discordEmbed{
		Title:       cut(titleOf(n), discordTitleMax),
		Description: cut(n.Text, discordDescriptionMax),
		URL:         n.URL,
		Color:       discordColors[eventSeverity(n.Event)],
		Timestamp:   occurredAt(n).Format(time.RFC3339),
		Footer:      &discordEmbedFooter{Text: cut(eventLabel(n.Event), discordFooterMax)},
	}
	for i, f := range n.Fields {
		if i == discordFieldsMax {
			break
		}
		embed.Fields = append(embed.Fields, discordEmbedField{
			Name: cut(orDash(f.Label), discordFieldNameMax), Value: cut(orDash(f.Value), discordFieldValueMax), Inline: true,
		})
	}
	return discordPayload{Embeds: []discordEmbed{embed}, AllowedMentions: discordAllowedMentions{Parse: []string{}}}
}

var _ Kind = (*Discord)(nil)
