package cron_test

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// An oracle is a random expression together with what it means, worked out while writing it
// rather than by the parser, so that the brute-force search below checks Parse and Next alike.
type oracle struct {
	text                              string
	second, minute, hour, month, year map[int]bool
	day                               func(y int, mo time.Month, d int) bool
}

// matches reports whether a wall time (a time.Time in UTC) matches.
func (o *oracle) matches(w time.Time) bool {
	return o.year[w.Year()] && o.month[int(w.Month())] && o.day(w.Year(), w.Month(), w.Day()) &&
		o.hour[w.Hour()] && o.minute[w.Minute()] && o.second[w.Second()]
}

type genField struct {
	min, max, maxStep int
	names             []string
	pickMin, pickMax  int // where random values come from, when not min-max
}

var (
	genSecond = genField{min: 0, max: 59, maxStep: 59}
	genMinute = genField{min: 0, max: 59, maxStep: 59}
	genHour   = genField{min: 0, max: 23, maxStep: 23}
	genDom    = genField{min: 1, max: 31, maxStep: 31}
	genMonth  = genField{min: 1, max: 12, maxStep: 12, names: strings.Fields("JAN FEB MAR APR MAY JUN JUL AUG SEP OCT NOV DEC")}
	genDow    = genField{min: 1, max: 7, maxStep: 7, names: strings.Fields("SUN MON TUE WED THU FRI SAT")}
	genYear   = genField{min: 1970, max: 2199, maxStep: 229, pickMin: 2020, pickMax: 2045} // near the start times
)

// word writes v as a number or, sometimes, as a name in random case.
func (f genField) word(r *rand.Rand, v int) string {
	if f.names == nil || r.IntN(2) == 0 {
		return fmt.Sprint(v)
	}
	name := f.names[v-f.min]
	if r.IntN(2) == 0 {
		name = strings.ToLower(name)
	}
	return name
}

func (f genField) value(r *rand.Rand) int {
	if f.pickMax != 0 {
		return f.pickMin + r.IntN(f.pickMax-f.pickMin+1)
	}
	return f.min + r.IntN(f.max-f.min+1)
}

// list writes a random list of *, values, ranges (wrapping unless years) and steps, and returns
// the set of values it means. Ranges wrap by walking the field as a circle from start to end,
// taking every step-th value.
func (f genField) list(r *rand.Rand) (string, map[int]bool) {
	set := map[int]bool{}
	walk := func(from, to, step int) {
		v := from
		for i := 0; ; i++ {
			if i%step == 0 {
				set[v] = true
			}
			if v == to {
				return
			}
			if v++; v > f.max {
				v = f.min
			}
		}
	}
	var items []string
	for range 1 + r.IntN(3) {
		lo, hi := f.value(r), f.value(r)
		if f.max > 1000 && hi < lo {
			lo, hi = hi, lo
		}
		step := 1 + r.IntN(f.maxStep)
		switch r.IntN(6) {
		case 0:
			items = append(items, "*")
			walk(f.min, f.max, 1)
		case 1:
			items = append(items, f.word(r, lo))
			walk(lo, lo, 1)
		case 2:
			items = append(items, f.word(r, lo)+"-"+f.word(r, hi))
			walk(lo, hi, 1)
		case 3:
			items = append(items, fmt.Sprintf("*/%d", step))
			walk(f.min, f.max, step)
		case 4: // numbers only: Quartz ignores a step after a name, so jobmesh refuses it
			items = append(items, fmt.Sprintf("%d/%d", lo, step))
			walk(lo, f.max, step)
		case 5:
			items = append(items, fmt.Sprintf("%d-%d/%d", lo, hi, step))
			walk(lo, hi, step)
		}
	}
	return strings.Join(items, ","), set
}

func lastDayOf(y int, mo time.Month) int { return time.Date(y, mo+1, 0, 0, 0, 0, 0, time.UTC).Day() }

// nearestWeekday is Quartz's W rule written out with the time package; 0 means no such day.
// Like Quartz's lenient calendar, time.Date reads day 0 as the previous month's last day and
// day last+1 as the next month's 1st; a weekday moved back into the month from there counts.
func nearestWeekday(y int, mo time.Month, d int) int {
	last := lastDayOf(y, mo)
	if d < 0 || d > last+1 {
		return 0
	}
	switch time.Date(y, mo, d, 0, 0, 0, 0, time.UTC).Weekday() {
	case time.Saturday:
		if d == 1 {
			d = 3
		} else {
			d--
		}
	case time.Sunday:
		if d == last {
			d -= 2
		} else {
			d++
		}
	}
	if d < 1 || d > last {
		return 0
	}
	return d
}

// days writes the day-of-month and day-of-week fields.
func days(r *rand.Rand) (dom, dow string, match func(y int, mo time.Month, d int) bool) {
	weekday := func(y int, mo time.Month, d int) int {
		return int(time.Date(y, mo, d, 0, 0, 0, 0, time.UTC).Weekday()) + 1 // Quartz numbering
	}
	n := r.IntN(29) + 1 // 29W and 30W are refused when February can match, so 29 stands for 31
	if n == 29 {
		n = 31
	}
	off := r.IntN(5)
	if r.IntN(4) == 0 {
		off = 27 + r.IntN(4) // reaches day 0 or before in short months
	}
	wd := genDow.value(r)
	switch r.IntN(12) {
	case 0:
		return "L", "?", func(y int, mo time.Month, d int) bool { return d == lastDayOf(y, mo) }
	case 1:
		return fmt.Sprintf("L-%d", off), "?", func(y int, mo time.Month, d int) bool { return d == lastDayOf(y, mo)-off }
	case 2:
		return "LW", "?", func(y int, mo time.Month, d int) bool { return d == nearestWeekday(y, mo, lastDayOf(y, mo)) }
	case 3:
		return fmt.Sprintf("L-%dW", off), "?", func(y int, mo time.Month, d int) bool {
			return d == nearestWeekday(y, mo, lastDayOf(y, mo)-off)
		}
	case 4:
		return fmt.Sprintf("%dW", n), "?", func(y int, mo time.Month, d int) bool { return d == nearestWeekday(y, mo, n) }
	case 5:
		return "?", "L", func(y int, mo time.Month, d int) bool { return weekday(y, mo, d) == 7 }
	case 6:
		return "?", genDow.word(r, wd) + "L", func(y int, mo time.Month, d int) bool {
			return weekday(y, mo, d) == wd && d+7 > lastDayOf(y, mo)
		}
	case 7:
		nth := 1 + r.IntN(5)
		return "?", fmt.Sprintf("%s#%d", genDow.word(r, wd), nth), func(y int, mo time.Month, d int) bool {
			return weekday(y, mo, d) == wd && (d-1)/7 == nth-1
		}
	case 8, 9:
		text, set := genDow.list(r)
		return "?", text, func(y int, mo time.Month, d int) bool { return set[weekday(y, mo, d)] }
	default:
		text, set := genDom.list(r)
		return text, "?", func(_ int, _ time.Month, d int) bool { return set[d] }
	}
}

// randomOracle writes a random valid expression. Seconds, minutes and hours lean towards * so
// that most expressions fire often enough for the brute-force search.
func randomOracle(r *rand.Rand) *oracle {
	o := &oracle{}
	often := func(f genField) (string, map[int]bool) {
		if r.IntN(3) == 0 {
			set := map[int]bool{}
			for v := f.min; v <= f.max; v++ {
				set[v] = true
			}
			return "*", set
		}
		return f.list(r)
	}
	var fields [7]string
	fields[0], o.second = often(genSecond)
	fields[1], o.minute = often(genMinute)
	fields[2], o.hour = often(genHour)
	fields[3], fields[5], o.day = days(r)
	fields[4], o.month = often(genMonth)
	o.year = map[int]bool{}
	if r.IntN(4) == 0 {
		fields[6], o.year = genYear.list(r)
	} else {
		for y := 1970; y <= 2199; y++ {
			o.year[y] = true
		}
	}
	o.text = strings.TrimSpace(strings.Join(fields[:], " "))
	return o
}

// bruteNext steps through wall time a second at a time, skipping a whole day, hour or minute
// only when that day, hour or minute does not match at all. It gives up at until.
func (o *oracle) bruteNext(after, until time.Time) (time.Time, bool) {
	t := after.Truncate(time.Second).Add(time.Second)
	for t.Before(until) {
		y, mo, d := t.Date()
		switch {
		case !o.year[y] || !o.month[int(mo)] || !o.day(y, mo, d):
			t = time.Date(y, mo, d+1, 0, 0, 0, 0, time.UTC)
		case !o.hour[t.Hour()]:
			t = t.Truncate(time.Hour).Add(time.Hour)
		case !o.minute[t.Minute()]:
			t = t.Truncate(time.Minute).Add(time.Minute)
		case !o.second[t.Second()]:
			t = t.Add(time.Second)
		default:
			return t, true
		}
	}
	return time.Time{}, false
}

// TestNextMatchesBruteForce checks, for random expressions and start times in UTC, that Next
// moves forward and that no matching time lies between the start and what Next returns.
func TestNextMatchesBruteForce(t *testing.T) {
	t.Parallel()
	const horizon = 3 * 366 * 24 * time.Hour
	cases := 3000
	if testing.Short() {
		cases = 300
	}
	r := rand.New(rand.NewPCG(1, 1)) // fixed so that a failure reproduces; FuzzParse explores further
	for range cases {
		o := randomOracle(r)
		e := mustParse(t, o.text)
		at := time.Date(2020+r.IntN(25), time.Month(1+r.IntN(12)), 1+r.IntN(31), r.IntN(24), r.IntN(60), r.IntN(60), r.IntN(2)*r.IntN(1e9), time.UTC)
		if r.IntN(10) == 0 {
			at = time.Date(2197+r.IntN(4), 1+time.Month(r.IntN(12)), 1, 0, 0, 0, 0, time.UTC)
		}
		for range 4 {
			until := at.Add(horizon)
			got, ok := e.Next(at, nil)
			want, wantOK := o.bruteNext(at, until)
			switch {
			case wantOK && (!ok || !got.Equal(want)):
				t.Fatalf("%q: Next(%v) = %v, %t, want %v", o.text, at, got, ok, want)
			case !wantOK && ok && got.Before(until):
				t.Fatalf("%q: Next(%v) = %v, want nothing before %v", o.text, at, got, until)
			case ok && (!got.After(at) || got.Nanosecond() != 0):
				t.Fatalf("%q: Next(%v) = %v, want a whole second after it", o.text, at, got)
			}
			if !ok {
				break
			}
			at = got
		}
	}
}

// TestNextDSTMatchesBruteForce checks Next across offset changes against a second-by-second
// walk over instants: an instant fires when the clock, having reached a new high, has passed a
// matching wall time. That is the rule in the package doc, said without wall-time arithmetic.
func TestNextDSTMatchesBruteForce(t *testing.T) {
	t.Parallel()
	type change struct {
		zone string
		at   time.Time // UTC
	}
	changes := []change{
		{"America/New_York", utc(2026, 3, 8, 7, 0, 0)},
		{"America/New_York", utc(2026, 11, 1, 6, 0, 0)},
		{"Europe/Berlin", utc(2026, 3, 29, 1, 0, 0)},
		{"Europe/Berlin", utc(2026, 10, 25, 1, 0, 0)},
		{"Australia/Lord_Howe", utc(2026, 4, 4, 15, 0, 0)}, // back 30 minutes at 02:00 local
		{"Australia/Lord_Howe", utc(2026, 10, 3, 15, 30, 0)},
		{"Pacific/Apia", utc(2011, 12, 30, 10, 0, 0)}, // forward a whole day
	}
	exprs := []string{
		"* * * * * ?",
		"0 * * * * ?",
		"0 0/30 * * * ?",
		"0 30 2 * * ?",
		"0 0 2 * * ?",
		"0 0 3 * * ?",
		"0 45 1 * * ?",
		"0 0,30 1-3 * * ?",
		"13 */7 * * * ?",
		"0 0 12 * * ?",
		"0 0 0 * * ?",
	}
	r := rand.New(rand.NewPCG(2, 2))
	for _, ch := range changes {
		loc := mustLoad(t, ch.zone)
		for i := range len(exprs) + 5 {
			o := randomOracle(r)
			o.year = map[int]bool{}
			for y := 1970; y <= 2199; y++ {
				o.year[y] = true
			}
			text := strings.Join(strings.Fields(o.text)[:6], " ")
			if i < len(exprs) {
				text = exprs[i]
				o = oracleFor(t, text)
			}
			e := mustParse(t, text)

			// The clock's reading as a wall time in UTC, and the fires by the rule above.
			wall := func(x time.Time) time.Time {
				_, offset := x.In(loc).Zone()
				return x.Add(time.Duration(offset) * time.Second).UTC()
			}
			from, until := ch.at.Add(-3*time.Hour), ch.at.Add(3*time.Hour)
			if wall(from).Sub(from) == wall(until).Sub(until) {
				t.Fatalf("%s: no offset change between %v and %v", ch.zone, from, until)
			}
			var want []time.Time
			high := wall(from)
			for x := from.Add(time.Second); x.Before(until); x = x.Add(time.Second) {
				w := wall(x)
				fires := false
				for ; high.Before(w); high = high.Add(time.Second) {
					fires = fires || o.matches(high.Add(time.Second))
				}
				if fires {
					want = append(want, x)
				}
			}

			at := from
			for _, w := range want {
				got, ok := e.Next(at, loc)
				if !ok || !got.Equal(w) {
					t.Fatalf("%s: %q: Next(%v) = %v, %t, want %v", ch.zone, text, at, got, ok, w.In(loc))
				}
				// Any instant between the previous fire and this one leads here too.
				mid := at.Add(got.Sub(at) / 2)
				if got, _ := e.Next(mid, loc); !got.Equal(w) {
					t.Fatalf("%s: %q: Next(%v) = %v, want %v", ch.zone, text, mid, got, w.In(loc))
				}
				at = got
			}
			if got, ok := e.Next(at, loc); ok && got.Before(until) {
				t.Fatalf("%s: %q: Next(%v) = %v, want nothing before %v", ch.zone, text, at, got, until)
			}
		}
	}
}

// oracleFor spells out a fixed expression from exprs: only *, numbers, lists, a-b and a/n.
func oracleFor(t *testing.T, text string) *oracle {
	t.Helper()
	f := strings.Fields(text)
	set := func(s string, min, max int) map[int]bool {
		out := map[int]bool{}
		for item := range strings.SplitSeq(s, ",") {
			lo, hi, step := min, max, 1
			body, stepText, hasStep := strings.Cut(item, "/")
			if hasStep {
				fmt.Sscan(stepText, &step)
			}
			if body != "*" {
				a, b, isRange := strings.Cut(body, "-")
				fmt.Sscan(a, &lo)
				hi = lo
				if isRange {
					fmt.Sscan(b, &hi)
				} else if hasStep {
					hi = max
				}
			}
			for v := lo; v <= hi; v += step {
				out[v] = true
			}
		}
		return out
	}
	o := &oracle{
		text:   text,
		second: set(f[0], 0, 59),
		minute: set(f[1], 0, 59),
		hour:   set(f[2], 0, 23),
		month:  set(f[4], 1, 12),
		year:   set("*", 1970, 2199),
	}
	if f[3] != "*" || f[5] != "?" {
		t.Fatalf("oracleFor(%q): want every day", text)
	}
	o.day = func(int, time.Month, int) bool { return true }
	return o
}
