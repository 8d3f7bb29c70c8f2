package store

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Every field of a Generation is in GenerationFields once, under a column of its own, with
// an Addr of the field's type: what the backends store is the whole struct.
func TestGenerationFieldsCoverGeneration(t *testing.T) {
	var g Generation
	base := reflect.ValueOf(&g).Elem()
	byAddr := map[uintptr]reflect.StructField{}
	for i := range base.NumField() {
		byAddr[base.Field(i).Addr().Pointer()] = base.Type().Field(i)
	}
	seen := map[string]bool{}
	columns := map[string]bool{}
	for _, f := range GenerationFields {
		p := reflect.ValueOf(f.Addr(&g))
		sf, ok := byAddr[p.Pointer()]
		if !ok || p.Elem().Type() != sf.Type {
			t.Fatalf("column %s: Addr is not a field's address (%v)", f.Column, p.Type())
		}
		if seen[sf.Name] || columns[f.Column] {
			t.Fatalf("field %s (column %s) listed twice", sf.Name, f.Column)
		}
		seen[sf.Name], columns[f.Column] = true, true
	}
	for _, sf := range byAddr {
		if !seen[sf.Name] {
			t.Errorf("Generation.%s is not in GenerationFields", sf.Name)
		}
	}
	if got := strings.Count(GenerationColumns, ",") + 1; got != len(GenerationFields) {
		t.Fatalf("GenerationColumns has %d columns, want %d", got, len(GenerationFields))
	}
}

func TestApplyCredit(t *testing.T) {
	tests := []struct {
		name            string
		balance, amount int64
		want            int64
		err             error
	}{
		{"credit", 5, 10, 15, nil},
		{"debit", 15, -10, 5, nil},
		{"debit of everything", 15, -15, 0, nil},
		{"debit past the balance", 15, -16, 0, ErrInsufficientFunds},
		{"overflow", 1 << 62, 1 << 62, 0, errors.New("overflow")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := ApplyCredit(Balance{WorkspaceID: "ws", BalanceNanos: tc.balance, ReservedNanos: 3}, tc.amount)
			switch {
			case tc.err == nil && (err != nil || b.BalanceNanos != tc.want || b.ReservedNanos != 3 || b.WorkspaceID != "ws"):
				t.Fatalf("ApplyCredit = %+v, %v; want balance %d", b, err, tc.want)
			case tc.err != nil && err == nil:
				t.Fatalf("ApplyCredit = %+v, want an error", b)
			case errors.Is(tc.err, ErrInsufficientFunds) && !errors.Is(err, ErrInsufficientFunds):
				t.Fatalf("ApplyCredit error %v, want ErrInsufficientFunds", err)
			}
		})
	}
	if CreditKind(1) != "credit" || CreditKind(-1) != "adjustment" {
		t.Fatal("CreditKind")
	}
}

func TestCheckFunds(t *testing.T) {
	b := Balance{BalanceNanos: 10, ReservedNanos: 4}
	for _, tc := range []struct {
		amount, min int64
		ok          bool
	}{{6, 0, true}, {7, 0, false}, {1, 6, true}, {1, 7, false}, {0, 0, true}} {
		err := CheckFunds(b, ReserveParams{AmountNanos: tc.amount, MinAvailableNanos: tc.min})
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrInsufficientFunds)) {
			t.Errorf("CheckFunds(amount %d, min %d) = %v, want ok %v", tc.amount, tc.min, err, tc.ok)
		}
	}
}

func TestCheckKeyLimit(t *testing.T) {
	now := time.Date(2025, 3, 9, 12, 0, 0, 0, time.UTC) // a Sunday
	spent := KeySpend{SpentNanos: 60, ReservedNanos: 30}
	tests := []struct {
		name   string
		k      Key
		amount int64
		ok     bool
		since  time.Time
	}{
		{"no limit", Key{ID: "k"}, 1 << 60, true, time.Time{}},
		{"within", Key{ID: "k", LimitNanos: 100}, 10, true, time.Time{}},
		{"past", Key{ID: "k", LimitNanos: 100}, 11, false, time.Time{}},
		{"weekly", Key{ID: "k", LimitNanos: 100, LimitReset: ResetWeekly}, 11, false, time.Date(2025, 3, 3, 0, 0, 0, 0, time.UTC)},
		// The sums are never added up, so no amount can overflow them.
		{"huge amount", Key{ID: "k", LimitNanos: 100}, 1<<63 - 1, false, time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			called := false
			err := CheckKeyLimit(tc.k, tc.amount, now, func(since time.Time) (KeySpend, error) {
				called = true
				if !since.Equal(tc.since) {
					t.Errorf("spend since %v, want %v", since, tc.since)
				}
				return spent, nil
			})
			if called != (tc.k.LimitNanos > 0) {
				t.Errorf("spend read: %v", called)
			}
			if tc.ok {
				if err != nil {
					t.Fatalf("CheckKeyLimit: %v", err)
				}
				return
			}
			var le *KeyLimitError
			if !errors.As(err, &le) || !errors.Is(err, ErrKeyLimitExceeded) || le.SpentNanos != 60 || le.ReservedNanos != 30 ||
				le.AmountNanos != tc.amount || le.LimitNanos != tc.k.LimitNanos || !le.PeriodStart.Equal(tc.since) {
				t.Fatalf("CheckKeyLimit = %#v", err)
			}
		})
	}
	boom := errors.New("boom")
	if err := CheckKeyLimit(Key{LimitNanos: 1}, 1, now, func(time.Time) (KeySpend, error) { return KeySpend{}, boom }); !errors.Is(err, boom) {
		t.Fatalf("a failed read: %v", err)
	}
}

func TestChargeAndLeaseUnreserve(t *testing.T) {
	for _, tc := range []struct{ cost, balance, charge int64 }{{5, 10, 5}, {10, 10, 10}, {15, 10, 10}, {5, 0, 0}, {0, 10, 0}} {
		var g Generation
		if c := Charge(&g, tc.cost, tc.balance); c != tc.charge || g.CostNanos != tc.charge || g.UnbilledNanos != tc.cost-tc.charge {
			t.Errorf("Charge(%d, balance %d) = %d, %+v", tc.cost, tc.balance, c, g)
		}
	}
	for _, tc := range []struct {
		charge, held, amount int64
		release              bool
		want                 int64
	}{{5, 10, 100, false, 5}, {15, 10, 100, false, 10}, {15, 20, 12, false, 12}, {5, 10, 100, true, 100}, {0, 10, 100, false, 0}} {
		if got := LeaseUnreserve(tc.charge, tc.held, tc.amount, tc.release); got != tc.want {
			t.Errorf("LeaseUnreserve(%d, %d, %d, %v) = %d, want %d", tc.charge, tc.held, tc.amount, tc.release, got, tc.want)
		}
	}
}

func TestNewReservationAndPrepareSettle(t *testing.T) {
	now := func() time.Time { return time.Date(2025, 3, 9, 12, 0, 0, 123_456_789, time.FixedZone("x", 3600)) }
	exp := time.Date(2025, 3, 9, 14, 0, 0, 999_999_999, time.UTC)
	r, err := NewReservation(ReserveParams{WorkspaceID: "ws", AmountNanos: 5, ExpiresAt: exp, Owner: "inst"}, now)
	if err != nil || !strings.HasPrefix(r.ID, "res_") || r.Owner != "inst" || r.AmountNanos != 5 ||
		!r.CreatedAt.Equal(now().Truncate(time.Millisecond)) || r.CreatedAt.Location() != time.UTC || !r.ExpiresAt.Equal(exp.Truncate(time.Millisecond)) {
		t.Fatalf("NewReservation = %+v, %v", r, err)
	}
	for _, p := range []ReserveParams{{AmountNanos: 1, ExpiresAt: exp}, {WorkspaceID: "ws", AmountNanos: -1, ExpiresAt: exp},
		{WorkspaceID: "ws", MinAvailableNanos: -1, ExpiresAt: exp}, {WorkspaceID: "ws"}} {
		if _, err := NewReservation(p, now); err == nil {
			t.Errorf("NewReservation(%+v) succeeded", p)
		}
	}

	in := &Generation{WorkspaceID: "ws", CostNanos: 7}
	g, err := PrepareSettle(SettleParams{Generation: in}, now)
	if err != nil || !strings.HasPrefix(g.ID, "gen_") || !g.CreatedAt.Equal(now().Truncate(time.Millisecond)) || in.ID != "" {
		t.Fatalf("PrepareSettle = %+v, %v (the caller's %+v)", g, err, in)
	}
	for _, p := range []SettleParams{{}, {Generation: &Generation{CostNanos: 1}}, {Generation: &Generation{WorkspaceID: "ws", CostNanos: -1}}} {
		if _, err := PrepareSettle(p, now); err == nil {
			t.Errorf("PrepareSettle(%+v) succeeded", p)
		}
	}
	for _, p := range []SettleLeaseParams{{Generation: in}, {ReservationID: "r"},
		{ReservationID: "r", Generation: in, HeldNanos: -1}} {
		if _, err := PrepareSettleLease(p, now); err == nil {
			t.Errorf("PrepareSettleLease(%+v) succeeded", p)
		}
	}
}

func TestKeyUpdateApply(t *testing.T) {
	name, limit, reset, off := "new", int64(5), ResetDaily, true
	k, err := KeyUpdate{Name: &name, LimitNanos: &limit, LimitReset: &reset, Disabled: &off}.Apply(Key{ID: "k", Name: "old"})
	if err != nil || k.ID != "k" || k.Name != "new" || k.LimitNanos != 5 || k.LimitReset != ResetDaily || !k.Disabled {
		t.Fatalf("Apply = %+v, %v", k, err)
	}
	bad := "hourly"
	if _, err := (KeyUpdate{LimitReset: &bad}).Apply(Key{}); err == nil {
		t.Fatal("an unknown reset was applied")
	}
}

func TestPages(t *testing.T) {
	for _, tc := range []struct{ limit, size int }{{0, 20}, {-1, 20}, {1, 1}, {100, 100}, {101, 100}} {
		if got := PageSize(tc.limit); got != tc.size || (Page{Limit: tc.limit}).Fetch() != tc.size+1 {
			t.Errorf("PageSize(%d) = %d, want %d", tc.limit, got, tc.size)
		}
	}
	items := []int{1, 2, 3}
	if page, more := Cut(items, 2); !slices.Equal(page, []int{1, 2}) || !more {
		t.Errorf("Cut of 3 to 2 = %v, %v", page, more)
	}
	if page, more := Cut(items, 3); !slices.Equal(page, items) || more {
		t.Errorf("Cut of 3 to 3 = %v, %v", page, more)
	}
	// Each walks pages by the last id of each.
	list := make([]int, 250)
	for i := range list {
		list[i] = i
	}
	var calls []Page
	var got []int
	err := Each(func(p Page) ([]int, error) {
		calls = append(calls, p)
		start := 0
		if p.After != "" {
			after, _ := strconv.Atoi(p.After)
			start = after + 1
		}
		return list[start:min(start+p.Fetch(), len(list))], nil
	}, strconv.Itoa, func(i int) error { got = append(got, i); return nil })
	if err != nil || !slices.Equal(got, list) || len(calls) != 3 || calls[0].Limit != MaxPageLimit {
		t.Fatalf("Each visited %d items in %d calls (%v)", len(got), len(calls), err)
	}
}

func TestActivityQueryRange(t *testing.T) {
	from, to := time.Date(2025, 5, 6, 12, 0, 0, 0, time.UTC), time.Date(2025, 5, 9, 6, 0, 0, 0, time.UTC)
	q := ActivityQuery{WorkspaceID: "ws", From: from, To: to}
	if f, tt := q.Range(); !f.Equal(from) || !tt.Equal(to) {
		t.Fatalf("Range without a cursor = %v, %v", f, tt)
	}
	day := func(d int) time.Time { return time.Date(2025, 5, d, 0, 0, 0, 0, time.UTC) }
	for _, tc := range []struct {
		day                       time.Time
		rangeFrom, dayFrom, dayTo time.Time
	}{
		{day(6), from, from, day(7)},
		{day(7), day(7), day(7), day(8)},
		{day(9), day(9), day(9), to},
	} {
		q.After = &ActivityKey{Day: tc.day, Model: "m", Provider: "p"}
		if f, _ := q.Range(); !f.Equal(tc.rangeFrom) {
			t.Errorf("Range after %v starts %v, want %v", tc.day, f, tc.rangeFrom)
		}
		if f, tt := q.AfterDay(); !f.Equal(tc.dayFrom) || !tt.Equal(tc.dayTo) {
			t.Errorf("AfterDay of %v = %v to %v, want %v to %v", tc.day, f, tt, tc.dayFrom, tc.dayTo)
		}
	}
}

func TestClaimValidation(t *testing.T) {
	if n, err := (ClaimParams{Queue: "q", Owner: "o", Lease: time.Second, Limit: 500}).Validate(); err != nil || n != MaxClaimLimit {
		t.Fatalf("ValidateClaim of 500 = %d, %v; want %d", n, err, MaxClaimLimit)
	}
	for _, tc := range []struct {
		queue, owner string
		lease        time.Duration
		limit, cap   int
	}{{"", "o", time.Second, 1, 0}, {"q", "", time.Second, 1, 0}, {"q", "o", time.Microsecond, 1, 0}, {"q", "o", time.Second, 0, 0}, {"q", "o", time.Second, 1, -1}} {
		p := ClaimParams{Queue: tc.queue, Owner: tc.owner, Lease: tc.lease, Limit: tc.limit, GroupCap: tc.cap}
		if _, err := p.Validate(); err == nil {
			t.Errorf("ValidateClaim(%+v) succeeded", tc)
		}
	}
	c := Claim{Queue: "q", ID: "i", Owner: "o", Token: 2}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Claim{Queue: "q", ID: "i", Owner: "o"}).Validate(); err == nil {
		t.Fatal("a claim of token 0 is valid")
	}
	if err := c.Lost(); !errors.Is(err, ErrClaimLost) || !strings.Contains(err.Error(), `"i"`) {
		t.Fatalf("Lost = %v", err)
	}
}

func TestValidateInstanceID(t *testing.T) {
	for _, id := range []string{"inst_01ABC", "a-b", strings.Repeat("x", 128)} {
		if err := ValidateInstanceID(id); err != nil {
			t.Errorf("ValidateInstanceID(%q) = %v", id, err)
		}
	}
	for _, id := range []string{"", "a/b", "../x", "a b", strings.Repeat("x", 129)} {
		if err := ValidateInstanceID(id); err == nil {
			t.Errorf("ValidateInstanceID(%q) succeeded", id)
		}
	}
}
