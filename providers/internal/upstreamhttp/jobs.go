package upstreamhttp

import (
	"context"
	"net/http"
	"time"

	"github.com/modelgateway/caddy-modelgateway/providers"
)

// JobNotFound marks err, when it is the upstream's 404 on a job (its status, its content,
// its deletion), as providers.CategoryNotFound: the upstream does not know the job or has
// no such content, which no retry and no other route changes. Other errors are returned as
// they are.
func JobNotFound(err error) error {
	if ue, ok := providers.AsUpstreamError(err); ok && ue.Status == http.StatusNotFound {
		ue.Category, ue.Retryable = providers.CategoryNotFound, false
	}
	return err
}

// NotFound is the refusal, before any call, of content the upstream does not make (a
// variant, a sample past the last): providers.CategoryNotFound with msg.
func NotFound(provider, msg string) *providers.UpstreamError {
	return &providers.UpstreamError{Provider: provider, Category: providers.CategoryNotFound, Message: msg}
}

// VideoContent hands on a 2xx answer of media bytes unread, as RawResponse does (read errors
// classified, the idle watchdog armed, closing the body ends the attempt), with the status
// and headers a client needs to receive a whole file or a range of it.
func (c *Client) VideoContent(ctx context.Context, at *Attempt, resp *http.Response, idle time.Duration) *providers.VideoContent {
	raw := c.RawResponse(ctx, at, resp, true, idle)
	return &providers.VideoContent{
		Body:         raw.Body,
		ContentType:  resp.Header.Get("Content-Type"),
		Status:       resp.StatusCode,
		ContentRange: resp.Header.Get("Content-Range"),
		Length:       resp.ContentLength,
	}
}
