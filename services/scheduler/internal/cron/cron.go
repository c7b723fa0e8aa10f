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
// does not implement specifying both.
//
// Day-of-month L is the last day of the month and L-n the n-th day before it. nW is the weekday
// (Monday to Friday) nearest day n without leaving the month: a Saturday moves to Friday, or to
// Monday the 3rd when it is the 1st; a Sunday moves to Monday, or to Friday when it is the last
// day. LW and L-nW apply the same rule to the last day and to L-n. Day-of-week L alone means 7
// (Saturday), nL the last such weekday of the month (6L: last Friday) and n#m the m-th (6#3: third
// Friday, m is 1-5). As in Quartz, these forms stand alone, never in a list.
//
// Choices that go beyond, or deliberately differ from, Quartz 2.5:
//   - a month that has no day n (nW, or L-n reaching before the 1st) has no fire, as a plain n
//     does, rather than spilling into the next month;
//   - a step of 0 and fields past the seventh are errors; Quartz reads */0 as * and ignores extras;
//   - names work wherever numbers do (MON-FRI/2, FRI#3, FRIL, 1-FRI), and anything after a name is
//     an error, where Quartz silently drops it;
//   - years run from 1970 to 2199; Next reports false once the expression cannot fire by then.
//
// Fire times are whole seconds of wall-clock time in the location passed to Next. Daylight-saving
// changes are resolved so that a job neither runs twice nor is silently skipped:
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
	fields := strings.Fields(expr)
	if err := checkFieldCount(len(fields)); err != nil {
		return nil, err
	}
	e := &Expression{text: strings.Join(fields, " "), year: yearField.all()}
	var err error
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
