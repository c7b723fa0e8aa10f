// Package schedule turns a job's schedule (type, expression, time zone) into fire times. It is the
// one place that knows what each schedule type means, used by validation, the preview API and
// the pre-read loop alike.
package schedule

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/cron"
)

// Type mirrors the API's ScheduleType values.
type Type int

// Schedule types, with the API's numbers.
const (
	None Type = 1 + iota
	Cron
	FixRate
	FixDelay
	Once
)

// Interval limits for FIX_RATE and FIX_DELAY.
const (
	MinInterval = 100 * time.Millisecond
	MaxInterval = 366 * 24 * time.Hour
)

// Schedule computes fire times.
type Schedule struct {
	typ      Type
	cron     *cron.Expression
	loc      *time.Location
	interval time.Duration
	at       time.Time
}

// Error is a problem with one part of a schedule; Field is "type", "expression" or "time_zone".
type Error struct {
	Field  string
	Reason string
}

func (e *Error) Error() string { return e.Field + ": " + e.Reason }

// Parse checks a schedule and prepares it. An empty time zone means UTC.
func Parse(typ Type, expr, tz string) (*Schedule, error) {
	loc := time.UTC
	if tz != "" {
		l, err := time.LoadLocation(tz)
		if err != nil || tz == "Local" {
			return nil, &Error{"time_zone", fmt.Sprintf("unknown IANA time zone %q", tz)}
		}
		loc = l
	}
	s := &Schedule{typ: typ, loc: loc}
	expr = strings.TrimSpace(expr)
	switch typ {
	case None:
		if expr != "" {
			return nil, &Error{"expression", "must be empty for schedule type NONE"}
		}
	case Cron:
		if expr == "" {
			return nil, &Error{"expression", "required for CRON: a Quartz cron expression such as \"0 */5 * * * ?\""}
		}
		c, err := cron.Parse(expr)
		if err != nil {
			return nil, &Error{"expression", err.Error()}
		}
		s.cron = c
	case FixRate, FixDelay:
		d, err := ParseInterval(expr)
		if err != nil {
			return nil, &Error{"expression", err.Error()}
		}
		s.interval = d
	case Once:
		t, err := time.Parse(time.RFC3339Nano, expr)
		if err != nil {
			return nil, &Error{"expression", fmt.Sprintf("want an RFC 3339 time for ONCE, got %q", expr)}
		}
		s.at = t.Truncate(time.Millisecond)
	default:
		return nil, &Error{"type", fmt.Sprintf("unknown schedule type %d", int(typ))}
	}
	return s, nil
}

// ParseInterval reads a FIX_RATE/FIX_DELAY interval: a Go duration ("1m30s", "250ms") or a bare
// number of seconds, as XXL-JOB stores it.
func ParseInterval(expr string) (time.Duration, error) {
	if expr == "" {
		return 0, errors.New("required: an interval such as \"30s\" or \"30\" (seconds)")
	}
	var d time.Duration
	if n, err := strconv.ParseInt(expr, 10, 64); err == nil {
		if n <= 0 || n > int64(MaxInterval/time.Second) {
			return 0, fmt.Errorf("interval %q out of range %v-%v", expr, MinInterval, MaxInterval)
		}
		d = time.Duration(n) * time.Second
	} else {
		d, err = time.ParseDuration(expr)
		if err != nil {
			return 0, fmt.Errorf("want a duration such as \"30s\" or a number of seconds, got %q", expr)
		}
	}
	if d < MinInterval || d > MaxInterval {
		return 0, fmt.Errorf("interval %v out of range %v-%v", d, MinInterval, MaxInterval)
	}
	if d%time.Millisecond != 0 {
		return 0, fmt.Errorf("interval %v: finer than a millisecond", d)
	}
	return d, nil
}

// Type returns the schedule's type.
func (s *Schedule) Type() Type { return s.typ }

// Interval is the FIX_RATE/FIX_DELAY interval.
func (s *Schedule) Interval() time.Duration { return s.interval }

// First returns the first fire strictly after from (the time the job is started or created):
// for FIX_RATE and FIX_DELAY one interval after from.
func (s *Schedule) First(from time.Time) (time.Time, bool) {
	switch s.typ {
	case FixRate, FixDelay:
		return from.Truncate(time.Millisecond).Add(s.interval), true
	}
	return s.Next(from)
}

// Next returns the fire that follows a fire at (or a moment) `after`, and false when there is none:
// NONE never fires, FIX_DELAY fires only after completions, ONCE fires once.
func (s *Schedule) Next(after time.Time) (time.Time, bool) {
	switch s.typ {
	case Cron:
		t, ok := s.cron.Next(after, s.loc)
		return t.UTC(), ok
	case FixRate:
		return after.Truncate(time.Millisecond).Add(s.interval), true
	case Once:
		if s.at.After(after) {
			return s.at.UTC(), true
		}
	}
	return time.Time{}, false
}

// Preview lists up to n fire times after from.
func (s *Schedule) Preview(from time.Time, n int) []time.Time {
	var out []time.Time
	t, ok := s.First(from)
	for ok && len(out) < n {
		out = append(out, t)
		if s.typ == FixDelay {
			t, ok = t.Add(s.interval), true // assumes runs take no time: a preview, not a promise
			continue
		}
		t, ok = s.Next(t)
	}
	return out
}
