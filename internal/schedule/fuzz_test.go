package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// fuzzZones are the zones FuzzParse picks from: UTC, fixed offsets, 1-hour,
// 30-minute, midnight and whole-day DST changes, and a sub-hour offset change.
var fuzzZones = []string{
	"", "UTC", "Etc/GMT-14", "America/New_York", "Europe/Berlin", "Australia/Lord_Howe",
	"America/Havana", "America/Santiago", "Pacific/Apia", "Asia/Kathmandu",
}

// FuzzParse checks that Parse never panics and that accepted schedules behave:
// Next(t) is after t, NextN is strictly increasing, Next depends only on the
// set of fire times, and in UTC cron schedules agree with robfig's Next.
func FuzzParse(f *testing.F) {
	seeds := []string{
		// fields, ranges, steps, lists, names
		"* * * * *", "*/5 * * * *", "0 9 * * MON-FRI", "30 2 * * *", "30 1 * * *", "0 0 1 * *",
		"5/20 * * * *", "0-10/5 3 * * *", "1,15,30 */2 * * *", "0 0 * * 1-5/2", "0 0 ? * SUN", "0 0 1 ? *",
		"0 0 1 jan,JUL *", "0 0 1 FEB-apr/2 *", "0 0 16 * SUN", "0 0 */10 * *", "0 0 31 * *", "59 23 31 12 *",
		"0 0 29 2 *", "0 0 30 1,2 *", "0 9 */10 * 1-5", "0 0 29 2 */7", "0 0 1,* * 1", "0 0 31 2 */2", "*/1 * * * *", "00 09 * * *", "0 12 * * sat,sun", "*/7 */5 */3 */2 */2",
		// descriptors and @every
		"@hourly", "@daily", "@midnight", "@weekly", "@monthly", "@yearly", "@annually", "@DAILY", "@Every 90m",
		"@every 10s", "@every 1h30m", "@every 1.5h", "@every 8784h", "@every 5s", "@every 10.5s", "@every 0",
		"@every -1h", "@every 1d", "@every", "@every 1h 30m", "@fortnightly", "@daily 5", "@",
		// timezone prefixes (robfig panics on some)
		"TZ=", "CRON_TZ=", "TZ=Europe/Berlin 0 9 * * *", "CRON_TZ=UTC @daily", "TZ=Europe/Berlin", "TZ= 0 9 * * *",
		"TZ=Nowhere 0 0 * * *", "CRON_TZ=../../etc/passwd * * * * *",
		// never fires
		"0 0 30 2 *", "0 0 31 4 *", "0 0 31 4,6,9,11 *", "0 0 30,31 FEB *",
		// wrong
		"", " ", "*/5 * * *", "0 */5 * * * *", "0 0 9 * * ? 2024", "60 * * * *", "0 24 * * *", "0 0 * * 7",
		"5-1 * * * *", "*/0 * * * *", "1,,2 * * * *", "*-5 * * * *", "+5 * * * *", "-5 * * * *", "? * * * *",
		"0 0 L * *", "0 0 * * MON#2", "0 0 * * MONDAY", "a b c d e", "0\t9 * * *", "0 9 * * *\n", "0 9 * * *\x00",
		"0 9 * * \uff0a", strings.Repeat("1,", 130) + "1 * * * *",
	}
	for i, s := range seeds {
		f.Add(s, uint8(i), int64(1705313850+i*7919))
	}
	// DST days.
	f.Add("30 2 * * *", uint8(3), int64(1710000000))
	f.Add("30 1 * * *", uint8(3), int64(1730590000))
	f.Add("*/30 2 * * *", uint8(4), int64(1729980000))
	f.Add("0 9 * * *", uint8(8), int64(1325100000))

	robfigRef := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, spec string, zone uint8, sec int64) {
		tz := fuzzZones[int(zone)%len(fuzzZones)]
		s, err := Parse(spec, tz)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Reason == "" {
				t.Fatalf("Parse(%q, %q): error %v (%T) is not an *Error with a reason", spec, tz, err, err)
			}
			if strings.HasPrefix(e.Reason, "never fires") {
				// robfig agrees (with cronie's day rule, starDays): nothing
				// within its 5-year search.
				trimmed := strings.TrimSpace(spec)
				sched, perr := robfigParse(trimmed)
				if perr != nil {
					t.Fatalf("%q: refused as never firing but robfig refuses it: %v", spec, perr)
				}
				if cs, ok := sched.(*cron.SpecSchedule); ok {
					fields := strings.Fields(trimmed)
					starDays(cs, fields[2], fields[4])
				}
				if n := sched.Next(robfigRef); !n.IsZero() {
					t.Fatalf("%q: refused as never firing but robfig fires at %s", spec, n)
				}
			}
			return
		}
		if s.String() != strings.TrimSpace(spec) {
			t.Fatalf("String() = %q for %q", s.String(), spec)
		}
		if _, err := Parse(s.String(), tz); err != nil {
			t.Fatalf("re-parsing %q: %v", s.String(), err)
		}
		if s.cronSpec != nil {
			// robfig searches 5 years; a date on a given weekday can be further.
			if n := s.cronSpec.Next(robfigRef); n.IsZero() && !s.Next(robfigRef).After(robfigRef.AddDate(5, 0, 0)) {
				t.Fatalf("%q: accepted, fires at %s, but robfig never fires it", spec, s.Next(robfigRef))
			}
		}

		// An instant between 1970 and 2300, with a fraction of a second.
		const span = 330 * 365 * 24 * 3600
		sec %= span
		if sec < 0 {
			sec = -sec
		}
		after := time.Unix(sec, sec%1000*1_000_000)

		next := s.Next(after)
		if !next.After(after) {
			t.Fatalf("%q in %q: Next(%s) = %s, not after", spec, tz, after, next)
		}
		if next.Location() != time.UTC {
			t.Fatalf("Next returned location %v", next.Location())
		}
		times := s.NextN(after, 20)
		if len(times) != 20 || !times[0].Equal(next) {
			t.Fatalf("%q in %q: NextN(%s) = %v, Next = %s", spec, tz, after, times, next)
		}
		for i := 1; i < len(times); i++ {
			if !times[i].After(times[i-1]) {
				t.Fatalf("%q in %q: NextN(%s) not strictly increasing at %d: %v", spec, tz, after, i, times)
			}
		}
		if s.every > 0 {
			for i := 1; i < len(times); i++ {
				if d := times[i].Sub(times[i-1]); d != s.every {
					t.Fatalf("%q: interval %s between fires, want %s", spec, d, s.every)
				}
			}
			return
		}
		// Cron: a fire time's local time matches the schedule, except at the
		// end of a DST gap (fixed-time schedules catch up there).
		for _, at := range times {
			local := at.In(s.loc)
			c, _ := civil(local)
			sp := s.cronSpec
			match := sp.Month&(1<<uint(c.Month())) != 0 && dayMatches(sp, c.Year(), c.Month(), c.Day()) &&
				sp.Hour&(1<<uint(c.Hour())) != 0 && sp.Minute&(1<<uint(c.Minute())) != 0 && c.Second() == 0
			_, off := local.Zone()
			_, offBefore := at.Add(-time.Nanosecond).In(s.loc).Zone()
			if !match && (s.wildcard || off == offBefore) {
				t.Fatalf("%q in %q: fire time %s does not match", spec, tz, local)
			}
		}
		// Cron: Next depends only on the fire times.
		for i := 1; i < len(times); i++ {
			if n := s.Next(times[i].Add(-time.Nanosecond)); !n.Equal(times[i]) {
				t.Fatalf("%q in %q: Next(%s - 1ns) = %s", spec, tz, times[i], n)
			}
			mid := times[i-1].Add(times[i].Sub(times[i-1]) / 2)
			if n := s.Next(mid); !n.Equal(times[i]) {
				t.Fatalf("%q in %q: Next(%s) = %s, want %s", spec, tz, mid, n, times[i])
			}
		}
		// Without DST, robfig's Next gives the same times (when it finds one).
		if tz == "" || tz == "UTC" || tz == "Etc/GMT-14" {
			sp := *s.cronSpec
			sp.Location = s.loc
			at := after
			for i, want := range times {
				r := sp.Next(at)
				if r.IsZero() {
					break // beyond robfig's 5-year search
				}
				if !r.Equal(want) {
					t.Fatalf("%q in %q: fire %d after %s: robfig %s, we %s", spec, tz, i, at, r, want)
				}
				at = r
			}
		}
	})
}

// TestParseNeverPanics feeds inputs on which robfig's parser panics.
func TestParseNeverPanics(t *testing.T) {
	for _, spec := range []string{"TZ=", "CRON_TZ=", "TZ=UTC", "CRON_TZ=Europe/Berlin"} {
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("Parse(%q) panicked: %v", spec, r)
				}
			}()
			if _, err := Parse(spec, ""); err == nil {
				t.Errorf("Parse(%q) accepted", spec)
			}
		}()
		// robfigParse turns robfig's panic into an error.
		if _, err := robfigParse(spec); err == nil || !strings.Contains(err.Error(), "panicked") {
			if spec == "TZ=" || spec == "CRON_TZ=" {
				t.Errorf("robfigParse(%q) = %v, want a recovered panic", spec, err)
			}
		}
	}
	// Sanity: robfig really panics on "TZ=".
	func() {
		defer func() {
			if recover() == nil {
				t.Log("robfig no longer panics on \"TZ=\"")
			}
		}()
		_, _ = cron.ParseStandard("TZ=")
	}()
}
