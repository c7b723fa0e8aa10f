package cron_test

import (
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the DST cases must not depend on the machine's zoneinfo

	"github.com/jobmesh/jobmesh/services/scheduler/internal/cron"
)

func utc(y int, mo time.Month, d, h, mi, s int) time.Time {
	return time.Date(y, mo, d, h, mi, s, 0, time.UTC)
}

func mustParse(t testing.TB, expr string) *cron.Expression {
	t.Helper()
	e, err := cron.Parse(expr)
	if err != nil {
		t.Fatalf("Parse(%q): %v", expr, err)
	}
	return e
}

func mustLoad(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

// fireTimes chains Next from `from` and checks each fire against want; when end is set the
// expression must have no fire after the last one.
type fireTimes struct {
	expr string
	from time.Time
	want []time.Time
	end  bool
}

func (tt fireTimes) check(t *testing.T, loc *time.Location) {
	t.Helper()
	e := mustParse(t, tt.expr)
	at := tt.from
	for _, want := range tt.want {
		got, ok := e.Next(at, loc)
		if !ok || !got.Equal(want) {
			t.Errorf("%q: Next(%v) = %v, %t, want %v", tt.expr, at, got, ok, want)
			return
		}
		if loc != nil && got.Location() != loc {
			t.Errorf("%q: Next(%v) is in %v, want %v", tt.expr, at, got.Location(), loc)
		}
		at = got
	}
	if tt.end {
		if got, ok := e.Next(at, loc); ok {
			t.Errorf("%q: Next(%v) = %v, true, want no more fires", tt.expr, at, got)
		}
	}
}

// t0 is Thursday 2026-01-15 08:00 UTC.
var t0 = utc(2026, 1, 15, 8, 0, 0)

// TestNextQuartzExamples runs the examples of Quartz's CronTrigger tutorial, and the other
// special characters, from fixed start times. Expected times are read off a calendar.
func TestNextQuartzExamples(t *testing.T) {
	t.Parallel()
	tests := []fireTimes{
		// Quartz tutorial examples.
		{expr: "0 0 12 * * ?", from: t0, want: []time.Time{
			utc(2026, 1, 15, 12, 0, 0), utc(2026, 1, 16, 12, 0, 0), utc(2026, 1, 17, 12, 0, 0)}},
		{expr: "0 15 10 ? * *", from: t0, want: []time.Time{
			utc(2026, 1, 15, 10, 15, 0), utc(2026, 1, 16, 10, 15, 0), utc(2026, 1, 17, 10, 15, 0)}},
		{expr: "0 15 10 * * ?", from: t0, want: []time.Time{
			utc(2026, 1, 15, 10, 15, 0), utc(2026, 1, 16, 10, 15, 0)}},
		{expr: "0 15 10 * * ? *", from: t0, want: []time.Time{
			utc(2026, 1, 15, 10, 15, 0), utc(2026, 1, 16, 10, 15, 0)}},
		{expr: "0 15 10 * * ? 2005", from: utc(2005, 12, 30, 12, 0, 0), want: []time.Time{
			utc(2005, 12, 31, 10, 15, 0)}, end: true},
		{expr: "0 * 14 * * ?", from: t0, want: []time.Time{
			utc(2026, 1, 15, 14, 0, 0), utc(2026, 1, 15, 14, 1, 0), utc(2026, 1, 15, 14, 2, 0)}},
		{expr: "0 * 14 * * ?", from: utc(2026, 1, 15, 14, 58, 30), want: []time.Time{
			utc(2026, 1, 15, 14, 59, 0), utc(2026, 1, 16, 14, 0, 0)}},
		{expr: "0 0/5 14 * * ?", from: t0, want: []time.Time{
			utc(2026, 1, 15, 14, 0, 0), utc(2026, 1, 15, 14, 5, 0), utc(2026, 1, 15, 14, 10, 0)}},
		{expr: "0 0/5 14 * * ?", from: utc(2026, 1, 15, 14, 52, 0), want: []time.Time{
			utc(2026, 1, 15, 14, 55, 0), utc(2026, 1, 16, 14, 0, 0)}},
		{expr: "0 0/5 14,18 * * ?", from: utc(2026, 1, 15, 14, 51, 0), want: []time.Time{
			utc(2026, 1, 15, 14, 55, 0), utc(2026, 1, 15, 18, 0, 0), utc(2026, 1, 15, 18, 5, 0)}},
		{expr: "0 0-5 14 * * ?", from: utc(2026, 1, 15, 14, 3, 30), want: []time.Time{
			utc(2026, 1, 15, 14, 4, 0), utc(2026, 1, 15, 14, 5, 0), utc(2026, 1, 16, 14, 0, 0)}},
		{expr: "0 10,44 14 ? 3 WED", from: t0, want: []time.Time{
			utc(2026, 3, 4, 14, 10, 0), utc(2026, 3, 4, 14, 44, 0), utc(2026, 3, 11, 14, 10, 0)}},
		{expr: "0 10,44 14 ? 3 WED", from: utc(2026, 3, 25, 14, 44, 0), want: []time.Time{
			utc(2027, 3, 3, 14, 10, 0)}},
		{expr: "0 15 10 ? * MON-FRI", from: utc(2026, 1, 16, 12, 0, 0), want: []time.Time{
			utc(2026, 1, 19, 10, 15, 0), utc(2026, 1, 20, 10, 15, 0), utc(2026, 1, 21, 10, 15, 0)}},
		{expr: "0 15 10 15 * ?", from: t0, want: []time.Time{
			utc(2026, 1, 15, 10, 15, 0), utc(2026, 2, 15, 10, 15, 0), utc(2026, 3, 15, 10, 15, 0)}},
		{expr: "0 15 10 L * ?", from: t0, want: []time.Time{
			utc(2026, 1, 31, 10, 15, 0), utc(2026, 2, 28, 10, 15, 0), utc(2026, 3, 31, 10, 15, 0), utc(2026, 4, 30, 10, 15, 0)}},
		{expr: "0 15 10 L 2 ?", from: utc(2027, 3, 1, 0, 0, 0), want: []time.Time{
			utc(2028, 2, 29, 10, 15, 0), utc(2029, 2, 28, 10, 15, 0)}},
		{expr: "0 15 10 L-2 * ?", from: t0, want: []time.Time{
			utc(2026, 1, 29, 10, 15, 0), utc(2026, 2, 26, 10, 15, 0), utc(2026, 3, 29, 10, 15, 0)}},
		{expr: "0 15 10 ? * 6L", from: t0, want: []time.Time{
			utc(2026, 1, 30, 10, 15, 0), utc(2026, 2, 27, 10, 15, 0), utc(2026, 3, 27, 10, 15, 0)}},
		{expr: "0 15 10 ? * 6L 2002-2005", from: utc(2001, 12, 31, 0, 0, 0), want: []time.Time{
			utc(2002, 1, 25, 10, 15, 0)}},
		{expr: "0 15 10 ? * 6L 2002-2005", from: utc(2005, 11, 1, 0, 0, 0), want: []time.Time{
			utc(2005, 11, 25, 10, 15, 0), utc(2005, 12, 30, 10, 15, 0)}, end: true},
		{expr: "0 15 10 ? * 6#3", from: t0, want: []time.Time{
			utc(2026, 1, 16, 10, 15, 0), utc(2026, 2, 20, 10, 15, 0), utc(2026, 3, 20, 10, 15, 0)}},
		{expr: "0 0 12 1/5 * ?", from: utc(2026, 1, 26, 13, 0, 0), want: []time.Time{
			utc(2026, 1, 31, 12, 0, 0), utc(2026, 2, 1, 12, 0, 0), utc(2026, 2, 6, 12, 0, 0)}},
		{expr: "0 11 11 11 11 ?", from: t0, want: []time.Time{
			utc(2026, 11, 11, 11, 11, 0), utc(2027, 11, 11, 11, 11, 0), utc(2028, 11, 11, 11, 11, 0)}},

		// W and LW: the nearest weekday, never in another month.
		{expr: "0 0 9 15W * ?", from: t0, want: []time.Time{ // Thu 15th; Sun 15th → Mon 16th
			utc(2026, 1, 15, 9, 0, 0), utc(2026, 2, 16, 9, 0, 0), utc(2026, 3, 16, 9, 0, 0)}},
		{expr: "0 0 9 15W * ?", from: utc(2026, 7, 16, 0, 0, 0), want: []time.Time{ // Sat 15th → Fri 14th
			utc(2026, 8, 14, 9, 0, 0)}},
		{expr: "0 0 9 1W * ?", from: utc(2026, 7, 15, 0, 0, 0), want: []time.Time{ // Sat 1st → Mon 3rd
			utc(2026, 8, 3, 9, 0, 0), utc(2026, 9, 1, 9, 0, 0), utc(2026, 10, 1, 9, 0, 0), utc(2026, 11, 2, 9, 0, 0)}},
		{expr: "0 0 9 31W * ?", from: utc(2026, 5, 1, 0, 0, 0), want: []time.Time{ // Sun 31st → Fri 29th; no June 31st
			utc(2026, 5, 29, 9, 0, 0), utc(2026, 7, 31, 9, 0, 0), utc(2026, 8, 31, 9, 0, 0)}},
		{expr: "0 0 9 LW * ?", from: t0, want: []time.Time{ // Sat 31st, Sat 28th, Tue 31st
			utc(2026, 1, 30, 9, 0, 0), utc(2026, 2, 27, 9, 0, 0), utc(2026, 3, 31, 9, 0, 0)}},
		{expr: "0 0 9 L-3W * ?", from: t0, want: []time.Time{ // Wed 28th, Wed 25th, Sat 28th
			utc(2026, 1, 28, 9, 0, 0), utc(2026, 2, 25, 9, 0, 0), utc(2026, 3, 27, 9, 0, 0)}},

		// Ranges that wrap past the field's end.
		{expr: "0 0 22-2 * * ?", from: t0, want: []time.Time{
			utc(2026, 1, 15, 22, 0, 0), utc(2026, 1, 15, 23, 0, 0), utc(2026, 1, 16, 0, 0, 0), utc(2026, 1, 16, 1, 0, 0), utc(2026, 1, 16, 2, 0, 0), utc(2026, 1, 16, 22, 0, 0)}},
		{expr: "0 0 22-2/3 * * ?", from: t0, want: []time.Time{
			utc(2026, 1, 15, 22, 0, 0), utc(2026, 1, 16, 1, 0, 0), utc(2026, 1, 16, 22, 0, 0)}},
		{expr: "0 0 12 ? * FRI-MON", from: t0, want: []time.Time{
			utc(2026, 1, 16, 12, 0, 0), utc(2026, 1, 17, 12, 0, 0), utc(2026, 1, 18, 12, 0, 0), utc(2026, 1, 19, 12, 0, 0), utc(2026, 1, 23, 12, 0, 0)}},
		{expr: "0 0 12 1 NOV-FEB ?", from: t0, want: []time.Time{
			utc(2026, 2, 1, 12, 0, 0), utc(2026, 11, 1, 12, 0, 0), utc(2026, 12, 1, 12, 0, 0), utc(2027, 1, 1, 12, 0, 0)}},
		{expr: "0 0 12 28-2 * ?", from: utc(2026, 2, 2, 13, 0, 0), want: []time.Time{
			utc(2026, 2, 28, 12, 0, 0), utc(2026, 3, 1, 12, 0, 0), utc(2026, 3, 2, 12, 0, 0), utc(2026, 3, 28, 12, 0, 0)}},
		{expr: "50-10/10 0 0 * * ?", from: t0, want: []time.Time{
			utc(2026, 1, 16, 0, 0, 0), utc(2026, 1, 16, 0, 0, 10), utc(2026, 1, 16, 0, 0, 50)}},

		// Steps, names and the other day-of-week forms.
		{expr: "*/20 * * * * ?", from: t0.Add(5 * time.Second), want: []time.Time{
			utc(2026, 1, 15, 8, 0, 20), utc(2026, 1, 15, 8, 0, 40), utc(2026, 1, 15, 8, 1, 0)}},
		{expr: "0 /20 * * * ?", from: t0, want: []time.Time{
			utc(2026, 1, 15, 8, 20, 0), utc(2026, 1, 15, 8, 40, 0), utc(2026, 1, 15, 9, 0, 0)}},
		{expr: "* * * * * ?", from: t0.Add(500 * time.Millisecond), want: []time.Time{
			utc(2026, 1, 15, 8, 0, 1), utc(2026, 1, 15, 8, 0, 2)}},
		{expr: "0 0 0 ? * */2", from: t0, want: []time.Time{ // SUN, TUE, THU, SAT
			utc(2026, 1, 17, 0, 0, 0), utc(2026, 1, 18, 0, 0, 0), utc(2026, 1, 20, 0, 0, 0), utc(2026, 1, 22, 0, 0, 0)}},
		{expr: "0 0 0 ? * L", from: t0, want: []time.Time{ // L alone is Saturday
			utc(2026, 1, 17, 0, 0, 0), utc(2026, 1, 24, 0, 0, 0), utc(2026, 1, 31, 0, 0, 0)}},
		{expr: "0 0 9 ? jan,Mar mon", from: t0, want: []time.Time{
			utc(2026, 1, 19, 9, 0, 0), utc(2026, 1, 26, 9, 0, 0), utc(2026, 3, 2, 9, 0, 0)}},
		{expr: "0 0 9 ? * 2#5", from: t0, want: []time.Time{ // months with a fifth Monday
			utc(2026, 3, 30, 9, 0, 0), utc(2026, 6, 29, 9, 0, 0), utc(2026, 8, 31, 9, 0, 0)}},
		{expr: "0 0 9 ? * 1L", from: t0, want: []time.Time{
			utc(2026, 1, 25, 9, 0, 0), utc(2026, 2, 22, 9, 0, 0), utc(2026, 3, 29, 9, 0, 0)}},
		{expr: "0 0 9 ? * fri#1", from: t0, want: []time.Time{
			utc(2026, 2, 6, 9, 0, 0), utc(2026, 3, 6, 9, 0, 0)}},
		{expr: "0 0 9 ? * 2-6/2", from: t0, want: []time.Time{ // MON, WED, FRI
			utc(2026, 1, 16, 9, 0, 0), utc(2026, 1, 19, 9, 0, 0), utc(2026, 1, 21, 9, 0, 0)}},
		{expr: "0 0 9 ? * friL", from: t0, want: []time.Time{
			utc(2026, 1, 30, 9, 0, 0), utc(2026, 2, 27, 9, 0, 0)}},
		{expr: "0 0 9 ? * sat-2", from: t0, want: []time.Time{
			utc(2026, 1, 17, 9, 0, 0), utc(2026, 1, 18, 9, 0, 0), utc(2026, 1, 19, 9, 0, 0), utc(2026, 1, 24, 9, 0, 0)}},
		{expr: "0 0 0 1 1 ? 2030/10", from: t0, want: []time.Time{
			utc(2030, 1, 1, 0, 0, 0), utc(2040, 1, 1, 0, 0, 0), utc(2050, 1, 1, 0, 0, 0)}},
		{expr: "0 0 0 1 1 ? 2190-2199/5", from: t0, want: []time.Time{
			utc(2190, 1, 1, 0, 0, 0), utc(2195, 1, 1, 0, 0, 0)}, end: true},

		// Start times outside 1970-2199.
		{expr: "0 0 0 * * ?", from: time.Time{}, want: []time.Time{utc(1970, 1, 1, 0, 0, 0), utc(1970, 1, 2, 0, 0, 0)}},
		{expr: "* * * * * ?", from: utc(2199, 12, 31, 23, 59, 58), want: []time.Time{utc(2199, 12, 31, 23, 59, 59)}, end: true},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			t.Parallel()
			tt.check(t, nil)
		})
	}
}

func TestNextNeverFiresAgain(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		from time.Time
	}{
		{"0 0 0 30 2 ?", t0},
		{"0 0 0 31 4,6,9,11 ?", t0},
		{"0 0 9 31W 2 ?", t0},
		{"0 0 0 L-30 2 ?", t0},
		{"0 0 0 ? 2 6#5 2026", t0}, // February 2026 has four Fridays
		{"0 0 0 ? * * 2005", t0},
		{"0 15 10 ? * 6L 2002-2005", t0},
		{"0 0 0 1 1 ? 2026", t0},
		{"* * * * * ?", utc(2199, 12, 31, 23, 59, 59)},
		{"* * * * * ?", utc(3000, 1, 1, 0, 0, 0)},
	}
	for _, tt := range tests {
		e := mustParse(t, tt.expr)
		if got, ok := e.Next(tt.from, nil); ok {
			t.Errorf("%q: Next(%v) = %v, true, want false", tt.expr, tt.from, got)
		}
	}
}

func TestNextReturnsWholeSecondsInLoc(t *testing.T) {
	t.Parallel()
	shanghai := mustLoad(t, "Asia/Shanghai")
	e := mustParse(t, "*/7 * * * * ?")
	at := time.Date(2026, 5, 1, 12, 0, 6, 999_999_999, shanghai).UTC()
	for range 20 {
		got, ok := e.Next(at, shanghai)
		if !ok || !got.After(at) || got.Nanosecond() != 0 || got.Location() != shanghai || got.Second()%7 != 0 {
			t.Fatalf("Next(%v) = %v, %t, want a whole second after it, in Asia/Shanghai, at a multiple of 7s", at, got, ok)
		}
		if again, _ := e.Next(got.Add(-time.Nanosecond), shanghai); !again.Equal(got) {
			t.Errorf("Next(%v) = %v, want %v", got.Add(-time.Nanosecond), again, got)
		}
		at = got
	}
}

// TestNextDST pins the daylight-saving rules: a skipped wall time fires once at the end of the
// jump, a repeated one fires once at its first occurrence.
func TestNextDST(t *testing.T) {
	t.Parallel()
	newYork := mustLoad(t, "America/New_York")
	berlin := mustLoad(t, "Europe/Berlin")
	apia := mustLoad(t, "Pacific/Apia")
	in := func(loc *time.Location, y int, mo time.Month, d, h, mi, s int) time.Time {
		return time.Date(y, mo, d, h, mi, s, 0, loc)
	}
	tests := []struct {
		name string
		loc  *time.Location
		fireTimes
	}{
		// New York springs forward at 2026-03-08 02:00 EST (07:00 UTC) to 03:00 EDT.
		{"NY skipped 02:30 fires at 03:00", newYork, fireTimes{expr: "0 30 2 * * ?", from: in(newYork, 2026, 3, 8, 0, 0, 0), want: []time.Time{
			utc(2026, 3, 8, 7, 0, 0), utc(2026, 3, 9, 6, 30, 0)}}},
		{"NY skipped fire just before the jump", newYork, fireTimes{expr: "0 30 2 * * ?", from: utc(2026, 3, 8, 6, 59, 59).Add(500 * time.Millisecond), want: []time.Time{
			utc(2026, 3, 8, 7, 0, 0)}}},
		{"NY half-hourly across the jump", newYork, fireTimes{expr: "0 0/30 * * * ?", from: in(newYork, 2026, 3, 8, 1, 15, 0), want: []time.Time{
			utc(2026, 3, 8, 6, 30, 0), utc(2026, 3, 8, 7, 0, 0), utc(2026, 3, 8, 7, 30, 0)}}},
		{"NY hourly across the jump", newYork, fireTimes{expr: "0 0 * * * ?", from: in(newYork, 2026, 3, 8, 0, 30, 0), want: []time.Time{
			utc(2026, 3, 8, 6, 0, 0), utc(2026, 3, 8, 7, 0, 0), utc(2026, 3, 8, 8, 0, 0)}}},
		// New York falls back at 2026-11-01 02:00 EDT (06:00 UTC) to 01:00 EST.
		{"NY repeated 01:30 fires at its first occurrence", newYork, fireTimes{expr: "0 30 1 * * ?", from: in(newYork, 2026, 11, 1, 0, 0, 0), want: []time.Time{
			utc(2026, 11, 1, 5, 30, 0), utc(2026, 11, 2, 6, 30, 0)}}},
		{"NY start inside the repeated hour", newYork, fireTimes{expr: "0 45 1 * * ?", from: utc(2026, 11, 1, 6, 30, 0), want: []time.Time{
			utc(2026, 11, 2, 6, 45, 0)}}},
		{"NY every second waits out the repeated hour", newYork, fireTimes{expr: "* * * * * ?", from: utc(2026, 11, 1, 6, 30, 0), want: []time.Time{
			utc(2026, 11, 1, 7, 0, 0), utc(2026, 11, 1, 7, 0, 1)}}},
		{"NY half-hourly across the repeat", newYork, fireTimes{expr: "0 0/30 * * * ?", from: in(newYork, 2026, 11, 1, 0, 45, 0), want: []time.Time{
			utc(2026, 11, 1, 5, 0, 0), utc(2026, 11, 1, 5, 30, 0), utc(2026, 11, 1, 7, 0, 0), utc(2026, 11, 1, 7, 30, 0)}}},
		{"NY hourly across the repeat", newYork, fireTimes{expr: "0 0 * * * ?", from: in(newYork, 2026, 11, 1, 0, 30, 0), want: []time.Time{
			utc(2026, 11, 1, 5, 0, 0), utc(2026, 11, 1, 7, 0, 0)}}},
		// Berlin springs forward at 2026-03-29 02:00 CET (01:00 UTC) and falls back at
		// 2026-10-25 03:00 CEST (01:00 UTC).
		{"Berlin skipped 02:30 fires at 03:00", berlin, fireTimes{expr: "0 30 2 * * ?", from: in(berlin, 2026, 3, 29, 0, 0, 0), want: []time.Time{
			utc(2026, 3, 29, 1, 0, 0), utc(2026, 3, 30, 0, 30, 0)}}},
		{"Berlin repeated 02:30 fires once", berlin, fireTimes{expr: "0 30 2 * * ?", from: in(berlin, 2026, 10, 25, 0, 0, 0), want: []time.Time{
			utc(2026, 10, 25, 0, 30, 0), utc(2026, 10, 26, 1, 30, 0)}}},
		{"Berlin start inside the repeated hour", berlin, fireTimes{expr: "0 30 2 * * ?", from: utc(2026, 10, 25, 1, 15, 0), want: []time.Time{
			utc(2026, 10, 26, 1, 30, 0)}}},
		{"Berlin every 20 minutes across the repeat", berlin, fireTimes{expr: "0 */20 2 * * ?", from: in(berlin, 2026, 10, 25, 1, 50, 0), want: []time.Time{
			utc(2026, 10, 25, 0, 0, 0), utc(2026, 10, 25, 0, 20, 0), utc(2026, 10, 25, 0, 40, 0), utc(2026, 10, 26, 1, 0, 0)}}},
		// Samoa skipped 2011-12-30: 23:59:59 on the 29th (UTC-10) was followed by 00:00 on the 31st (UTC+14).
		{"Apia skipped day fires once at its end", apia, fireTimes{expr: "0 0 12 * * ?", from: in(apia, 2011, 12, 29, 13, 0, 0), want: []time.Time{
			utc(2011, 12, 30, 10, 0, 0), utc(2011, 12, 30, 22, 0, 0)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			tt.check(t, tt.loc)
		})
	}
}

func TestParseErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		want string // a part of the error message
	}{
		{"", "empty expression"},
		{"   \t ", "empty expression"},
		{"0 0 12 * *", "expected 6 or 7 fields, got 5"},
		{"0 0 12 * * ? 2026 x", "expected 6 or 7 fields, got 8: seconds minutes hours day-of-month month day-of-week [year] (Quartz ignores fields after the seventh; jobmesh refuses them)"},
		{"60 * * * * ?", `seconds field "60": value 60 out of range 0-59`},
		{"0 60 * * * ?", `minutes field "60": value 60 out of range 0-59`},
		{"0 0 24 * * ?", `hours field "24"`},
		{"0 0 0 32 * ?", `cron: day-of-month field "32": value 32 out of range 1-31`},
		{"0 0 0 0 * ?", `day-of-month field "0"`},
		{"0 0 0 ? 13 *", `month field "13"`},
		{"0 0 0 ? * 8", `day-of-week field "8": value 8 out of range 1-7`},
		{"0 0 0 ? * 0", `day-of-week field "0"`},
		{"0 0 0 * * ? 1969", `year field "1969"`},
		{"0 0 0 * * ? 2200", `year field "2200"`},
		{"0 0 0 * * ? 99999999999999999999", `year field "99999999999999999999": value 99999999999999999999 out of range`},
		{"0 */0 * * * ?", `minutes field "*/0": step 0 is refused: Quartz silently reads it as no step`},
		{"*/60 * * * * ?", `seconds field "*/60": step 60 out of range`},
		{"0 0 */24 * * ?", `hours field "*/24"`},
		{"0 0 0 ? * */8", `day-of-week field "*/8"`},
		{"0 */x * * * ?", `minutes field "*/x": step "X" is not a number`},
		{"0 0 1/ * * ?", `hours field "1/"`},
		{"0 0 1/2/3 * * ?", `hours field "1/2/3"`},
		{"0 0 5-/2 * * ?", `hours field "5-/2"`},
		{"0 0 1-2-3 * * ?", `hours field "1-2-3"`},
		{"0 0 1,,2 * * ?", `hours field "1,,2": missing value`},
		{"0 0 1, * * ?", `hours field "1,"`},
		{"0 0 0 * * *", "day-of-month and day-of-week cannot both be specified; use ? in one of them"},
		{"0 0 0 1 * MON", "cannot both be specified"},
		{"0 0 0 LW 2 MON", "cannot both be specified"},
		{"0 0 0 ? * ?", "cannot both be ?"},
		{"0 0 ? * * *", `hours field "?": ? is allowed only in day-of-month or day-of-week`},
		{"0 0 0 ? * * ?", `year field "?"`},
		{"0 0 12 * * ?x", `day-of-week field "?x": ? must stand alone`},
		{"0 0 12 1,? * *", `day-of-month field "1,?"`},
		{"0 0 1@ * * ?", `hours field "1@": invalid value "1@"`},
		{"0 0 ５ * * ?", `hours field "５"`},
		{"0 0 0 ? JANUARY *", `month field "JANUARY": invalid value "JANUARY"; want 1-12 or JAN-DEC (Quartz reads only the first three letters, JAN; jobmesh refuses the rest)`},
		{"0 0 0 ? * MON-FRIDAY", `day-of-week field "MON-FRIDAY"`},
		{"0 0 0 ? * MON,", `day-of-week field "MON,"`},
		{"0 0 0 ? * * 2005-2002", `year field "2005-2002": range 2005-2002 runs backwards`},
		{"0 0 0 ? * * */230", `year field "*/230"`},
		{"0 0 0 1,L * ?", `day-of-month field "1,L": L cannot be combined with other days in a list (Quartz refuses it too)`},
		{"0 0 0 L-31 * ?", `day-of-month field "L-31": offset 31 from the last day out of range 0-30`},
		{"0 0 0 L- * ?", `day-of-month field "L-"`},
		{"0 0 0 L-x * ?", `day-of-month field "L-x"`},
		{"0 0 0 LL * ?", `day-of-month field "LL"`},
		{"0 0 0 1-5W * ?", `day-of-month field "1-5W": W after a range: Quartz ignores the W and fires on every day of 1-5`},
		{"0 0 0 5,W * ?", `day-of-month field "5,W": W cannot be used in a list`},
		{"0 0 0 W * ?", `day-of-month field "W"`},
		{"0 0 0 32W * ?", `day-of-month field "32W": value 32 out of range 1-31`},
		{"0 0 0 ? * 6#6", `day-of-week field "6#6": # must be followed by 1-5`},
		{"0 0 0 ? * 6#0", `day-of-week field "6#0"`},
		{"0 0 0 ? * 6#", `day-of-week field "6#"`},
		{"0 0 0 ? * #3", `day-of-week field "#3"`},
		{"0 0 0 ? * 8#1", `day-of-week field "8#1"`},
		{"0 0 0 ? * 1#1,2#2", `day-of-week field "1#1,2#2": only one n#m is allowed`},
		{"0 0 0 ? * 1,6L", `day-of-week field "1,6L": L cannot be combined with other days in a list (Quartz refuses it too)`},
		{"0 0 0 ? * 8L", `day-of-week field "8L"`},
		{"0 0 0 ? * L-2", `day-of-week field "L-2": Quartz reads L-2 in day-of-week as L (Saturday)`},
		{"0 0 0 ? * 1W", `day-of-week field "1W"`},
		{"0 0 0 ? * 1-3L", `day-of-week field "1-3L": L after a range: Quartz ignores it and fires on every day of 1-3`},
	}
	for _, tt := range tests {
		e, err := cron.Parse(tt.expr)
		if err == nil {
			t.Errorf("Parse(%q) = %v, nil, want an error containing %q", tt.expr, e, tt.want)
			continue
		}
		if !strings.HasPrefix(err.Error(), "cron: ") || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) error = %q, want it to contain %q", tt.expr, err, tt.want)
		}
	}
}

func TestString(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		want string
	}{
		{"0 15 10 ? * 6L", "0 15 10 ? * 6L"},
		{" \n 0\t15 10 ? *   mon-fri  2026 \r\n", "0 15 10 ? * mon-fri 2026"},
	}
	for _, tt := range tests {
		if got := mustParse(t, tt.expr).String(); got != tt.want {
			t.Errorf("Parse(%q).String() = %q, want %q", tt.expr, got, tt.want)
		}
	}
}
