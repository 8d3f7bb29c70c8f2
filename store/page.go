package store

// Pages. A list method returns one page of its list, in a stable order that an index of
// the backend's serves: the items after the cursor, at most the page's size of them, plus
// one more when more follow (the caller tells has_more by it: Cut). No list is read whole,
// whatever its length.

// Page sizes.
const (
	// DefaultPageLimit is the size of a page that asks for none.
	DefaultPageLimit = 20
	// MaxPageLimit is the largest page; larger limits are capped to it.
	MaxPageLimit = 100
)

// Page asks for one page of a list.
type Page struct {
	// After is the id of the last item of the previous page: the page starts after it. It
	// must be an item of the list (ErrCursorNotFound otherwise). Empty: the first page.
	After string
	// Limit is the page's size: DefaultPageLimit when 0 or less, at most MaxPageLimit.
	Limit int
}

// Size is the number of items the page holds at most.
func (p Page) Size() int { return PageSize(p.Limit) }

// Fetch is the number of rows a backend reads for the page: one more than its size, which
// tells whether more follow.
func (p Page) Fetch() int { return p.Size() + 1 }

// PageSize is the size of a page that asks for limit items.
func PageSize(limit int) int {
	switch {
	case limit <= 0:
		return DefaultPageLimit
	case limit > MaxPageLimit:
		return MaxPageLimit
	}
	return limit
}

// Cut returns the page's items out of what a list method returned for a page of limit
// items, and whether more follow.
func Cut[T any](items []T, limit int) (page []T, more bool) {
	if n := PageSize(limit); len(items) > n {
		return items[:n], true
	}
	return items, false
}

// Each calls fn with every item of a list, in order, reading it a page of MaxPageLimit
// items at a time with list (a list method, its other arguments bound); id returns an
// item's id, the cursor of the next page. It stops at the first error.
func Each[T any](list func(Page) ([]T, error), id func(T) string, fn func(T) error) error {
	p := Page{Limit: MaxPageLimit}
	for {
		items, err := list(p)
		if err != nil {
			return err
		}
		page, more := Cut(items, p.Limit)
		for _, it := range page {
			if err := fn(it); err != nil {
				return err
			}
		}
		if !more || len(page) == 0 {
			return nil
		}
		p.After = id(page[len(page)-1])
	}
}
