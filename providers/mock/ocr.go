package mock

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/modelgateway/caddy-modelgateway/providers"
	"github.com/modelgateway/caddy-modelgateway/providers/internal/upstreamhttp"
)

// ReadDocument answers one page of markdown per page asked (in order, each once; the first
// page when none is), "# Page N\n\nmock text of <document>", the document being its URL or,
// for a data: URL, what comes before the data. An image is one page, as it is to Mistral,
// whatever pages were asked. Usage.Pages is the page count.
func (p *Provider) ReadDocument(ctx context.Context, req *providers.OCRRequest) (*providers.OCRResponse, error) {
	if strings.TrimSpace(req.DocumentURL) == "" {
		return nil, p.invalid("no document")
	}
	pages := slices.Clone(req.Pages)
	if len(pages) == 0 {
		pages = []int{0}
	}
	slices.Sort(pages)
	pages = slices.Compact(pages)
	if pages[0] < 0 {
		return nil, p.invalid(fmt.Sprintf("page %d: pages count from 0", pages[0]))
	}
	if req.IsImage {
		pages = pages[:1]
		pages[0] = 0
	}
	if err := p.delay(ctx); err != nil {
		return nil, fmt.Errorf("provider %s: %w", p.cfg.Name, err)
	}
	doc := documentName(req.DocumentURL)
	out := &providers.OCRResponse{Usage: providers.MediaUsage{Pages: int64(len(pages))}}
	for _, i := range pages {
		out.Pages = append(out.Pages, providers.OCRPage{Index: i, Markdown: fmt.Sprintf("# Page %d\n\nmock text of %s", i+1, doc)})
	}
	return out, nil
}

// documentName is how a page names its document: the URL, or the head of a data: URL
// ("data:application/pdf;base64"), never the data; at most 256 bytes.
func documentName(u string) string {
	u = strings.TrimSpace(u)
	if len(u) >= 5 && strings.EqualFold(u[:5], "data:") {
		if i := strings.IndexByte(u, ','); i >= 0 {
			u = u[:i]
		}
	}
	return upstreamhttp.Truncate(u, 256)
}

// Interface guard.
var _ providers.DocumentReader = (*Provider)(nil)
