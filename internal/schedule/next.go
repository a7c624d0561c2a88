package schedule

import (
	"fmt"
	"math/bits"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// This file computes fire times. Cron schedules are evaluated on "civil"
// (local wall-clock) times, represented as time.Time values in UTC whose
// fields are the local date and clock; a zone maps them to instants through
// its offset periods (time.Time.ZoneBounds). The matching rules are robfig's
// (cron/v3 spec.go: field bit sets, starBit, dayMatches); the DST rules are
// described in the package documentation.

// starBit is robfig's marker for a field given as "*" or "?" (spec.go).
const starBit = 1 << 63

const (
	// slotSearchYears bounds the search for a matching local time. Parse
	// refuses schedules that never fire, and the calendar repeats itself,
	// weekdays included, every 400 years: an accepted schedule fires within
	// any 400 years (February 29th on a Sunday, "0 0 29 2 */7", is up to 40
	// years apart: 2088 to 2128).
	slotSearchYears = 400
	// lookBack bounds the search for earlier offset periods whose local times
	// were later than now (fall-back); UTC offsets differ by at most ~26 hours.
	lookBack = 50 * time.Hour
	// maxPeriods bounds the walk over offset periods.
	maxPeriods = 1000
)

// maxDays is the longest length of each month (February: leap years).
var maxDays = [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}

// neverFires returns why a cron schedule never fires, or "". It decides
// exactly what robfig's Next approximates with its 5-year limit: with the day
// rule of dayMatches, a schedule whose two day fields are both restricted fires
// every week (a day matches if its weekday does). Otherwise both must match,
// and it fires iff some selected month has a selected day of month (February
// 29th exists in leap years): every date falls on every weekday in some year.
func neverFires(s *cron.SpecSchedule) string {
	if s.Dom&starBit == 0 && s.Dow&starBit == 0 {
		return ""
	}
	first := bits.TrailingZeros64(s.Dom &^ starBit)
	var months []string
	for m := 1; m <= 12; m++ {
		if s.Month&(1<<m) == 0 {
			continue
		}
		if first <= maxDays[m] {
			return ""
		}
		months = append(months, time.Month(m).String())
	}
	list := strings.Join(months, ", ")
	if i := strings.LastIndex(list, ", "); i >= 0 {
		list = list[:i] + " or" + list[i+1:]
	}
	return fmt.Sprintf("never fires: day %d (the earliest in the day-of-month field) does not exist in %s; check the day-of-month and month fields", first, list)
}

// Next returns the first fire time strictly after `after`, in UTC. Fire times
// of cron schedules are whole local minutes (or, for a fixed-time schedule,
// the end of a DST gap, see the package doc); those of "@every" are whole
// seconds. Next returns the zero Time if there is no fire time, which for an
// accepted schedule happens only near the end of time.Time's range, or for a
// wildcard schedule whose matching local times all fall in DST gaps.
func (s *Schedule) Next(after time.Time) time.Time {
	var t time.Time
	switch {
	case s.every > 0:
		t = s.inner.Next(after)
	case s.wildcard:
		t = s.nextWallClock(after)
	default:
		t = s.nextFirstReach(after)
	}
	if !t.After(after) {
		return time.Time{}
	}
	return t.UTC()
}

// NextN returns the next n fire times after `after`, in increasing order
// (fewer if Next runs out). n is capped at MaxNextN; n <= 0 gives nil.
func (s *Schedule) NextN(after time.Time, n int) []time.Time {
	if n <= 0 {
		return nil
	}
	n = min(n, MaxNextN)
	out := make([]time.Time, 0, n)
	for len(out) < n {
		after = s.Next(after)
		if after.IsZero() {
			break
		}
		out = append(out, after)
	}
	return out
}

// civil returns the local wall-clock time of t (which must be in the
// schedule's zone) as a UTC time, and t's UTC offset.
func civil(t time.Time) (time.Time, time.Duration) {
	_, off := t.Zone()
	o := time.Duration(off) * time.Second
	return t.UTC().Add(o), o
}

// ceilMinute rounds t up to a whole minute.
func ceilMinute(t time.Time) time.Time {
	f := t.Truncate(time.Minute)
	if f.Before(t) {
		f = f.Add(time.Minute)
	}
	return f
}

// zoneEnd returns the end of the offset period containing t (in t's zone; zero
// if the period never ends). The period may end early at a boundary where the
// offset does not change (ZoneBounds splits rule-based periods at year starts).
//
// It works around golang/go#81583 (open in Go 1.26): for an instant in the
// last UTC day of a leap year served by a zone's POSIX TZ rule (after its
// last explicit transition, e.g. Santiago or New York in 2040), ZoneBounds
// returns the start of the year plus 365 days as the end, which is before the
// instant. The offset does not change before the next UTC year, so that is
// the end used instead.
func zoneEnd(t time.Time) time.Time {
	_, end := t.ZoneBounds()
	if !end.IsZero() && !end.After(t) {
		end = time.Date(t.UTC().Year()+1, 1, 1, 0, 0, 0, 0, time.UTC).In(t.Location())
	}
	return end
}

// nextWallClock is Next for wildcard schedules: the first instant after
// `after` whose local wall clock shows a matching minute. Within one offset
// period local time is a shift of absolute time, so it searches each period
// from `after` on for the first matching local time inside it.
func (s *Schedule) nextWallClock(after time.Time) time.Time {
	t := after.In(s.loc)
	c, off := civil(t)
	from := c.Truncate(time.Minute).Add(time.Minute) // the first whole minute after t
	for range maxPeriods {
		slot, ok := s.nextSlot(from)
		if !ok {
			return time.Time{}
		}
		at := slot.Add(-off)
		end := zoneEnd(t)
		if end.IsZero() || at.Before(end) {
			return at
		}
		// No match in this period; continue with the next one.
		t = end
		c, off = civil(t)
		from = ceilMinute(c)
	}
	return time.Time{}
}

// nextFirstReach is Next for fixed-time schedules. Each matching local time c
// fires once, at the first instant at which the local wall clock shows c or
// later. So the next fire after `after` is the first matching local time that
// the wall clock has not reached by `after`: later than the local time of
// `after` and than every local time of an earlier offset period (after a
// fall-back, the clock has already been further).
func (s *Schedule) nextFirstReach(after time.Time) time.Time {
	t := after.In(s.loc)
	c, _ := civil(t)
	from := c.Truncate(time.Minute).Add(time.Minute)
	start, _ := t.ZoneBounds()
	for range maxPeriods {
		if start.IsZero() || after.Sub(start) > lookBack {
			break
		}
		prev := start.Add(-time.Nanosecond)
		_, prevOff := civil(prev)
		// The previous period's local times end (exclusively) at start+prevOff.
		if reached := ceilMinute(start.UTC().Add(prevOff)); reached.After(from) {
			from = reached
		}
		prevStart, _ := prev.ZoneBounds()
		if !prevStart.Before(start) {
			break
		}
		start = prevStart
	}
	slot, ok := s.nextSlot(from)
	if !ok {
		return time.Time{}
	}
	// Find the offset period in which the wall clock first shows slot or later.
	for range maxPeriods {
		_, off := civil(t)
		at := slot.Add(-off)
		end := zoneEnd(t)
		if end.IsZero() || at.Before(end) {
			if at.Before(t) {
				// slot does not exist locally (spring forward): the clock
				// passes it when this period starts.
				return t
			}
			return at
		}
		t = end
	}
	return time.Time{}
}

// nextSlot returns the first local time at or after from (a whole minute, in
// the civil representation) that matches the cron fields.
func (s *Schedule) nextSlot(from time.Time) (time.Time, bool) {
	sp := s.cronSpec
	y, mo, d := from.Date()
	h, mi := from.Hour(), from.Minute()
	limit := y + slotSearchYears
	nextDay := func() {
		h, mi = 0, 0
		if d++; d > daysIn(y, mo) {
			d = 1
			if mo++; mo > 12 {
				mo = 1
				y++
			}
		}
	}
	for y <= limit {
		if sp.Month&(1<<uint(mo)) == 0 {
			d, h, mi = 1, 0, 0
			if mo++; mo > 12 {
				mo = 1
				y++
			}
			continue
		}
		if !dayMatches(sp, y, mo, d) {
			nextDay()
			continue
		}
		nh, ok := nextBit(sp.Hour, h)
		if !ok {
			nextDay()
			continue
		}
		if nh != h {
			h, mi = nh, 0
		}
		nm, ok := nextBit(sp.Minute, mi)
		if !ok {
			if mi, h = 0, h+1; h > 23 {
				nextDay()
			}
			continue
		}
		return time.Date(y, mo, d, h, nm, 0, 0, time.UTC), true
	}
	return time.Time{}, false
}

// dayMatches is robfig's dayMatches (spec.go): if either day field is starred
// (starDays: it starts with "*" or "?"), both must match; otherwise either.
func dayMatches(sp *cron.SpecSchedule, y int, mo time.Month, d int) bool {
	domMatch := sp.Dom&(1<<uint(d)) != 0
	dowMatch := sp.Dow&(1<<uint(time.Date(y, mo, d, 0, 0, 0, 0, time.UTC).Weekday())) != 0
	if sp.Dom&starBit != 0 || sp.Dow&starBit != 0 {
		return domMatch && dowMatch
	}
	return domMatch || dowMatch
}

// nextBit returns the smallest value >= from in a field's bit set.
func nextBit(set uint64, from int) (int, bool) {
	m := set &^ starBit & (^uint64(0) << uint(from))
	if m == 0 {
		return 0, false
	}
	return bits.TrailingZeros64(m), true
}

func daysIn(y int, mo time.Month) int {
	return time.Date(y, mo+1, 0, 0, 0, 0, 0, time.UTC).Day()
}
