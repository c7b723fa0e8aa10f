package schedule_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jobmesh/jobmesh/services/scheduler/internal/schedule"
)

var t0 = time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)

func TestParseErrorsNameThePart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		typ   schedule.Type
		expr  string
		tz    string
		field string
	}{
		{schedule.Cron, "", "", "expression"},
		{schedule.Cron, "0 61 * * * ?", "", "expression"},
		{schedule.FixRate, "", "", "expression"},
		{schedule.FixRate, "50ms", "", "expression"},
		{schedule.FixRate, "-5", "", "expression"},
		{schedule.FixRate, "soon", "", "expression"},
		{schedule.FixRate, "1.5ns", "", "expression"},
		{schedule.FixDelay, "367d", "", "expression"},
		{schedule.Once, "tomorrow", "", "expression"},
		{schedule.None, "0 * * * * ?", "", "expression"},
		{schedule.Cron, "0 * * * * ?", "Mars/Olympus", "time_zone"},
		{schedule.Cron, "0 * * * * ?", "Local", "time_zone"},
		{schedule.Type(42), "", "", "type"},
	}
	for _, tt := range tests {
		_, err := schedule.Parse(tt.typ, tt.expr, tt.tz)
		var se *schedule.Error
		if !errors.As(err, &se) || se.Field != tt.field {
			t.Errorf("Parse(%d, %q, %q) = %v, want an error in %s", tt.typ, tt.expr, tt.tz, err, tt.field)
		}
	}
}

func TestFireTimes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		typ  schedule.Type
		expr string
		tz   string
		want []time.Time
	}{
		{"fix rate in seconds (XXL-JOB form)", schedule.FixRate, "30", "", []time.Time{t0.Add(30 * time.Second), t0.Add(60 * time.Second), t0.Add(90 * time.Second)}},
		{"fix rate sub-second", schedule.FixRate, "250ms", "", []time.Time{t0.Add(250 * time.Millisecond), t0.Add(500 * time.Millisecond), t0.Add(750 * time.Millisecond)}},
		{"cron every minute", schedule.Cron, "0 * * * * ?", "", []time.Time{t0.Add(time.Minute), t0.Add(2 * time.Minute), t0.Add(3 * time.Minute)}},
		{"cron in a time zone", schedule.Cron, "0 0 9 * * ?", "Asia/Shanghai", []time.Time{
			time.Date(2026, 11, 24, 1, 0, 0, 0, time.UTC), time.Date(2026, 11, 25, 1, 0, 0, 0, time.UTC), time.Date(2026, 11, 26, 1, 0, 0, 0, time.UTC)}},
		{"once", schedule.Once, "2026-11-23T09:00:00+01:00", "", []time.Time{t0}},
		{"none", schedule.None, "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s, err := schedule.Parse(tt.typ, tt.expr, tt.tz)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got := s.Preview(t0.Add(-time.Nanosecond), 3)
			if tt.typ == schedule.FixRate || tt.typ == schedule.Cron {
				got = s.Preview(t0, 3)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Preview = %v, want %v", got, tt.want)
			}
			for i := range got {
				if !got[i].Equal(tt.want[i]) {
					t.Errorf("fire %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestOnceInThePastNeverFires(t *testing.T) {
	t.Parallel()
	s, err := schedule.Parse(schedule.Once, "2001-01-01T00:00:00Z", "")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got, ok := s.First(t0); ok {
		t.Errorf("First = %v, true; want no fire", got)
	}
}
