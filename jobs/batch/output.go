package batch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/modelgateway/caddy-modelgateway/blobs"
	"github.com/modelgateway/caddy-modelgateway/files"
	"github.com/modelgateway/caddy-modelgateway/internal/background"
	"github.com/modelgateway/caddy-modelgateway/store"
)

// OutputLine is a line of a batch's output or error file, OpenAI's batch output format.
type OutputLine struct {
	ID       string          `json:"id"`
	CustomID string          `json:"custom_id"`
	Response *OutputResponse `json:"response"`
	Error    *OutputError    `json:"error"`
}

// OutputResponse is the answer a row got.
type OutputResponse struct {
	StatusCode int             `json:"status_code"`
	RequestID  string          `json:"request_id"`
	Body       json.RawMessage `json:"body"`
}

// OutputError says why a row got no answer.
type OutputError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// LineOf is the output line of row r of batch batchID.
func LineOf(batchID string, r store.BatchRow) OutputLine {
	l := OutputLine{ID: "batch_req_" + idRest(batchID) + "_" + fmt.Sprint(r.Index), CustomID: r.CustomID}
	if r.StatusCode != 0 {
		body := r.Body
		if body == nil {
			body = json.RawMessage(`null`)
		}
		l.Response = &OutputResponse{StatusCode: r.StatusCode, RequestID: r.RequestID, Body: body}
	}
	if r.StatusCode == 0 || r.ErrorCode != "" {
		l.Error = &OutputError{Code: r.ErrorCode, Message: r.ErrorMessage}
	}
	return l
}

// writeFiles writes the output file (rows answered with a 2xx) and the error file (every
// other row) of batch j from its recorded rows, in index order, streamed from the store
// into the blob store a page at a time, and returns their ids ("" for a file with no row).
// A file already written (this poll ran before and died before its end was recorded) is
// kept as it is.
func writeFiles(ctx context.Context, s store.Store, b blobs.Store, j store.Job, counts store.BatchRowCounts) (output, errs string, err error) {
	if b == nil {
		return "", "", errors.New("the gateway has no blob store to write the batch's files in")
	}
	if counts.Completed > 0 {
		output = OutputFileID(j.ID)
		if err := writeFile(ctx, s, b, j, output, "output", true); err != nil {
			return "", "", err
		}
	}
	if counts.Failed > 0 {
		errs = ErrorFileID(j.ID)
		if err := writeFile(ctx, s, b, j, errs, "errors", false); err != nil {
			return "", "", err
		}
	}
	return output, errs, nil
}

// writeFile writes file id of batch j: its rows that succeeded, or those that did not.
func writeFile(ctx context.Context, s store.Store, b blobs.Store, j store.Job, id, name string, succeeded bool) error {
	switch _, err := s.GetFile(ctx, j.WorkspaceID, id); {
	case err == nil:
		return nil
	case !errors.Is(err, store.ErrNotFound):
		return err
	}
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		var werr error
		if p := background.Call("writing the "+name+" file of batch "+j.ID, func() {
			werr = streamRows(ctx, s, j.ID, succeeded, pw)
		}); p != nil {
			werr = p
		}
		_ = pw.CloseWithError(werr)
	}()
	_, err := files.Save(ctx, s, b, files.Meta{
		ID: id, WorkspaceID: j.WorkspaceID, Filename: j.ID + "_" + name + ".jsonl", Purpose: files.PurposeBatchOutput,
		ContentType: "application/jsonl",
	}, pr)
	_ = pr.CloseWithError(errors.New("the file's writer stopped"))
	<-done
	if err != nil {
		return fmt.Errorf("writing the %s file of batch %s: %w", name, j.ID, err)
	}
	return nil
}

// streamRows writes the batch's rows that succeeded (or those that did not) to w as JSONL,
// in index order, a page of the store at a time.
func streamRows(ctx context.Context, s store.Store, batchID string, succeeded bool, w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	after := -1
	for {
		page, err := s.ListBatchRows(ctx, batchID, after, store.MaxBatchRowPage)
		if err != nil {
			return err
		}
		for _, r := range page {
			if r.Succeeded() != succeeded {
				continue
			}
			if err := enc.Encode(LineOf(batchID, r)); err != nil {
				return err
			}
		}
		if len(page) < store.MaxBatchRowPage {
			return nil
		}
		after = page[len(page)-1].Index
	}
}
