package openai

import (
	"context"
	"fmt"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// responsesChat is Chat through /responses (Config.API "responses").
func (p *Provider) responsesChat(ctx context.Context, req *providers.Request) (*providers.Response, error) {
	r := *req
	r.Stream = false
	body, err := EncodeResponsesRequest(&r)
	if err != nil {
		return nil, fmt.Errorf("provider %s: encoding request: %w", p.name, err)
	}
	ans, err := p.up.CallAnswer(ctx, p.responsesURL, body)
	if err != nil {
		return nil, err
	}
	out, err := DecodeResponsesResponse(ans.Body)
	if err != nil {
		// A failed response carries its error object, which malformed classifies; the error
		// may quote the body, which is not released.
		return nil, p.malformed(ans.Status, ans.Body, err)
	}
	ans.Release() // out holds copies of what it read
	return out, nil
}

// responsesChatStream is ChatStream through /responses (Config.API "responses"). A server
// that ignores stream and answers with one JSON body is read whole and its answer replayed
// as events.
func (p *Provider) responsesChatStream(ctx context.Context, req *providers.Request) (providers.Stream, error) {
	r := *req
	r.Stream = true
	body, err := EncodeResponsesRequest(&r)
	if err != nil {
		return nil, fmt.Errorf("provider %s: encoding request: %w", p.name, err)
	}
	resp, at, err := p.up.Send(ctx, p.responsesURL, body, true, nil)
	if err != nil {
		return nil, err
	}
	if upstreamhttp.IsJSON(resp.Header) {
		b, err := p.up.ReadBody(ctx, at, resp)
		if err != nil {
			return nil, err
		}
		out, err := DecodeResponsesResponse(b)
		if err != nil {
			return nil, p.malformed(resp.StatusCode, b, err)
		}
		return upstreamhttp.NewEventStream(responsesEvents(out)), nil
	}
	return newResponsesStream(ctx, p.name, at, upstreamhttp.NewIdleBody(resp.Body, p.idle, p.name)), nil
}
