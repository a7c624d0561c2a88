// Package schedule parses and evaluates job schedules. It is the one wrapper
// around the github.com/robfig/cron/v3 parser: every job schedule in sandpit is
// parsed by Parse, and fire times come from Schedule.Next.
//
// # Accepted schedules
//
// The syntax is robfig/cron/v3's "standard" spec (ParseStandard; see
// https://pkg.go.dev/github.com/robfig/cron/v3 and its doc.go, "CRON Expression
// Format" and "Predefined schedules"), restricted as follows:
//
//   - Five fields: minute (0-59), hour (0-23), day-of-month (1-31), month (1-12
//     or JAN-DEC) and day-of-week (0-6 or SUN-SAT, 0 is Sunday). A field is a
//     comma-separated list of elements; an element is "*", a value "5", a range
//     "1-5", any of these with a step "*/15", "1-30/5", or "5/15" (robfig: a
//     single value with a step runs to the end of the field, 5-59/15). Names are
//     three letters and case-insensitive (MON, mon, Jan). "?" is accepted as a
//     synonym of "*", alone, in the day-of-month and day-of-week fields only.
//   - The two day fields follow Vixie cron and cronie, not robfig: when both
//     are restricted (neither starts with "*" or "?"), a day matches if EITHER
//     matches; when either starts with "*" (a step such as "*/10" included),
//     both must match. cronie's crontab(5): "If both fields are restricted
//     (i.e., do not contain the "*" character), the command will be run when
//     either field matches the current time"; its parser (entry.c) sets
//     DOM_STAR and DOW_STAR from the field's first character. So
//     "0 9 */10 * 1-5" fires at 09:00 on the 1st, 11th, 21st and 31st when they
//     are weekdays. robfig treats "*/10" as restricted (its starBit is dropped
//     for steps above 1) and would fire it every weekday; Parse sets the star
//     marks from the text instead (starDays).
//   - Descriptors, case-insensitive: @yearly (= @annually, "0 0 1 1 *"),
//     @monthly ("0 0 1 * *"), @weekly ("0 0 * * 0"), @daily (= @midnight,
//     "0 0 * * *") and @hourly ("0 * * * *").
//   - "@every <duration>" ("@EVERY" too), where the duration is Go syntax
//     (time.ParseDuration: "90s", "15m", "1h30m"; units are case-sensitive).
//     It must be a whole number of seconds (robfig silently rounds fractions
//     down; we refuse them as confusing) between MinEvery and MaxEvery.
//
// Refused, with an *Error saying what is wrong and how to fix it: empty input,
// input over MaxSpecLen bytes, control or non-ASCII characters, "TZ=" and
// "CRON_TZ=" prefixes (the timezone is the job's own field, the tz argument of
// Parse; robfig's parser also panics on some of them), 6-field specs with
// seconds and any other field count, out-of-range values, backwards ranges,
// steps of 0 or larger than their field, empty list elements, unknown names,
// Quartz extensions (L, W, #), unknown descriptors, and schedules that never
// fire ("0 0 30 2 *": February never has a 30th). Leading and trailing white
// space is trimmed.
//
// The timezone is an IANA time zone database name (https://www.iana.org/time-zones),
// loaded with time.LoadLocation; "" means UTC. "Local" is refused: the daemon's
// zone is not the job's zone.
//
// # Daylight-saving time
//
// A cron schedule matches local wall-clock times (in the schedule's zone); DST
// makes some local times not exist (spring forward) and others happen twice
// (fall back). Following Vixie/ISC cron (cron(8), "Special considerations
// exist when the clock is changed by less than 3 hours..."), what happens then
// depends on whether the schedule is a wildcard or a fixed-time schedule:
//
//   - Wildcard schedules are those whose minute or hour field starts with "*"
//     (including steps such as "*/15"), and @hourly. They fire whenever the
//     local wall clock shows a matching minute: skipped local times are skipped
//     and repeated local times fire in both passes, so "0 * * * *" keeps firing
//     once every real hour, and "*/15 * * * *" every real 15 minutes, across
//     both changes.
//   - Every other cron schedule (e.g. "30 2 * * *", "0 9 * * MON-FRI", @daily)
//     is fixed-time: each matching local time fires exactly once, at the first
//     instant the local wall clock reaches or passes it. A time skipped by
//     spring-forward fires at the end of the gap: a daily 02:30 job fires at
//     03:00 local on the spring-forward day in America/New_York and
//     Europe/Berlin (once, together with any other skipped time). A time
//     repeated by fall-back fires only in its first pass: a daily 01:30 job in
//     New York fires at 01:30 EDT, not again at 01:30 EST.
//
// robfig's SpecSchedule.Next does neither: it skips a fixed 02:30 job on the
// spring-forward day and runs a fixed 01:30 job twice on the fall-back day (see
// TestRobfigDSTBehaviour). So this package uses robfig only to parse cron
// specs into bit sets and computes fire times itself (next.go); in UTC the two
// agree (checked by the tests and FuzzParse).
//
// "@every d" is a fixed interval of absolute time, independent of the zone and
// of DST: Next(t) is t, with its fractional second dropped, plus d (robfig's
// ConstantDelaySchedule). Callers keep a stable grid by passing the previous
// fire time (or the job's creation time), not the current time.
package schedule

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Limits of accepted schedules.
const (
	// MaxSpecLen is the longest accepted schedule, in bytes.
	MaxSpecLen = 256
	// MinEvery is the shortest "@every" interval.
	MinEvery = 10 * time.Second
	// MaxEvery is the longest "@every" interval (366 days); longer and
	// calendar-aligned intervals are cron schedules such as @yearly.
	MaxEvery = 366 * 24 * time.Hour
	// MaxNextN caps the n of NextN.
	MaxNextN = 1000
)

// Error is the error of Parse: the schedule or the timezone is not accepted.
type Error struct {
	// Spec is the schedule as given (trimmed, unless it was too long).
	Spec string
	// TZ is the timezone argument when it, not the schedule, is at fault; "" otherwise.
	TZ string
	// Reason says what is wrong and how to fix it (lowercase, no trailing period).
	Reason string
}

func (e *Error) Error() string {
	spec := e.Spec
	if len(spec) > 64 {
		spec = spec[:60] + "..."
	}
	return fmt.Sprintf("schedule %q: %s", spec, e.Reason)
}

// Schedule is a parsed schedule in a timezone. It is immutable and safe for
// concurrent use. Create it with Parse.
type Schedule struct {
	spec  string
	loc   *time.Location
	inner cron.Schedule // *cron.SpecSchedule, or cron.ConstantDelaySchedule for @every

	cronSpec *cron.SpecSchedule // nil for @every
	every    time.Duration      // > 0 for @every
	wildcard bool               // cron: minute or hour field starts with "*" (see package doc)
}

// String returns the schedule as given to Parse, trimmed.
func (s *Schedule) String() string { return s.spec }

// parser is robfig's standard parser (the same options as cron.ParseStandard):
// five fields, descriptors allowed. It is only ever called through robfigParse.
var parser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// robfigParse calls the robfig parser, turning a panic into an error.
func robfigParse(spec string) (sched cron.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			sched, err = nil, fmt.Errorf("cron parser panicked: %v", r)
		}
	}()
	return parser.Parse(spec)
}

// Parse parses spec, a schedule in the syntax described in the package
// documentation, in the IANA timezone tz ("" means UTC). The error, if any, is
// an *Error.
func Parse(spec, tz string) (*Schedule, error) {
	s, err := parseSpec(spec)
	if err != nil {
		return nil, err
	}
	loc, reason := loadLocation(tz)
	if reason != "" {
		return nil, &Error{Spec: s.spec, TZ: tz, Reason: reason}
	}
	s.loc = loc
	return s, nil
}

const (
	fieldNames    = "minute hour day-of-month month day-of-week"
	exampleCron   = `"*/5 * * * *"`
	acceptedForms = `a 5-field cron expression such as "0 9 * * MON-FRI", a descriptor such as "@daily", or "@every 1h"`
)

func parseSpec(raw string) (*Schedule, error) {
	if len(raw) > MaxSpecLen {
		return nil, &Error{Spec: raw, Reason: fmt.Sprintf("is too long (%d bytes); a schedule is at most %d bytes", len(raw), MaxSpecLen)}
	}
	spec := strings.TrimSpace(raw)
	fail := func(format string, args ...any) (*Schedule, error) {
		return nil, &Error{Spec: spec, Reason: fmt.Sprintf(format, args...)}
	}
	if spec == "" {
		return fail("is empty; use %s", acceptedForms)
	}
	for i := 0; i < len(spec); i++ {
		switch c := spec[i]; {
		case c < 0x20 || c == 0x7f:
			return fail("contains the control character %q at byte %d; separate fields with plain spaces", c, i)
		case c >= 0x80:
			return fail("contains a non-ASCII character at byte %d; schedules are plain ASCII", i)
		}
	}
	if upper := strings.ToUpper(spec); strings.HasPrefix(upper, "TZ=") || strings.HasPrefix(upper, "CRON_TZ=") {
		return fail("%s", tzPrefixReason(spec))
	}

	fields := strings.Fields(spec)
	var (
		s      *Schedule
		reason string
	)
	if strings.HasPrefix(spec, "@") {
		s, reason = parseDescriptor(fields)
	} else {
		s, reason = parseCron(fields)
	}
	if reason != "" {
		return fail("%s", reason)
	}
	s.spec = spec
	return s, nil
}

// tzPrefixReason explains a "TZ=zone spec" or "CRON_TZ=zone spec" input.
func tzPrefixReason(spec string) string {
	const base = `timezone prefixes ("TZ=", "CRON_TZ=") are not accepted in the schedule; the timezone is a separate field of the job`
	eq := strings.IndexByte(spec, '=')
	zone, rest, _ := strings.Cut(spec[eq+1:], " ")
	rest = strings.TrimSpace(rest)
	if zone == "" || rest == "" {
		return base + `: set the job's timezone (an IANA name such as "Europe/Berlin") and give the schedule without the prefix`
	}
	return fmt.Sprintf("%s: set the job's timezone to %q and the schedule to %q", base, zone, rest)
}

// descriptors maps robfig's descriptors to the 5-field spec they stand for.
var descriptors = map[string]string{
	"@yearly":   "0 0 1 1 *",
	"@annually": "0 0 1 1 *",
	"@monthly":  "0 0 1 * *",
	"@weekly":   "0 0 * * 0",
	"@daily":    "0 0 * * *",
	"@midnight": "0 0 * * *",
	"@hourly":   "0 * * * *",
}

const descriptorList = `@hourly, @daily (or @midnight), @weekly, @monthly, @yearly (or @annually), or "@every <duration>" such as "@every 15m"`

func parseDescriptor(fields []string) (*Schedule, string) {
	kw := strings.ToLower(fields[0])
	if kw == "@every" {
		return parseEvery(fields)
	}
	if _, ok := descriptors[kw]; !ok {
		return nil, fmt.Sprintf("unknown descriptor %q; use %s", fields[0], descriptorList)
	}
	if len(fields) > 1 {
		return nil, fmt.Sprintf("%s takes no arguments; remove %q", kw, strings.Join(fields[1:], " "))
	}
	inner, err := robfigParse(kw)
	if err != nil {
		return nil, "invalid descriptor: " + err.Error()
	}
	cs, ok := inner.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Sprintf("internal error: %s parsed to %T", kw, inner)
	}
	return &Schedule{inner: inner, cronSpec: cs, wildcard: kw == "@hourly"}, ""
}

func parseEvery(fields []string) (*Schedule, string) {
	switch {
	case len(fields) == 1:
		return nil, `"@every" needs a duration, e.g. "@every 15m" or "@every 1h30m"`
	case len(fields) > 2:
		return nil, fmt.Sprintf(`the duration of "@every" is one word without spaces, e.g. "@every 1h30m", not %q`, strings.Join(fields[1:], " "))
	}
	text := fields[1]
	d, err := time.ParseDuration(text)
	if err != nil {
		lower := strings.ToLower(text)
		switch {
		case strings.Trim(text, "0123456789.") == "":
			return nil, fmt.Sprintf("duration %q has no unit; add s, m or h, e.g. \"@every %sm\"", text, text)
		case strings.ContainsAny(lower, "dwy"):
			return nil, fmt.Sprintf(`duration %q: days, weeks and years are not duration units; use hours ("@every 24h") or a cron schedule ("@daily", "@weekly")`, text)
		default:
			return nil, fmt.Sprintf(`%q is not a duration; use Go duration syntax with units h, m, s, e.g. "@every 90s" or "@every 1h30m"`, text)
		}
	}
	switch {
	case d <= 0:
		return nil, fmt.Sprintf("the @every interval must be positive, got %q", text)
	case d%time.Second != 0:
		return nil, fmt.Sprintf("the @every interval %q is not a whole number of seconds; round it, e.g. \"@every %s\"", text, d.Round(time.Second))
	case d < MinEvery:
		return nil, fmt.Sprintf("the @every interval %s is shorter than the minimum %s", d, MinEvery)
	case d > MaxEvery:
		return nil, fmt.Sprintf("the @every interval %s is longer than the maximum %s (366 days); use a cron schedule such as \"@yearly\"", d, MaxEvery)
	}
	inner, err := robfigParse("@every " + text)
	if err != nil {
		return nil, "invalid @every interval: " + err.Error()
	}
	cd, ok := inner.(cron.ConstantDelaySchedule)
	if !ok || cd.Delay != d {
		return nil, fmt.Sprintf("internal error: %q parsed to %#v", "@every "+text, inner)
	}
	return &Schedule{inner: inner, every: d}, ""
}

func parseCron(fields []string) (*Schedule, string) {
	if len(fields) != 5 {
		return nil, fieldCountReason(fields)
	}
	if reason := validateFields(fields); reason != "" {
		return nil, reason
	}
	inner, err := robfigParse(strings.Join(fields, " "))
	if err != nil {
		return nil, "invalid cron expression: " + err.Error()
	}
	cs, ok := inner.(*cron.SpecSchedule)
	if !ok {
		return nil, fmt.Sprintf("internal error: cron expression parsed to %T", inner)
	}
	starDays(cs, fields[2], fields[4])
	if reason := neverFires(cs); reason != "" {
		return nil, reason
	}
	return &Schedule{inner: inner, cronSpec: cs, wildcard: isWildcard(fields[0]) || isWildcard(fields[1])}, ""
}

// starDays sets robfig's star mark (starBit) on the day-of-month and
// day-of-week bit sets exactly when their field starts with "*" or "?", as
// cronie does (see the package doc), so that robfig's day rule (both must
// match if either is starred, else either) becomes cronie's. robfig marks a
// field only for a plain "*" (or "*/1"), anywhere in a list.
func starDays(cs *cron.SpecSchedule, dom, dow string) {
	mark := func(set uint64, text string) uint64 {
		if strings.HasPrefix(text, "*") || strings.HasPrefix(text, "?") {
			return set | starBit
		}
		return set &^ starBit
	}
	cs.Dom, cs.Dow = mark(cs.Dom, dom), mark(cs.Dow, dow)
}

// isWildcard reports whether a minute or hour field makes the schedule a
// wildcard schedule in the sense of Vixie cron (MIN_STAR/HR_STAR): it starts with "*".
func isWildcard(field string) bool { return strings.HasPrefix(field, "*") }

func fieldCountReason(fields []string) string {
	n := len(fields)
	base := fmt.Sprintf("expected 5 fields (%s), got %d", fieldNames, n)
	switch {
	case n == 1:
		if _, ok := descriptors["@"+strings.ToLower(fields[0])]; ok {
			return fmt.Sprintf("%s; did you mean %q?", base, "@"+strings.ToLower(fields[0]))
		}
	case n == 2 && strings.EqualFold(fields[0], "every"):
		return fmt.Sprintf("%s; did you mean %q?", base, "@every "+fields[1])
	case n == 6:
		if validateFields(fields[1:]) == "" {
			return fmt.Sprintf("%s; a seconds field is not supported (the finest resolution is one minute): drop the first field, giving %q", base, strings.Join(fields[1:], " "))
		}
		if validateFields(fields[:5]) == "" {
			return fmt.Sprintf("%s; a schedule has no command part: remove %q", base, fields[5])
		}
		return base + "; 6-field specs with seconds are not supported; example: " + exampleCron
	case n == 7:
		return base + "; Quartz-style specs with seconds and year fields are not supported; example: " + exampleCron
	}
	return base + "; example: " + exampleCron
}

// field describes one cron field (robfig/cron/v3 spec.go bounds).
type field struct {
	name     string
	min, max int
	names    []string // names[i] is the value min+i; nil if the field takes no names
	question bool     // "?" allowed
	hint     string   // extra help for out-of-range values
}

var cronFields = [5]field{
	{name: "minute", min: 0, max: 59},
	{name: "hour", min: 0, max: 23},
	{name: "day-of-month", min: 1, max: 31, question: true},
	{name: "month", min: 1, max: 12, names: []string{"jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"}},
	{name: "day-of-week", min: 0, max: 6, question: true, names: []string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}, hint: " (0 or SUN is Sunday)"},
}

// validateFields checks the five fields more strictly than robfig does
// (robfig accepts "+5", "*-5", "1,,2" and steps beyond the field) and returns
// a reason for the first problem, or "".
func validateFields(fields []string) string {
	for i, f := range fields {
		if reason := cronFields[i].validate(f); reason != "" {
			return reason
		}
	}
	return ""
}

func (f field) validate(text string) string {
	for _, elem := range strings.Split(text, ",") {
		if reason := f.validateElem(text, elem); reason != "" {
			return reason
		}
	}
	return ""
}

func (f field) validateElem(text, elem string) string {
	where := fmt.Sprintf("%s field %q", f.name, text)
	if elem == "" {
		return fmt.Sprintf(`%s has an empty list element; separate values with single commas, e.g. "1,15"`, where)
	}
	if strings.ContainsAny(elem, "#") || (f.question && isQuartzDay(elem)) {
		return fmt.Sprintf(`%s: the Quartz extensions L, W and # are not supported; use plain values, ranges and lists`, where)
	}
	for _, c := range elem {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.ContainsRune("*?-/", c)) {
			return fmt.Sprintf(`%s: unexpected character %q; use digits, names, "*", ",", "-" and "/"`, where, c)
		}
	}
	base, step, hasStep := strings.Cut(elem, "/")
	if hasStep {
		if strings.Contains(step, "/") {
			return fmt.Sprintf(`%s: %q has more than one "/"`, where, elem)
		}
		if step == "" {
			return fmt.Sprintf(`%s: missing step after "/", e.g. "*/5"`, where)
		}
		n, ok := number(step)
		if !ok {
			return fmt.Sprintf(`%s: step %q is not a number`, where, step)
		}
		if span := f.max - f.min + 1; n < 1 || n > span {
			return fmt.Sprintf(`%s: step %s is out of range; a %s step is 1-%d`, where, step, f.name, span)
		}
	}
	switch base {
	case "*":
		return ""
	case "?":
		if !f.question {
			return fmt.Sprintf(`%s: "?" is only allowed in the day-of-month and day-of-week fields; use "*"`, where)
		}
		if hasStep {
			return fmt.Sprintf(`%s: "?" takes no step; use "*/N"`, where)
		}
		return ""
	case "":
		return fmt.Sprintf(`%s: missing value before "/"`, where)
	}
	lo, hi, isRange := strings.Cut(base, "-")
	if isRange && strings.Contains(hi, "-") {
		return fmt.Sprintf(`%s: %q has more than one "-"; negative numbers are not allowed`, where, elem)
	}
	a, reason := f.value(where, lo)
	if reason != "" {
		return reason
	}
	if !isRange {
		return ""
	}
	b, reason := f.value(where, hi)
	if reason != "" {
		return reason
	}
	if a > b {
		return fmt.Sprintf(`%s: range %q goes backwards; write the smaller value first, or split a wrap-around into a list such as "%s-%d,%d-%s"`, where, base, lo, f.max, f.min, hi)
	}
	return ""
}

// isQuartzDay reports Quartz day extensions: "L", "LW", "15W", "5L".
func isQuartzDay(elem string) bool {
	u := strings.ToUpper(elem)
	if u == "L" || u == "W" || u == "LW" {
		return true
	}
	n := strings.TrimRight(u, "LW")
	return n != u && n != "" && strings.Trim(n, "0123456789") == ""
}

// value parses a number or a name of the field.
func (f field) value(where, text string) (int, string) {
	if text == "" {
		return 0, fmt.Sprintf(`%s: missing value in a range; write ranges as "1-5"`, where)
	}
	if text == "*" || text == "?" {
		return 0, fmt.Sprintf(`%s: %q cannot be part of a range; use "*" alone or a range such as "1-5"`, where, text)
	}
	if n, ok := number(text); ok {
		if n < f.min || n > f.max {
			return 0, fmt.Sprintf("%s: %s is out of range; %s values are %d-%d%s", where, text, f.name, f.min, f.max, f.hint)
		}
		return n, ""
	}
	if strings.Trim(text, "0123456789") == "" {
		return 0, fmt.Sprintf("%s: %s is out of range; %s values are %d-%d%s", where, text, f.name, f.min, f.max, f.hint)
	}
	if f.names == nil {
		return 0, fmt.Sprintf("%s: %q is not a number; %s values are %d-%d", where, text, f.name, f.min, f.max)
	}
	for i, name := range f.names {
		if strings.EqualFold(text, name) {
			return f.min + i, ""
		}
	}
	return 0, fmt.Sprintf("%s: unknown name %q; use numbers %d-%d%s or three-letter names %s-%s",
		where, text, f.min, f.max, f.hint, strings.ToUpper(f.names[0]), strings.ToUpper(f.names[len(f.names)-1]))
}

// number parses 1 to 3 ASCII digits.
func number(s string) (int, bool) {
	if s == "" || len(s) > 3 || strings.Trim(s, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	return n, err == nil
}

// loadLocation loads an IANA zone, or returns a reason it is refused.
func loadLocation(tz string) (*time.Location, string) {
	if tz == "" {
		return time.UTC, ""
	}
	if strings.EqualFold(tz, "Local") {
		return nil, `timezone "Local" is not accepted: the daemon's zone is not the job's zone; use an IANA name such as "Europe/Berlin", or "" for UTC`
	}
	if len(tz) > 64 || strings.HasPrefix(tz, "/") || strings.HasSuffix(tz, "/") || strings.Contains(tz, "//") ||
		strings.TrimLeft(tz, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/_+-") != "" {
		return nil, fmt.Sprintf(`timezone %q is not an IANA time zone name; use a name such as "America/New_York" or "Europe/Berlin", or "" for UTC`, tz)
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, fmt.Sprintf(`timezone %q is not a known IANA time zone; use a name from the tz database such as "America/New_York" or "Europe/Berlin" (case matters), or "" for UTC`, tz)
	}
	return loc, ""
}
