package cron_test

import (
	"strings"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/cron"
)

// TestQuartzParity pins, rule by rule, what Quartz 2.3's CronExpression (the copy XXL-JOB's
// admin runs) makes of an expression: the next fire times from a fixed start. The times are
// worked out from Quartz's rules and a calendar, not by this package. 2026-01-01 is a Thursday.
func TestQuartzParity(t *testing.T) {
	t.Parallel()
	jan1 := utc(2026, 1, 1, 0, 0, 0)
	tests := []struct {
		rule string
		fireTimes
	}{
		{"day-of-week 1 is Sunday", fireTimes{expr: "0 0 12 ? * 1", from: t0, want: []time.Time{
			utc(2026, 1, 18, 12, 0, 0), utc(2026, 1, 25, 12, 0, 0)}}},
		{"day-of-week 7 is Saturday", fireTimes{expr: "0 0 12 ? * 7", from: t0, want: []time.Time{
			utc(2026, 1, 17, 12, 0, 0), utc(2026, 1, 24, 12, 0, 0)}}},
		{"names in any case", fireTimes{expr: "0 0 12 ? fEb sUn", from: t0, want: []time.Time{
			utc(2026, 2, 1, 12, 0, 0), utc(2026, 2, 8, 12, 0, 0)}}},
		{"a range of names", fireTimes{expr: "0 0 12 ? * MON-WED", from: t0, want: []time.Time{
			utc(2026, 1, 19, 12, 0, 0), utc(2026, 1, 20, 12, 0, 0), utc(2026, 1, 21, 12, 0, 0), utc(2026, 1, 26, 12, 0, 0)}}},
		{"a range of names wrapping the week", fireTimes{expr: "0 0 12 ? * SAT-SUN", from: t0, want: []time.Time{
			utc(2026, 1, 17, 12, 0, 0), utc(2026, 1, 18, 12, 0, 0), utc(2026, 1, 24, 12, 0, 0)}}},
		{"*/n in day-of-week starts at Sunday", fireTimes{expr: "0 0 12 ? * */3", from: t0, want: []time.Time{ // SUN, WED, SAT
			utc(2026, 1, 17, 12, 0, 0), utc(2026, 1, 18, 12, 0, 0), utc(2026, 1, 21, 12, 0, 0), utc(2026, 1, 24, 12, 0, 0)}}},
		{"*/n in months starts at January", fireTimes{expr: "0 0 0 1 */5 ?", from: t0, want: []time.Time{ // JAN, JUN, NOV
			utc(2026, 6, 1, 0, 0, 0), utc(2026, 11, 1, 0, 0, 0), utc(2027, 1, 1, 0, 0, 0)}}},
		{"a/n runs to the field's end, not around it", fireTimes{expr: "0 0 0 1 7/6 ?", from: t0, want: []time.Time{ // July only
			utc(2026, 7, 1, 0, 0, 0), utc(2027, 7, 1, 0, 0, 0)}}},
		{"a-b/n wrapping the hour", fireTimes{expr: "0 55-5/5 10 * * ?", from: t0, want: []time.Time{ // 55, 0, 5
			utc(2026, 1, 15, 10, 0, 0), utc(2026, 1, 15, 10, 5, 0), utc(2026, 1, 15, 10, 55, 0), utc(2026, 1, 16, 10, 0, 0)}}},
		{"lists mixing values and ranges", fireTimes{expr: "0 0,30 9 ? * MON,WED-FRI", from: t0, want: []time.Time{
			utc(2026, 1, 15, 9, 0, 0), utc(2026, 1, 15, 9, 30, 0), utc(2026, 1, 16, 9, 0, 0), utc(2026, 1, 16, 9, 30, 0), utc(2026, 1, 19, 9, 0, 0)}}},
		{"n#m with a name", fireTimes{expr: "0 0 12 ? * thu#3", from: t0, want: []time.Time{ // Thursdays 1, 8, 15 | 5, 12, 19
			utc(2026, 1, 15, 12, 0, 0), utc(2026, 2, 19, 12, 0, 0), utc(2026, 3, 19, 12, 0, 0)}}},
		{"years: a list and a range", fireTimes{expr: "0 0 0 1 1 ? 2027,2029-2030", from: t0, want: []time.Time{
			utc(2027, 1, 1, 0, 0, 0), utc(2029, 1, 1, 0, 0, 0), utc(2030, 1, 1, 0, 0, 0)}, end: true}},
		{"tabs and repeated spaces separate fields", fireTimes{expr: "0\t0  12 \t * * ?", from: t0, want: []time.Time{
			utc(2026, 1, 15, 12, 0, 0), utc(2026, 1, 16, 12, 0, 0)}}},
		// Quartz looks day n up with a lenient calendar: 31 of a 30-day month is the next 1st.
		// When that is a Saturday the day moves back to the 30th, a Friday, and fires there.
		// 2027: Wed 31 Mar; 31 Apr is Sat 1 May → Fri 30 Apr; Mon 31 May; 31 Jun is Thu 1 Jul →
		// nothing; Sat 31 Jul → Fri 30 Jul; Tue 31 Aug.
		{"31W in a 30-day month", fireTimes{expr: "0 0 12 31W * ?", from: utc(2027, 3, 1, 0, 0, 0), want: []time.Time{
			utc(2027, 3, 31, 12, 0, 0), utc(2027, 4, 30, 12, 0, 0), utc(2027, 5, 31, 12, 0, 0), utc(2027, 7, 30, 12, 0, 0), utc(2027, 8, 31, 12, 0, 0)}}},
		// L-30 is day 1 of a 31-day month, day 0 of a 30-day one and before it in February.
		// Day 0 is the previous month's last day; when that is a Sunday, W moves it to Monday
		// the 1st. 2026: Thu 1 Jan; (Feb none); Sun 1 Mar → Mon 2; (1 Apr is a Wed: none);
		// Fri 1 May; Sun 31 May → Mon 1 Jun; Wed 1 Jul; Sat 1 Aug → Mon 3.
		{"L-nW reaching day 0", fireTimes{expr: "0 0 12 L-30W * ?", from: jan1, want: []time.Time{
			utc(2026, 1, 1, 12, 0, 0), utc(2026, 3, 2, 12, 0, 0), utc(2026, 5, 1, 12, 0, 0), utc(2026, 6, 1, 12, 0, 0), utc(2026, 7, 1, 12, 0, 0), utc(2026, 8, 3, 12, 0, 0)}}},
		{"L-n past the 1st never fires", fireTimes{expr: "0 0 12 L-30 * ?", from: jan1, want: []time.Time{ // 31-day months only
			utc(2026, 1, 1, 12, 0, 0), utc(2026, 3, 1, 12, 0, 0), utc(2026, 5, 1, 12, 0, 0), utc(2026, 7, 1, 12, 0, 0)}}},
		{"29W with February left out", fireTimes{expr: "0 0 12 29W 1,3-12 ?", from: t0, want: []time.Time{ // Thu 29; Sun 29 → Mon 30; Wed 29
			utc(2026, 1, 29, 12, 0, 0), utc(2026, 3, 30, 12, 0, 0), utc(2026, 4, 29, 12, 0, 0)}}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			t.Parallel()
			tt.check(t, nil)
		})
	}
}

// TestQuartzParityInTimeZone checks that the day rules apply to the job's own calendar: the last
// day of the month in Los Angeles is the 1st in UTC, and Shanghai's weekdays begin at 01:00 UTC.
func TestQuartzParityInTimeZone(t *testing.T) {
	t.Parallel()
	la := mustLoad(t, "America/Los_Angeles")
	shanghai := mustLoad(t, "Asia/Shanghai")
	// 23:00 PST is 07:00 UTC the next day; from 8 March (PDT) it is 06:00 UTC.
	fireTimes{expr: "0 0 23 L * ?", from: t0, want: []time.Time{
		utc(2026, 2, 1, 7, 0, 0), utc(2026, 3, 1, 7, 0, 0), utc(2026, 4, 1, 6, 0, 0)}}.check(t, la)
	// t0 is Thursday 16:00 in Shanghai, past 09:00: Friday, then Monday.
	fireTimes{expr: "0 0 9 ? * MON-FRI", from: t0, want: []time.Time{
		utc(2026, 1, 16, 1, 0, 0), utc(2026, 1, 19, 1, 0, 0), utc(2026, 1, 20, 1, 0, 0)}}.check(t, shanghai)
}

// TestQuartzDifferencesRefused lists the expressions that XXL-JOB's Quartz accepts but reads in a
// way jobmesh will not copy, and the other ways of writing it wrong: each error names the field
// and, where Quartz accepts the text, what Quartz would make of it.
func TestQuartzDifferencesRefused(t *testing.T) {
	t.Parallel()
	tests := []struct {
		expr string
		want string
	}{
		// Quartz drops a step after a name.
		{"0 0 9 ? * MON/2", `cron: day-of-week field "MON/2": step after a name is refused: Quartz ignores /2 after MON and reads MON alone; write MON for that, or 2/2 for a step`},
		{"0 0 9 ? * mon-fri/2", `cron: day-of-week field "mon-fri/2": step after a name is refused: Quartz ignores /2 after MON-FRI and reads all of MON-FRI; write MON-FRI for that, or 2-6/2 for a step`},
		{"0 0 0 1 JAN/3 ?", `cron: month field "JAN/3": step after a name is refused: Quartz ignores /3 after JAN and reads JAN alone; write JAN for that, or 1/3 for a step`},
		{"0 0 0 1 NOV-FEB/2 ?", `write NOV-FEB for that, or 11-2/2 for a step`},
		{"0 0 9 ? * 2-FRI/2", `cron: day-of-week field "2-FRI/2": step after a name is refused (Quartz refuses it too); write 2-6/2`},
		// Quartz's 29W/30W in February depends on where its search started.
		{"0 0 12 29W * ?", `cron: day-of-month field "29W": 29W with February in the month field is refused`},
		{"0 0 12 30W 1-3 ?", `cron: day-of-month field "30W": 30W with February`},
		// Quartz keeps only the lowest day of a list with W or #.
		{"0 0 0 15W,20 * ?", `cron: day-of-month field "15W,20": W cannot be used in a list: Quartz would keep only the lowest day`},
		{"0 0 0 ? * 6,2#1", `cron: day-of-week field "6,2#1": # cannot be used in a list: Quartz would keep only the lowest day of the list, with that #m`},
		// Quartz drops W, L or # after a range, and reads L-anything in day-of-week as L.
		{"0 0 0 1-5W * ?", `W after a range: Quartz ignores the W and fires on every day of 1-5`},
		{"0 0 0 ? * MON-FRI#2", `cron: day-of-week field "MON-FRI#2": #2 after a range: Quartz ignores it and fires on every day of MON-FRI`},
		{"0 0 0 ? * LW", `cron: day-of-week field "LW": Quartz reads LW in day-of-week as L (Saturday)`},
		// Quartz is lenient with text it does not understand.
		{"0 0 0 */0 * ?", `cron: day-of-month field "*/0": step 0 is refused: Quartz silently reads it as no step`},
		{"0 0 1-10/40 * * ?", `cron: hours field "1-10/40": step 40 out of range 1-23 (Quartz reads a range with a larger step as its first value alone`},
		{"0 0 0 ? * MONDAY", `cron: day-of-week field "MONDAY": invalid value "MONDAY"; want 1-7 or SUN-SAT (Quartz reads only the first three letters, MON`},
		{"0 0 5X * * ?", `cron: hours field "5X": invalid value "5X"; want a number 0-23 (Quartz ignores what follows the number 5`},
		{"0 0 1,,2 * * ?", `cron: hours field "1,,2": missing value (Quartz skips an empty list item`},
		{"0 0 12 * * ? 2026 x", `(Quartz ignores fields after the seventh; jobmesh refuses them)`},
		{"0 0 12 ? * MON\n2026", `cron: white space '\n' inside the expression: separate fields with spaces or tabs only`},
		{"0 0 0 1 1 ? 2200", `cron: year field "2200": value 2200 out of range 1970-2199 (Quartz accepts any year but never fires`},
		// Quartz refuses these too.
		{"0 0 0 ? * 0", `cron: day-of-week field "0": value 0 out of range 1-7`},
		{"0 0 0 * * *", "cron: day-of-month and day-of-week cannot both be specified; use ? in one of them"},
		{"0 0 0 ? * ?", "cron: day-of-month and day-of-week cannot both be ?; specify one of them"},
		{"0 0 0 L,15 * ?", `L cannot be combined with other days in a list (Quartz refuses it too)`},
		{"0 0 0 ? * 1#1,2#2", `only one n#m is allowed (Quartz refuses more too)`},
	}
	for _, tt := range tests {
		e, err := cron.Parse(tt.expr)
		if err == nil {
			t.Errorf("Parse(%q) = %v, nil, want an error containing %q", tt.expr, e, tt.want)
			continue
		}
		if !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) error = %q, want it to contain %q", tt.expr, err, tt.want)
		}
	}
}
