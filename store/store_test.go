package store

import (
	"errors"
	"fmt"
	"testing"
	"time"
)

func TestLimitPeriod(t *testing.T) {
	d := func(y int, m time.Month, day int) time.Time { return time.Date(y, m, day, 0, 0, 0, 0, time.UTC) }
	tests := []struct {
		reset      string
		now        time.Time
		start, end time.Time
	}{
		{ResetDaily, time.Date(2025, 3, 9, 23, 59, 59, 999, time.UTC), d(2025, 3, 9), d(2025, 3, 10)},
		{ResetDaily, d(2025, 3, 9), d(2025, 3, 9), d(2025, 3, 10)},
		// 00:30 in UTC+2 is the previous day in UTC.
		{ResetDaily, time.Date(2025, 3, 10, 0, 30, 0, 0, time.FixedZone("x", 2*3600)), d(2025, 3, 9), d(2025, 3, 10)},
		// 2025-03-09 is a Sunday: its week began on Monday the 3rd.
		{ResetWeekly, time.Date(2025, 3, 9, 12, 0, 0, 0, time.UTC), d(2025, 3, 3), d(2025, 3, 10)},
		{ResetWeekly, d(2025, 3, 10), d(2025, 3, 10), d(2025, 3, 17)},
		{ResetWeekly, time.Date(2025, 1, 1, 8, 0, 0, 0, time.UTC), d(2024, 12, 30), d(2025, 1, 6)},
		{ResetMonthly, time.Date(2024, 12, 31, 23, 0, 0, 0, time.UTC), d(2024, 12, 1), d(2025, 1, 1)},
		{ResetMonthly, time.Date(2024, 2, 29, 1, 0, 0, 0, time.UTC), d(2024, 2, 1), d(2024, 3, 1)},
		{ResetNever, time.Now(), time.Time{}, time.Time{}},
	}
	for _, tc := range tests {
		t.Run(tc.reset+" "+tc.now.String(), func(t *testing.T) {
			start, end := LimitPeriod(tc.reset, tc.now)
			if !start.Equal(tc.start) || !end.Equal(tc.end) {
				t.Fatalf("LimitPeriod = %v, %v; want %v, %v", start, end, tc.start, tc.end)
			}
			if !start.IsZero() && (start.Location() != time.UTC || tc.now.Before(start) || !tc.now.Before(end)) {
				t.Fatalf("period %v to %v does not hold %v in UTC", start, end, tc.now)
			}
		})
	}
}

func TestValidLimitReset(t *testing.T) {
	for _, s := range []string{"", "daily", "weekly", "monthly"} {
		if !ValidLimitReset(s) {
			t.Errorf("ValidLimitReset(%q) = false", s)
		}
	}
	for _, s := range []string{"none", "Daily", "hourly", "yearly"} {
		if ValidLimitReset(s) {
			t.Errorf("ValidLimitReset(%q) = true", s)
		}
	}
}

func TestKeyLimitErrorMatches(t *testing.T) {
	err := fmt.Errorf("reserving: %w", &KeyLimitError{KeyID: "k", LimitNanos: 5})
	if !errors.Is(err, ErrKeyLimitExceeded) || errors.Is(err, ErrInsufficientFunds) {
		t.Fatalf("errors.Is on %v", err)
	}
	var le *KeyLimitError
	if !errors.As(err, &le) || le.KeyID != "k" {
		t.Fatalf("errors.As on %v", err)
	}
}
