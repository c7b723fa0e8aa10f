// Package cron parses Quartz cron expressions and computes their fire times. XXL-JOB users paste
// expressions written for Quartz's CronExpression, so this package accepts the same language and
// fires at the same times, with time-zone rules spelled out instead of left to a calendar library.
//
// An expression has six or seven whitespace-separated fields:
//
//	seconds       0-59
//	minutes       0-59
//	hours         0-23
//	day-of-month  1-31     also ?  L  L-n  LW  L-nW  nW
//	month         1-12     or JAN-DEC
//	day-of-week   1-7      or SUN-SAT (1 = SUN, as in Quartz); also ?  L  nL  n#m
//	year          1970-2199, optional
//
// Every field takes *, a value, a range a-b, a list a,b,c and steps */n (or /n), a/n and a-b/n,
// where n is at most Quartz's limit for the field (59, 59, 23, 31, 12, 7; 229 for years). A range
// whose end is below its start wraps past the field's largest value (22-2 in hours, NOV-FEB,
// FRI-MON) and a step carries across the wrap, as in Quartz (22-2/3 is 22 and 1); years cannot
// wrap. Names are case-insensitive. Exactly one of day-of-month and day-of-week must be ?: Quartz
// does not implement specifying both. Fields are separated by spaces and tabs, as in Quartz.
//
// Day-of-month L is the last day of the month and L-n the n-th day before it. nW is the weekday
// (Monday to Friday) nearest day n without leaving the month: a Saturday moves to Friday, or to
// Monday the 3rd when it is the 1st; a Sunday moves to Monday, or to Friday when it is the last
// day. LW and L-nW apply the same rule to the last day and to L-n. Day-of-week L alone means 7
// (Saturday), nL the last such weekday of the month (6L: last Friday) and n#m the m-th (6#3: third
// Friday, m is 1-5). As in Quartz, these forms stand alone, never in a list.
//
// Quartz finds nW and L-nW with a lenient calendar, and this package copies what that yields at
// the edges: 31W in a 30-day month fires on the 30th when the next month starts on a Saturday
// (day 31 is read as that Saturday and moved back a day), and L-nW that reaches day 0 fires on
// the 1st when the 1st is a Monday (day 0 is read as the previous month's last day, a Sunday, and
// moved forward). Otherwise a month without the day has no fire.
//
// Where Quartz accepts an expression but reads it in a way that is surely not what its author
// meant, or in a way that depends on when its search started, Parse refuses it and says what
// Quartz would have done, so no expression moved from XXL-JOB fires on other days in silence:
//   - a step after a name (MON/2, MON-FRI/2, JAN/3): Quartz drops the step;
//   - 29W or 30W when February can match: Quartz fires on the last day of February, or not,
//     depending on whether its search started inside February;
//   - W or # in a list (15W,20; 2#1,6): Quartz keeps only the lowest day; W, L or # after a
//     range (1-5W, 2-6L): Quartz drops the suffix; L-n or LW in day-of-week: Quartz reads L;
//   - a step of 0, a range step beyond the field's limit, text after a value (5X, MONDAY), empty
//     list items, fields past the seventh and white space other than spaces and tabs, which
//     Quartz reads leniently or ignores.
//
// Choices that go beyond Quartz: a range may mix a name and a number (1-FRI, MON-5), and
// years run from 1970 to 2199 (Quartz accepts any year but stops firing 100 years after it
// started); Next reports false once the expression cannot fire by the end of 2199.
//
// Fire times are whole seconds of wall-clock time in the location passed to Next. Daylight-saving
// changes are resolved so that a job neither runs twice nor is silently skipped (Quartz, which
// XXL-JOB runs in its JVM's zone, skips a fire time that falls in a spring-forward gap):
//   - a wall time skipped by a spring-forward jump fires once, at the first instant after the
//     jump (02:30 on a day when 02:00 becomes 03:00 fires at 03:00); several skipped fire times,
//     and a fire time at the end of the jump itself, collapse into that one instant;
//   - a wall time that occurs twice after a fall-back fires once, at its first occurrence; so
//     during the second pass through the repeated hour nothing fires, even every second.
package cron

import "strings"

// Expression is a parsed cron expression. It is immutable, so one value may be shared by any
// number of goroutines.
type Expression struct {
	text string

	// Bit n set means value n fires.
	second, minute, hour uint64
	month                uint64 // bits 1-12
	year                 bitset // bit n is year 1970+n
	day                  dayRule
}

// Parse parses a Quartz cron expression: seconds minutes hours day-of-month month day-of-week [year].
// The error names the field at fault and why, so it can be shown to whoever typed the expression.
func Parse(expr string) (*Expression, error) {
	fields, err := splitFields(expr)
	if err != nil {
		return nil, err
	}
	e := &Expression{text: strings.Join(fields, " "), year: yearField.all()}
	if e.second, err = secondField.parseMask(fields[0]); err != nil {
		return nil, err
	}
	if e.minute, err = minuteField.parseMask(fields[1]); err != nil {
		return nil, err
	}
	if e.hour, err = hourField.parseMask(fields[2]); err != nil {
		return nil, err
	}
	dom, err := parseDayOfMonth(fields[3])
	if err != nil {
		return nil, err
	}
	if e.month, err = monthField.parseMask(fields[4]); err != nil {
		return nil, err
	}
	dow, err := parseDayOfWeek(fields[5])
	if err != nil {
		return nil, err
	}
	if e.day, err = chooseDays(dom, dow); err != nil {
		return nil, err
	}
	if err := checkLateWeekday(e.day, e.month, fields[3]); err != nil {
		return nil, err
	}
	if len(fields) == 7 {
		if e.year, err = yearField.parse(fields[6]); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// String returns the expression as parsed, its fields separated by single spaces, so it can be
// stored and shown in the form the user wrote it.
func (e *Expression) String() string { return e.text }
