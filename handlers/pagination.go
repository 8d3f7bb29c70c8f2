package handlers

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// Pagination. Every list the gateway answers (GET /keys, /workspaces, /activity,
// /gateway/models, /gateway/models/me, /data/models, /providers, /endpoints,
// /organisations, /pricing/models) is paged the same way, with the envelope of the
// specification's batch list:
//
//	{"object": "list", "data": [...], "first_id": "...", "last_id": "...", "has_more": true}
//
// Query parameters:
//   - limit: how many items a page holds, 1 to 100, default 20; a larger value is
//     capped at 100. Anything else (not an integer, below 1) is 400 validation_error
//     with param "limit".
//   - after: a cursor, the id of the last item of the previous page (the previous page's
//     last_id); the page starts with the item after it. An id that is not in the list
//     is 400 validation_error with param "after".
//
// first_id and last_id are the ids of the page's first and last items (null when the
// page is empty); has_more tells whether items follow last_id. Items are in a stable
// order (documented per list), so walking pages with after=last_id until has_more is
// false visits every item once.
//
// Lists of the store (keys, workspaces, activity) are read a page at a time from it
// (storePage); lists of the configuration (models, providers...) are cut from memory
// (page).
//
// GET /models is OpenAI's model list, which the SDKs read as one unpaged list: it
// answers every model unless the request sets limit or after.
const (
	defaultPageLimit = store.DefaultPageLimit
	maxPageLimit     = store.MaxPageLimit
)

// pageRequest is a page asked for.
type pageRequest struct {
	limit int
	after string
	// set tells whether the request named limit or after at all.
	set bool
}

// store is the page as a store list method takes it.
func (p pageRequest) store() store.Page { return store.Page{After: p.after, Limit: p.limit} }

// parsePage reads limit and after.
func parsePage(q url.Values) (pageRequest, *APIError) {
	p := pageRequest{limit: defaultPageLimit}
	if vs, ok := q["limit"]; ok {
		p.set = true
		raw := first(vs)
		n, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil || n < 1 {
			return p, paramError("limit", fmt.Sprintf("limit %q is not an integer from 1 to %d (values above %d are capped)", raw, maxPageLimit, maxPageLimit))
		}
		p.limit = min(n, maxPageLimit)
	}
	if vs, ok := q["after"]; ok {
		p.set = true
		p.after = first(vs)
		if p.after == "" {
			return p, paramError("after", "after must be the id of the last item of the previous page")
		}
	}
	return p, nil
}

func first(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return vs[0]
}

// page cuts one page out of items, which are in the list's stable order, and wraps it
// in the list envelope.
func page[T any](items []T, id func(T) string, p pageRequest) (map[string]any, *APIError) {
	start := 0
	if p.after != "" {
		start = -1
		for i, it := range items {
			if id(it) == p.after {
				start = i + 1
				break
			}
		}
		if start < 0 {
			return nil, afterError(p.after)
		}
	}
	end := min(start+p.limit, len(items))
	return envelope(items[start:end], id, end < len(items)), nil
}

// storePage wraps in the list envelope the page a store list method returned for p (and
// err): at most p.limit of items, and has_more when it returned more. An after the store
// did not find in the list is 400, as for page.
func storePage[T any](items []T, err error, id func(T) string, p pageRequest) (map[string]any, error) {
	if errors.Is(err, store.ErrCursorNotFound) {
		return nil, afterError(p.after)
	}
	if err != nil {
		return nil, err
	}
	data, more := store.Cut(items, p.limit)
	return envelope(data, id, more), nil
}

// envelope is the list envelope of one page; data is [] rather than null when empty.
func envelope[T any](data []T, id func(T) string, more bool) map[string]any {
	if data == nil {
		data = []T{}
	}
	env := map[string]any{"object": "list", "data": data, "first_id": nil, "last_id": nil, "has_more": more}
	if len(data) > 0 {
		env["first_id"] = id(data[0])
		env["last_id"] = id(data[len(data)-1])
	}
	return env
}

// afterError is the 400 of an after that is not the id of an item of the list.
func afterError(after string) *APIError {
	return paramError("after", "after "+strconv.Quote(after)+" is not the id of an item of this list")
}

// paramError is a 400 validation_error about one parameter.
func paramError(param, message string) *APIError {
	e := newError(http.StatusBadRequest, CodeValidation, message)
	e.Param = param
	return e
}
