package storetest

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/modelgateway/caddy-modelgateway/store"
)

// walk reads every page of a list of limit items with list, checking that each page holds
// at most limit+1 items (the extra one telling that more follow), and returns the ids in
// the order read.
func walk[T any](t *testing.T, limit int, id func(T) string, list func(p store.Page) ([]T, error)) []string {
	t.Helper()
	var all []string
	p := store.Page{Limit: limit}
	for range 1000 {
		items, err := list(p)
		if err != nil {
			t.Fatalf("page after %q: %v", p.After, err)
		}
		if len(items) > store.PageSize(limit)+1 {
			t.Fatalf("page after %q: %d items for a page of %d", p.After, len(items), store.PageSize(limit))
		}
		page, more := store.Cut(items, limit)
		for _, it := range page {
			all = append(all, id(it))
		}
		if !more {
			return all
		}
		if len(page) == 0 {
			t.Fatalf("page after %q is empty but more follow", p.After)
		}
		p.After = id(page[len(page)-1])
	}
	t.Fatal("pages never ended")
	return nil
}

// testIdentityPages walks the identity lists a page at a time: every item once, in the
// order of creation (ties broken by id), whatever the page size; a cursor that is not an
// item of the list is ErrCursorNotFound.
func testIdentityPages(t *testing.T, s store.Identity) {
	ctx := context.Background()
	created := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	mk := func(id, parent string, at time.Time) {
		if err := s.CreateWorkspace(ctx, store.Workspace{ID: id, Name: id, ParentID: parent, CreatedAt: at}); err != nil {
			t.Fatalf("CreateWorkspace(%s): %v", id, err)
		}
	}
	mk("ws_parent", "", created)
	mk("ws_other", "", created)
	var children, keys []string
	for i := range 45 {
		// Three items a second: ids break the ties, out of the order they are created in.
		at := created.Add(time.Duration(1+i/3) * time.Second)
		child := fmt.Sprintf("ws_child_%02d", 44-i)
		mk(child, "ws_parent", at)
		key := fmt.Sprintf("k_%02d", 44-i)
		if err := s.CreateKey(ctx, store.Key{ID: key, WorkspaceID: "ws_parent", Kind: store.KeyStandard, SecretHash: []byte{1}, CreatedAt: at}); err != nil {
			t.Fatalf("CreateKey(%s): %v", key, err)
		}
		children, keys = append(children, child), append(keys, key)
	}
	if err := s.CreateKey(ctx, store.Key{ID: "k_other", WorkspaceID: "ws_other", Kind: store.KeyStandard, SecretHash: []byte{1}, CreatedAt: created}); err != nil {
		t.Fatalf("CreateKey: %v", err)
	}
	// In each second, ids in order.
	for i := 0; i < 45; i += 3 {
		slices.Sort(children[i : i+3])
		slices.Sort(keys[i : i+3])
	}
	wsID := func(ws store.Workspace) string { return ws.ID }
	keyID := func(k store.Key) string { return k.ID }
	for _, limit := range []int{1, 7, 20, 45, 0, store.MaxPageLimit + 50} {
		t.Run(fmt.Sprint("limit ", limit), func(t *testing.T) {
			if got := walk(t, limit, keyID, func(p store.Page) ([]store.Key, error) { return s.ListKeys(ctx, "ws_parent", p) }); !reflect.DeepEqual(got, keys) {
				t.Errorf("keys %v\nwant %v", got, keys)
			}
			if got := walk(t, limit, wsID, func(p store.Page) ([]store.Workspace, error) {
				return s.ListChildWorkspaces(ctx, "ws_parent", p)
			}); !reflect.DeepEqual(got, children) {
				t.Errorf("children %v\nwant %v", got, children)
			}
			want := append([]string{"ws_other", "ws_parent"}, children...)
			if got := walk(t, limit, wsID, func(p store.Page) ([]store.Workspace, error) { return s.ListWorkspaces(ctx, p) }); !reflect.DeepEqual(got, want) {
				t.Errorf("workspaces %v\nwant %v", got, want)
			}
		})
	}
	// The first page of the default size, and one more.
	if got, err := s.ListKeys(ctx, "ws_parent", store.Page{}); err != nil || len(got) != store.DefaultPageLimit+1 {
		t.Errorf("ListKeys of the default page = %d keys, %v; want %d", len(got), err, store.DefaultPageLimit+1)
	}
	// The page after the last item is empty.
	if got, err := s.ListKeys(ctx, "ws_parent", store.Page{After: keys[len(keys)-1]}); err != nil || len(got) != 0 {
		t.Errorf("ListKeys after the last key = %v, %v; want none", got, err)
	}
	bad := []struct {
		name string
		call func() error
	}{
		{"unknown key", func() error { _, err := s.ListKeys(ctx, "ws_parent", store.Page{After: "k_missing"}); return err }},
		{"another workspace's key", func() error { _, err := s.ListKeys(ctx, "ws_parent", store.Page{After: "k_other"}); return err }},
		{"a workspace that is not a child", func() error {
			_, err := s.ListChildWorkspaces(ctx, "ws_parent", store.Page{After: "ws_other"})
			return err
		}},
		{"unknown workspace", func() error { _, err := s.ListWorkspaces(ctx, store.Page{After: "ws_missing"}); return err }},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) { wantErr(t, tc.name, tc.call(), store.ErrCursorNotFound) })
	}
	_, err := s.ListKeys(ctx, "ws_missing", store.Page{After: "k_00"})
	wantErr(t, "ListKeys of an unknown workspace", err, store.ErrNotFound)
}

// testActivityPages walks activity a page at a time: the rows of the whole list, in its
// order; totals sum them all; a cursor that is no row of the query is ErrCursorNotFound.
func testActivityPages(t *testing.T, s store.Store) {
	ctx := context.Background()
	ws := newWorkspace(t, s, 10*usd)
	day1 := time.Date(2025, 5, 6, 0, 0, 0, 0, time.UTC)
	var want store.ActivityRow
	for d := range 3 {
		// Models whose byte order and whose order in a natural-language collation differ.
		for i, model := range []string{"B", "a", "a-b", "ab"} {
			for j, provider := range []string{"p1", "P2"} {
				g := store.Generation{WorkspaceID: ws, KeyID: "k1", Model: model, Provider: provider,
					CreatedAt: day1.AddDate(0, 0, 2*d).Add(time.Duration(i+j) * time.Hour), InputTokens: int64(d + i + j), CostNanos: 10}
				if _, err := s.Settle(ctx, store.SettleParams{Generation: &g}); err != nil {
					t.Fatalf("Settle: %v", err)
				}
				want.Requests++
				want.InputTokens += g.InputTokens
				want.CostNanos += g.CostNanos
			}
		}
	}
	q := store.ActivityQuery{WorkspaceID: ws, From: day1, To: day1.AddDate(0, 0, 10)}
	all := q
	all.Limit = store.MaxPageLimit
	whole, err := s.Activity(ctx, all)
	if err != nil || len(whole) != 24 {
		t.Fatalf("Activity = %d rows, %v; want 24", len(whole), err)
	}
	for i := 1; i < len(whole); i++ {
		a, b := whole[i-1], whole[i]
		// Byte order, whatever the database's collation.
		less := a.Day.Before(b.Day) || (a.Day.Equal(b.Day) && (a.Model < b.Model || (a.Model == b.Model && a.Provider < b.Provider)))
		if !less {
			t.Fatalf("rows %d and %d out of order: %+v, %+v", i-1, i, a, b)
		}
	}
	key := func(a store.ActivityRow) store.ActivityKey {
		return store.ActivityKey{Day: a.Day, Model: a.Model, Provider: a.Provider}
	}
	for _, limit := range []int{1, 5, 24} {
		var got []store.ActivityRow
		pq := q
		pq.Limit = limit
		for range 100 {
			rows, err := s.Activity(ctx, pq)
			if err != nil {
				t.Fatalf("limit %d: Activity: %v", limit, err)
			}
			page, more := store.Cut(rows, limit)
			got = append(got, page...)
			if !more {
				break
			}
			k := key(page[len(page)-1])
			pq.After = &k
		}
		if !reflect.DeepEqual(got, whole) {
			t.Errorf("limit %d: walked %+v\nwant %+v", limit, got, whole)
		}
	}
	totals, err := s.ActivityTotals(ctx, q)
	if err != nil || totals != want {
		t.Errorf("ActivityTotals = %+v, %v; want %+v", totals, err, want)
	}
	none := q
	none.From, none.To = day1.AddDate(-1, 0, 0), day1.AddDate(0, 0, -1)
	if totals, err := s.ActivityTotals(ctx, none); err != nil || totals != (store.ActivityRow{}) {
		t.Errorf("ActivityTotals of nothing = %+v, %v", totals, err)
	}
	for _, k := range []store.ActivityKey{
		{Day: day1, Model: "a", Provider: "p3"},
		{Day: day1.AddDate(0, 0, 1), Model: "a", Provider: "p1"},
		// A row of the workspace outside the query's range.
		{Day: day1.AddDate(0, 0, 4), Model: "a", Provider: "p1"},
	} {
		bq := q
		bq.To = day1.AddDate(0, 0, 3)
		bq.After = &k
		_, err := s.Activity(ctx, bq)
		if !errors.Is(err, store.ErrCursorNotFound) {
			t.Errorf("Activity after %+v: %v, want ErrCursorNotFound", k, err)
		}
	}
}
