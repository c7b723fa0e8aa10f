package cron

import (
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A field is one position of an expression: its name for errors, the values and steps Quartz
// allows in it and, for month and day-of-week, the names it accepts.
type field struct {
	name     string
	min, max int
	maxStep  int      // Quartz's limit for the n of a step
	names    []string // names[i] means min+i
}

var (
	secondField = field{name: "seconds", min: 0, max: 59, maxStep: 59}
	minuteField = field{name: "minutes", min: 0, max: 59, maxStep: 59}
	hourField   = field{name: "hours", min: 0, max: 23, maxStep: 23}
	domField    = field{name: "day-of-month", min: 1, max: 31, maxStep: 31}
	monthField  = field{name: "month", min: 1, max: 12, maxStep: 12, names: []string{
		"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}}
	dowField = field{name: "day-of-week", min: 1, max: 7, maxStep: 7, names: []string{
		"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}}
	yearField = field{name: "year", min: 1970, max: 2199, maxStep: 229}
)

// splitFields trims the expression and splits it into its six or seven fields. Quartz separates
// fields by spaces and tabs only: a line break inside would leave it with fields that jobmesh,
// splitting there too, would read differently, so any other white space is refused.
func splitFields(expr string) ([]string, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return nil, errors.New("cron: empty expression; want seconds minutes hours day-of-month month day-of-week [year]")
	}
	if i := strings.IndexFunc(expr, func(r rune) bool { return unicode.IsSpace(r) && r != ' ' && r != '\t' }); i >= 0 {
		r, _ := utf8.DecodeRuneInString(expr[i:])
		return nil, fmt.Errorf("cron: white space %q inside the expression: separate fields with spaces or tabs only (Quartz does not split fields there, so it would read different fields)", r)
	}
	fields := strings.FieldsFunc(expr, func(r rune) bool { return r == ' ' || r == '\t' })
	if n := len(fields); n > 7 {
		return nil, fmt.Errorf("cron: expected 6 or 7 fields, got %d: seconds minutes hours day-of-month month day-of-week [year] (Quartz ignores fields after the seventh; jobmesh refuses them)", n)
	} else if n < 6 {
		return nil, fmt.Errorf("cron: expected 6 or 7 fields, got %d: seconds minutes hours day-of-month month day-of-week [year]", n)
	}
	return fields, nil
}

// bitset holds the values of a field; bit i is value i, except in year where it is 1970+i.
type bitset [4]uint64

func (b *bitset) add(i int) { b[i/64] |= 1 << (i % 64) }

// next returns the smallest member >= i, or -1.
func (b *bitset) next(i int) int {
	i = max(i, 0)
	for w := i / 64; w < len(b); w++ {
		word := b[w]
		if w == i/64 {
			word &= ^uint64(0) << (i % 64)
		}
		if word != 0 {
			return w*64 + bits.TrailingZeros64(word)
		}
	}
	return -1
}

// base is the value that bit 0 of the field's bitset stands for.
func (f field) base() int {
	if f.max >= 64 {
		return f.min
	}
	return 0
}

func (f field) all() bitset {
	var set bitset
	f.fill(&set, f.min, f.max, 1)
	return set
}

func (f field) errorf(text string, err error) error {
	return fmt.Errorf("cron: %s field %q: %w", f.name, text, err)
}

// parseMask parses a field whose values all fit in one word.
func (f field) parseMask(text string) (uint64, error) {
	set, err := f.parse(text)
	return set[0], err
}

// parse reads a list of *, values, ranges and steps.
func (f field) parse(text string) (bitset, error) {
	var set bitset
	if strings.Contains(text, "?") {
		return set, f.errorf(text, errors.New("? is allowed only in day-of-month or day-of-week"))
	}
	for item := range strings.SplitSeq(upper(text), ",") {
		if err := f.parseItem(item, &set); err != nil {
			return set, f.errorf(text, err)
		}
	}
	return set, nil
}

// parseItem reads one of *, */n, /n, a, a/n, a-b and a-b/n into set.
func (f field) parseItem(item string, set *bitset) error {
	body, stepText, hasStep := strings.Cut(item, "/")
	step := 1
	if hasStep {
		n, ok := number(stepText)
		switch {
		case !ok:
			return fmt.Errorf("step %q is not a number", stepText)
		case strings.ContainsFunc(body, isLetter):
			return f.stepAfterName(body, stepText)
		case n == 0:
			return errors.New("step 0 is refused: Quartz silently reads it as no step (*/0 as *, a/0 and a-b/0 as a alone)")
		case n > f.maxStep && strings.Contains(body, "-"):
			return fmt.Errorf("step %s out of range 1-%d (Quartz reads a range with a larger step as its first value alone; jobmesh refuses it)", stepText, f.maxStep)
		case n > f.maxStep:
			return fmt.Errorf("step %s out of range 1-%d", stepText, f.maxStep)
		}
		step = n
	}
	var lo, hi int
	switch {
	case body == "*" || body == "" && hasStep:
		lo, hi = f.min, f.max
	case body == "":
		return errors.New("missing value (Quartz skips an empty list item; jobmesh refuses it)")
	default:
		var isRange bool
		var err error
		if lo, hi, isRange, err = f.valueOrRange(body); err != nil {
			return err
		}
		if !isRange && hasStep {
			hi = f.max
		}
	}
	f.fill(set, lo, hi, step)
	return nil
}

// valueOrRange reads a or a-b. A range whose end is below its start wraps, except in years.
func (f field) valueOrRange(body string) (lo, hi int, isRange bool, err error) {
	first, last, isRange := strings.Cut(body, "-")
	if lo, err = f.value(first); err != nil {
		return 0, 0, false, err
	}
	if !isRange {
		return lo, lo, false, nil
	}
	if hi, err = f.value(last); err != nil {
		return 0, 0, false, err
	}
	if hi < lo && f.max >= 64 {
		return 0, 0, false, fmt.Errorf("range %d-%d runs backwards; years cannot wrap", lo, hi)
	}
	return lo, hi, true, nil
}

// stepAfterName explains why MON/2, MON-FRI/2 or JAN/3 is refused: Quartz reads a name and, for
// a range, the name after the dash, then drops the rest, so the step never applies.
func (f field) stepAfterName(body, stepText string) error {
	lo, hi, isRange, err := f.valueOrRange(body)
	if err != nil {
		return err
	}
	numeric := fmt.Sprintf("%d/%s", lo, stepText)
	if isRange {
		numeric = fmt.Sprintf("%d-%d/%s", lo, hi, stepText)
	}
	quartzReads := true // Quartz's reading of names: NAME or NAME-NAME, then nothing more
	for part := range strings.SplitSeq(upper(body), "-") {
		quartzReads = quartzReads && len(part) == 3 && slices.Contains(f.names, part)
	}
	if quartzReads {
		reads := body + " alone"
		if isRange {
			reads = "all of " + body
		}
		return fmt.Errorf("step after a name is refused: Quartz ignores /%s after %s and reads %s; write %s for that, or %s for a step", stepText, body, reads, body, numeric)
	}
	return fmt.Errorf("step after a name is refused (Quartz refuses it too); write %s", numeric)
}

func isLetter(r rune) bool { return 'A' <= r && r <= 'Z' || 'a' <= r && r <= 'z' }

// fill adds lo, lo+step, ... up to hi. When hi < lo the range wraps past max back to min, and
// the step carries across the wrap, as in Quartz: hours 22-2/3 is 22 and 1.
func (f field) fill(set *bitset, lo, hi, step int) {
	span := f.max - f.min + 1
	dist := hi - lo
	if dist < 0 {
		dist += span
	}
	for k := 0; k <= dist; k += step {
		v := lo + k
		if v > f.max {
			v -= span
		}
		set.add(v - f.base())
	}
}

// value reads a number or, in month and day-of-week, a name.
func (f field) value(tok string) (int, error) {
	if tok == "" {
		return 0, errors.New("missing value")
	}
	if n, ok := number(tok); ok {
		if n < f.min || n > f.max {
			if f.name == yearField.name {
				return 0, fmt.Errorf("value %s out of range %d-%d (Quartz accepts any year but never fires before 1970 or after about 100 years from its start)", tok, f.min, f.max)
			}
			return 0, fmt.Errorf("value %s out of range %d-%d", tok, f.min, f.max)
		}
		return n, nil
	}
	for i, name := range f.names {
		if tok == name {
			return f.min + i, nil
		}
	}
	want := fmt.Sprintf("a number %d-%d", f.min, f.max)
	if f.names != nil {
		want = fmt.Sprintf("%d-%d or %s-%s", f.min, f.max, f.names[0], f.names[len(f.names)-1])
	}
	if i := strings.IndexFunc(tok, func(r rune) bool { return r < '0' || r > '9' }); i > 0 {
		return 0, fmt.Errorf("invalid value %q; want %s (Quartz ignores what follows the number %s; jobmesh refuses it)", tok, want, tok[:i])
	}
	if len(tok) > 3 && slices.Contains(f.names, tok[:3]) {
		return 0, fmt.Errorf("invalid value %q; want %s (Quartz reads only the first three letters, %s; jobmesh refuses the rest)", tok, want, tok[:3])
	}
	return 0, fmt.Errorf("invalid value %q; want %s", tok, want)
}

// number reads a non-empty string of ASCII digits. Values too large for any field come back as
// 1<<20 so that they are reported as out of range rather than as not numbers.
func number(s string) (int, bool) {
	if s == "" {
		return 0, false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = min(n*10+int(c-'0'), 1<<20)
	}
	return n, true
}

// upper upper-cases ASCII letters only, so that no other character can turn into a name.
func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

// A dayKind says how the days of a month are chosen.
type dayKind uint8

const (
	unspecified    dayKind = iota // ?: the other day field chooses
	daysOfMonth                   // listed days of the month
	lastDay                       // L, L-n, LW, L-nW
	nearestWeekday                // nW
	daysOfWeek                    // listed days of the week
	lastWeekday                   // nL
	nthWeekday                    // n#m
)

// dayRule is what the day-of-month and day-of-week fields together say about days.
type dayRule struct {
	kind dayKind
	// days is the listed days: bits 1-31 for daysOfMonth, bits 1-7 (1 = Sunday) for daysOfWeek.
	days uint64
	// n is the offset of lastDay, the day of nearestWeekday and the weekday (1 = Sunday) of
	// lastWeekday and nthWeekday; nth is the m of n#m.
	n, nth int
	// weekday moves a lastDay to the nearest weekday (LW, L-nW).
	weekday bool
	// byFirst[w] is days of the week spread over a month whose 1st falls on weekday w (0 = Sunday),
	// bits 1-31; it saves working out the weekday of every day.
	byFirst [7]uint64
}

// parseDayOfMonth reads ?, L, L-n, LW, L-nW, nW or a list.
func parseDayOfMonth(text string) (dayRule, error) {
	up := upper(text)
	switch {
	case up == "?":
		return dayRule{kind: unspecified}, nil
	case strings.Contains(up, "?"):
		return dayRule{}, domField.errorf(text, errors.New("? must stand alone"))
	case !strings.ContainsAny(up, "LW"):
		set, err := domField.parse(text)
		return dayRule{kind: daysOfMonth, days: set[0]}, err
	case strings.Contains(up, ",") && strings.Contains(up, "L"):
		return dayRule{}, domField.errorf(text, errors.New("L cannot be combined with other days in a list (Quartz refuses it too)"))
	case strings.Contains(up, ","):
		return dayRule{}, domField.errorf(text, errors.New("W cannot be used in a list: Quartz would keep only the lowest day of the list, as nW, and ignore the rest; jobmesh refuses it"))
	case strings.HasPrefix(up, "L"):
		r := dayRule{kind: lastDay}
		rest := up[1:]
		rest, r.weekday = strings.CutSuffix(rest, "W")
		if rest == "" {
			return r, nil
		}
		offset, ok := strings.CutPrefix(rest, "-")
		if !ok {
			return dayRule{}, domField.errorf(text, fmt.Errorf("unexpected %q after L; want L, L-n, LW or L-nW", rest))
		}
		n, ok := number(offset)
		if !ok {
			return dayRule{}, domField.errorf(text, fmt.Errorf("offset %q after L- is not a number", offset))
		}
		if n > 30 {
			return dayRule{}, domField.errorf(text, fmt.Errorf("offset %s from the last day out of range 0-30", offset))
		}
		r.n = n
		return r, nil
	default:
		day, ok := strings.CutSuffix(up, "W")
		if _, isNumber := number(day); !ok || !isNumber {
			if ok && strings.Contains(day, "-") {
				if _, _, _, err := domField.valueOrRange(day); err == nil {
					return dayRule{}, domField.errorf(text, fmt.Errorf("W after a range: Quartz ignores the W and fires on every day of %s; jobmesh refuses it (W takes a single day, as in 15W)", day))
				}
			}
			return dayRule{}, domField.errorf(text, errors.New("W must follow a single day, as in 15W, or L, as in LW"))
		}
		n, err := domField.value(day)
		if err != nil {
			return dayRule{}, domField.errorf(text, err)
		}
		return dayRule{kind: nearestWeekday, n: n}, nil
	}
}

// parseDayOfWeek reads ?, L, nL, n#m or a list.
func parseDayOfWeek(text string) (dayRule, error) {
	up := upper(text)
	switch {
	case up == "?":
		return dayRule{kind: unspecified}, nil
	case strings.Contains(up, "?"):
		return dayRule{}, dowField.errorf(text, errors.New("? must stand alone"))
	case up == "L":
		return dayRule{kind: daysOfWeek, days: 1 << 7}, nil
	case !strings.ContainsAny(up, "L#"):
		set, err := dowField.parse(text)
		return dayRule{kind: daysOfWeek, days: set[0]}, err
	case strings.Contains(up, ",") && strings.Contains(up, "L"):
		return dayRule{}, dowField.errorf(text, errors.New("L cannot be combined with other days in a list (Quartz refuses it too)"))
	case strings.Count(up, "#") > 1:
		return dayRule{}, dowField.errorf(text, errors.New("only one n#m is allowed (Quartz refuses more too)"))
	case strings.Contains(up, ","):
		return dayRule{}, dowField.errorf(text, errors.New("# cannot be used in a list: Quartz would keep only the lowest day of the list, with that #m, and ignore the rest; jobmesh refuses it"))
	case strings.HasPrefix(up, "L"):
		return dayRule{}, dowField.errorf(text, fmt.Errorf("Quartz reads %s in day-of-week as L (Saturday) and ignores the rest; jobmesh refuses it: write L or 7 for Saturday, or nL for the last weekday n", text))
	case strings.Contains(up, "#"):
		day, nth, _ := strings.Cut(up, "#")
		if err := dowAfterRange(text, day, "#"+nth); err != nil {
			return dayRule{}, err
		}
		n, err := dowField.value(day)
		if err != nil {
			return dayRule{}, dowField.errorf(text, err)
		}
		m, ok := number(nth)
		if !ok || m < 1 || m > 5 {
			return dayRule{}, dowField.errorf(text, fmt.Errorf("# must be followed by 1-5, got %q", nth))
		}
		return dayRule{kind: nthWeekday, n: n, nth: m}, nil
	default:
		day, ok := strings.CutSuffix(up, "L")
		if !ok {
			return dayRule{}, dowField.errorf(text, errors.New("L must stand alone or follow a single day, as in 6L"))
		}
		if err := dowAfterRange(text, day, "L"); err != nil {
			return dayRule{}, err
		}
		n, err := dowField.value(day)
		if err != nil {
			return dayRule{}, dowField.errorf(text, err)
		}
		return dayRule{kind: lastWeekday, n: n}, nil
	}
}

// dowAfterRange refuses a range before # or L (1-5#2, MON-FRI#2, 2-6L), which Quartz reads as
// the plain range, dropping the suffix.
func dowAfterRange(text, day, suffix string) error {
	if !strings.Contains(day, "-") {
		return nil
	}
	if _, _, _, err := dowField.valueOrRange(day); err != nil {
		return dowField.errorf(text, err)
	}
	return dowField.errorf(text, fmt.Errorf("%s after a range: Quartz ignores it and fires on every day of %s; jobmesh refuses it (%s takes a single day, as in 6%s)", suffix, day, suffix, suffix))
}

// checkLateWeekday refuses 29W and 30W when February can match. Quartz looks up day 29 or 30 of
// February with a lenient calendar that lands in March; when March 1st is a Saturday it moves
// back to the last day of February, a Friday, and fires there, but only when its search started
// inside February: coming from January it steps over February. So the same expression fires on
// that Friday or not depending on when the job was started, which jobmesh cannot reproduce.
// (31W is consistent in Quartz and is followed exactly; see dayRule.in.)
func checkLateWeekday(day dayRule, months uint64, text string) error {
	if day.kind != nearestWeekday || day.n != 29 && day.n != 30 || months&(1<<2) == 0 {
		return nil
	}
	return domField.errorf(text, fmt.Errorf("%dW with February in the month field is refused: in a February without day %d Quartz fires on its last day or not, depending on when it started counting; leave FEB out of the month field (for example 1,3-12), or use LW for the last weekday", day.n, day.n))
}

// chooseDays keeps the day field that is not ?, as Quartz requires exactly one to be.
func chooseDays(dom, dow dayRule) (dayRule, error) {
	switch {
	case dom.kind == unspecified && dow.kind == unspecified:
		return dayRule{}, errors.New("cron: day-of-month and day-of-week cannot both be ?; specify one of them")
	case dom.kind != unspecified && dow.kind != unspecified:
		return dayRule{}, errors.New("cron: day-of-month and day-of-week cannot both be specified; use ? in one of them")
	case dom.kind != unspecified:
		return dom, nil
	}
	if dow.kind == daysOfWeek {
		for first := range dow.byFirst {
			for d := 1; d <= 31; d++ {
				if dow.days&(1<<((first+d-1)%7+1)) != 0 {
					dow.byFirst[first] |= 1 << d
				}
			}
		}
	}
	return dow, nil
}
