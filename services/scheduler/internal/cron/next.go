package cron

import (
	"math/bits"
	"time"
)

// The search works on wall times: what a clock in the location reads, as whole seconds since
// 1970-01-01 00:00:00 on that clock (a reading taken as if it were UTC). It finds the first
// matching wall time by skipping whole years, months, days, hours and minutes, then turns the
// wall time into an instant under the daylight-saving rules in the package doc.

const (
	// lookaround bounds, in seconds, how far a clock may read from UTC and how large an offset
	// change may be. Real offsets stay within 15 hours; the margin covers changes such as Samoa
	// skipping a whole day.
	lookaround = 48 * 60 * 60
	// maxZoneHops bounds the walk over a location's offset changes within lookaround.
	maxZoneHops = 16
	// maxAttempts bounds Next's retries, which only zone data breaking lookaround can cause.
	maxAttempts = 16
)

var (
	// Instants outside [searchFrom, searchUntil) are decided without a search: nothing fires
	// before 1970 or after 2199.
	searchFrom  = time.Date(1900, 1, 1, 0, 0, 0, 0, time.UTC)
	searchUntil = time.Date(2201, 1, 1, 0, 0, 0, 0, time.UTC)
)

// Next returns the first fire time strictly after `after`, evaluated in loc (nil means UTC), and
// false when the expression can never fire again (e.g. a past year, or Feb 30). The scheduler
// calls it with the previous fire time to plan the next one, so it never returns a time at or
// before after, and fires skipped or repeated by daylight saving follow the package doc. The
// result is in loc, in whole seconds.
func (e *Expression) Next(after time.Time, loc *time.Location) (time.Time, bool) {
	if loc == nil {
		loc = time.UTC
	}
	if !after.Before(searchUntil) {
		return time.Time{}, false
	}
	if after.Before(searchFrom) {
		after = searchFrom
	}
	// Every wall time up to the latest one the clock has shown has already had its first
	// instant, so the candidates start just past it.
	from := latestWall(after.Truncate(time.Second).In(loc)) + 1
	for range maxAttempts {
		w, ok := e.nextWall(from)
		if !ok {
			break
		}
		if t := firstReaching(w, loc); t.After(after) {
			return t, true
		}
		from = w + 1
	}
	return time.Time{}, false
}

// nextWall returns the first wall time at or after from that the expression matches.
func (e *Expression) nextWall(from int64) (int64, bool) {
	t := time.Unix(from, 0).UTC()
	year, month, d := t.Date()
	y, mo := year, int(month)
	h, mi, s := t.Clock()
	if y < yearField.min {
		y, mo, d, h, mi, s = yearField.min, 1, 1, 0, 0, 0
	}
	var daysY, daysMo int // the month that days was computed for
	var days uint64
	// Each pass returns or moves to the start of a later year, month, day, hour or minute, so the
	// loop ends by 2199. Moving past a field's end (month 13, day 32, hour 24) fails that field's
	// match, which carries into the next larger field.
	for {
		ny := e.year.next(y - yearField.min)
		if ny < 0 {
			return 0, false
		}
		if ny += yearField.min; ny != y {
			y, mo, d, h, mi, s = ny, 1, 1, 0, 0, 0
		}
		nmo := nextBit(e.month, mo)
		if nmo < 0 {
			y, mo, d, h, mi, s = y+1, 1, 1, 0, 0, 0
			continue
		}
		if nmo != mo {
			mo, d, h, mi, s = nmo, 1, 0, 0, 0
		}
		if y != daysY || mo != daysMo {
			days, daysY, daysMo = e.day.in(y, mo), y, mo
		}
		nd := nextBit(days, d)
		if nd < 0 {
			mo, d, h, mi, s = mo+1, 1, 0, 0, 0
			continue
		}
		if nd != d {
			d, h, mi, s = nd, 0, 0, 0
		}
		nh := nextBit(e.hour, h)
		if nh < 0 {
			d, h, mi, s = d+1, 0, 0, 0
			continue
		}
		if nh != h {
			h, mi, s = nh, 0, 0
		}
		nmi := nextBit(e.minute, mi)
		if nmi < 0 {
			h, mi, s = h+1, 0, 0
			continue
		}
		if nmi != mi {
			mi, s = nmi, 0
		}
		ns := nextBit(e.second, s)
		if ns < 0 {
			mi, s = mi+1, 0
			continue
		}
		return time.Date(y, time.Month(mo), d, h, mi, ns, 0, time.UTC).Unix(), true
	}
}

// nextBit returns the smallest set bit of mask at or above i, or -1.
func nextBit(mask uint64, i int) int {
	if i >= 64 {
		return -1
	}
	mask &= ^uint64(0) << i
	if mask == 0 {
		return -1
	}
	return bits.TrailingZeros64(mask)
}

// in returns the days of month mo of year y that the rule picks, as bits 1-31.
func (r *dayRule) in(y, mo int) uint64 {
	last := daysIn(y, mo)
	first := int(time.Date(y, time.Month(mo), 1, 0, 0, 0, 0, time.UTC).Weekday())
	d := 0
	switch r.kind {
	case daysOfMonth:
		return r.days & (1<<(last+1) - 2)
	case daysOfWeek:
		return r.byFirst[first] & (1<<(last+1) - 2)
	case lastDay:
		d = last - r.n
		switch {
		case !r.weekday:
		case d >= 1:
			d = nearestWeekdayTo(d, first, last)
		case d == 0 && first == 1:
			// L-nW reaching day 0: Quartz's calendar reads it as the previous month's last day
			// and, that being a Sunday, moves it to the next day, Monday the 1st.
			d = 1
		}
	case nearestWeekday:
		switch {
		case r.n <= last:
			d = nearestWeekdayTo(r.n, first, last)
		case r.n == last+1 && (first+last)%7 == 6:
			// 31W in a 30-day month: Quartz's calendar reads day 31 as the next month's 1st and,
			// that being a Saturday, moves it back a day, to this month's last day, a Friday.
			d = last
		}
	case lastWeekday:
		lastWeekday := (first + last - 1) % 7
		d = last - (lastWeekday-(r.n-1)+7)%7
	case nthWeekday:
		d = 1 + (r.n-1-first+7)%7 + 7*(r.nth-1)
	}
	if d < 1 || d > last {
		return 0
	}
	return 1 << d
}

// nearestWeekdayTo moves day d of a month whose 1st is weekday first (0 = Sunday) and whose last
// day is last to the nearest Monday-Friday without leaving the month, as Quartz's W does.
func nearestWeekdayTo(d, first, last int) int {
	switch (first + d - 1) % 7 {
	case 6: // Saturday
		if d == 1 {
			return d + 2
		}
		return d - 1
	case 0: // Sunday
		if d == last {
			return d - 2
		}
		return d + 1
	}
	return d
}

func daysIn(y, mo int) int {
	switch mo {
	case 2:
		if y%4 == 0 && (y%100 != 0 || y%400 == 0) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// latestWall returns the latest wall time that t's location has shown up to and including t. It
// is t's own reading except just after a fall-back, when the clock has already shown later ones.
func latestWall(t time.Time) int64 {
	_, offset := t.Zone()
	latest := t.Unix() + int64(offset)
	at := t
	for range maxZoneHops {
		start, _ := at.ZoneBounds()
		if start.IsZero() || t.Unix()-start.Unix() > lookaround {
			break
		}
		at = start.Add(-time.Second) // the last second of the previous offset
		_, offset := at.Zone()
		latest = max(latest, at.Unix()+int64(offset))
	}
	return latest
}

// firstReaching returns the first instant at which a clock in loc reads wall time w or later:
// the first occurrence of a repeated wall time, or the end of the jump that skipped it.
func firstReaching(w int64, loc *time.Location) time.Time {
	at := time.Unix(w-lookaround, 0).In(loc)
	for range maxZoneHops {
		// Within one offset the clock reads instant+offset, rising with the instant.
		_, offset := at.Zone()
		start, end := at.ZoneBounds()
		x := w - int64(offset)
		if !start.IsZero() {
			x = max(x, start.Unix())
		}
		if end.IsZero() || x < end.Unix() {
			return time.Unix(x, 0).In(loc)
		}
		at = end
	}
	return at
}
