package schedule

import (
	"testing"
	"time"

	"github.com/robfig/cron/v3"
)

// DST changes used below (IANA tz database, 2024):
//
//	America/New_York    spring 03-10 02:00 EST -> 03:00 EDT; fall 11-03 02:00 EDT -> 01:00 EST
//	Europe/Berlin       spring 03-31 02:00 CET -> 03:00 CEST; fall 10-27 03:00 CEST -> 02:00 CET
//	Australia/Lord_Howe spring 10-06 02:00 -> 02:30 (+11); fall 04-07 02:00 -> 01:30 (+10:30)
//	America/Havana      spring 03-10 00:00 -> 01:00 (midnight is skipped); fall 11-03 01:00 -> 00:00
//	Pacific/Apia        2011-12-30 was skipped entirely (-10 -> +14)

func TestDST(t *testing.T) {
	tests := []struct {
		name, spec, tz, from string
		want                 []string
	}{
		// Fixed-time schedules: a skipped local time fires once, at the end of the gap...
		{"NY spring 02:30", "30 2 * * *", "America/New_York", "2024-03-09T12:00:00-05:00",
			[]string{"2024-03-10T03:00:00-04:00", "2024-03-11T02:30:00-04:00"}},
		{"Berlin spring 02:30", "30 2 * * *", "Europe/Berlin", "2024-03-30T12:00:00+01:00",
			[]string{"2024-03-31T03:00:00+02:00", "2024-04-01T02:30:00+02:00"}},
		{"NY spring 02:00 and 02:30 fire once together", "0,30 2 * * *", "America/New_York", "2024-03-09T12:00:00-05:00",
			[]string{"2024-03-10T03:00:00-04:00", "2024-03-11T02:00:00-04:00", "2024-03-11T02:30:00-04:00"}},
		{"NY spring skipped and existing time", "30 2,3 * * *", "America/New_York", "2024-03-10T00:00:00-05:00",
			[]string{"2024-03-10T03:00:00-04:00", "2024-03-10T03:30:00-04:00", "2024-03-11T02:30:00-04:00"}},
		{"NY spring from the fire time", "30 2 * * *", "America/New_York", "2024-03-10T03:00:00-04:00",
			[]string{"2024-03-11T02:30:00-04:00"}},
		{"NY spring from just before the gap", "30 2 * * *", "America/New_York", "2024-03-10T01:59:59.999-05:00",
			[]string{"2024-03-10T03:00:00-04:00"}},
		{"Lord Howe spring 02:00 (30-minute change)", "0 2 * * *", "Australia/Lord_Howe", "2024-10-05T12:00:00+10:30",
			[]string{"2024-10-06T02:30:00+11:00", "2024-10-07T02:00:00+11:00"}},
		{"Havana spring midnight", "@daily", "America/Havana", "2024-03-09T12:00:00-05:00",
			[]string{"2024-03-10T01:00:00-04:00", "2024-03-11T00:00:00-04:00"}},
		{"Apia skipped day", "0 9 * * *", "Pacific/Apia", "2011-12-29T12:00:00-10:00",
			[]string{"2011-12-31T00:00:00+14:00", "2011-12-31T09:00:00+14:00", "2012-01-01T09:00:00+14:00"}},
		// ... and a repeated local time fires once, in its first pass.
		{"NY fall 01:30", "30 1 * * *", "America/New_York", "2024-11-02T12:00:00-04:00",
			[]string{"2024-11-03T01:30:00-04:00", "2024-11-04T01:30:00-05:00"}},
		{"Berlin fall 02:30", "30 2 * * *", "Europe/Berlin", "2024-10-26T12:00:00+02:00",
			[]string{"2024-10-27T02:30:00+02:00", "2024-10-28T02:30:00+01:00"}},
		{"NY fall from the second pass", "30 1 * * *", "America/New_York", "2024-11-03T01:10:00-05:00",
			[]string{"2024-11-04T01:30:00-05:00"}},
		{"NY fall from the first fire", "30 1 * * *", "America/New_York", "2024-11-03T01:30:00-04:00",
			[]string{"2024-11-04T01:30:00-05:00"}},
		{"NY fall 01:00-02:00 range", "0 1,2 * * *", "America/New_York", "2024-11-03T00:00:00-04:00",
			[]string{"2024-11-03T01:00:00-04:00", "2024-11-03T02:00:00-05:00", "2024-11-04T01:00:00-05:00"}},
		{"NY fall 02:30 is unambiguous", "30 2 * * *", "America/New_York", "2024-11-02T12:00:00-04:00",
			[]string{"2024-11-03T02:30:00-05:00"}},
		{"Lord Howe fall 01:45", "45 1 * * *", "Australia/Lord_Howe", "2024-04-06T12:00:00+11:00",
			[]string{"2024-04-07T01:45:00+11:00", "2024-04-08T01:45:00+10:30"}},
		{"Havana fall midnight", "@daily", "America/Havana", "2024-11-02T12:00:00-04:00",
			[]string{"2024-11-03T00:00:00-04:00", "2024-11-04T00:00:00-05:00"}},
		// Wildcard schedules follow the wall clock: skipped times are skipped,
		// repeated ones fire twice, so hourly stays hourly in real time.
		{"NY spring hourly", "0 * * * *", "America/New_York", "2024-03-10T00:30:00-05:00",
			[]string{"2024-03-10T01:00:00-05:00", "2024-03-10T03:00:00-04:00", "2024-03-10T04:00:00-04:00"}},
		{"NY fall hourly", "0 * * * *", "America/New_York", "2024-11-03T00:30:00-04:00",
			[]string{"2024-11-03T01:00:00-04:00", "2024-11-03T01:00:00-05:00", "2024-11-03T02:00:00-05:00"}},
		{"Berlin spring @hourly", "@hourly", "Europe/Berlin", "2024-03-31T01:30:00+01:00",
			[]string{"2024-03-31T03:00:00+02:00", "2024-03-31T04:00:00+02:00"}},
		{"Berlin fall every 30 minutes", "*/30 * * * *", "Europe/Berlin", "2024-10-27T01:50:00+02:00",
			[]string{"2024-10-27T02:00:00+02:00", "2024-10-27T02:30:00+02:00", "2024-10-27T02:00:00+01:00",
				"2024-10-27T02:30:00+01:00", "2024-10-27T03:00:00+01:00"}},
		{"NY fall from the second pass, hourly", "30 * * * *", "America/New_York", "2024-11-03T01:10:00-05:00",
			[]string{"2024-11-03T01:30:00-05:00", "2024-11-03T02:30:00-05:00"}},
		{"NY spring minute wildcard in the skipped hour (Vixie: no catch-up)", "*/20 2 * * *", "America/New_York", "2024-03-09T12:00:00-05:00",
			[]string{"2024-03-11T02:00:00-04:00", "2024-03-11T02:20:00-04:00"}},
		{"Berlin fall minute wildcard in the repeated hour", "*/30 2 * * *", "Europe/Berlin", "2024-10-27T00:00:00+02:00",
			[]string{"2024-10-27T02:00:00+02:00", "2024-10-27T02:30:00+02:00", "2024-10-27T02:00:00+01:00", "2024-10-27T02:30:00+01:00",
				"2024-10-28T02:00:00+01:00"}},
		// @every is absolute time.
		{"NY spring @every 1h", "@every 1h", "America/New_York", "2024-03-10T00:00:00-05:00",
			[]string{"2024-03-10T01:00:00-05:00", "2024-03-10T03:00:00-04:00", "2024-03-10T04:00:00-04:00"}},
		{"NY fall @every 1h", "@every 1h", "America/New_York", "2024-11-03T00:00:00-04:00",
			[]string{"2024-11-03T01:00:00-04:00", "2024-11-03T01:00:00-05:00", "2024-11-03T02:00:00-05:00"}},
		{"Berlin spring @every 1h", "@every 1h", "Europe/Berlin", "2024-03-31T00:30:00+01:00",
			[]string{"2024-03-31T01:30:00+01:00", "2024-03-31T03:30:00+02:00", "2024-03-31T04:30:00+02:00"}},
		{"Berlin fall @every 1h", "@every 1h", "Europe/Berlin", "2024-10-27T01:30:00+02:00",
			[]string{"2024-10-27T02:30:00+02:00", "2024-10-27T02:30:00+01:00", "2024-10-27T03:30:00+01:00"}},
		{"Berlin @every 24h is not daily local", "@every 24h", "Europe/Berlin", "2024-03-30T12:00:00+01:00",
			[]string{"2024-03-31T13:00:00+02:00", "2024-04-01T13:00:00+02:00"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := mustParse(t, tt.spec, tt.tz)
			checkTimes(t, s.NextN(mustTime(t, tt.from), len(tt.want)), tt.want)
		})
	}
}

// TestRobfigDSTBehaviour records what robfig/cron/v3's SpecSchedule.Next does
// on DST days, the reason this package computes fire times itself: it skips a
// daily 02:30 job on the spring-forward day and runs a daily 01:30 job twice on
// the fall-back day. If this test fails after a robfig upgrade, revisit next.go.
func TestRobfigDSTBehaviour(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	next := func(spec string, from string, n int) []time.Time {
		sched, err := cron.ParseStandard(spec)
		if err != nil {
			t.Fatal(err)
		}
		sp := *sched.(*cron.SpecSchedule)
		sp.Location = ny
		var out []time.Time
		at := mustTime(t, from)
		for range n {
			at = sp.Next(at)
			out = append(out, at.UTC())
		}
		return out
	}
	checkTimes(t, next("30 2 * * *", "2024-03-09T12:00:00-05:00", 2),
		[]string{"2024-03-11T02:30:00-04:00", "2024-03-12T02:30:00-04:00"}) // nothing on 03-10
	checkTimes(t, next("30 1 * * *", "2024-11-02T12:00:00-04:00", 3),
		[]string{"2024-11-03T01:30:00-04:00", "2024-11-03T01:30:00-05:00", "2024-11-04T01:30:00-05:00"}) // twice on 11-03
}

// oracle computes the fire times of a cron schedule in (from, to] by brute
// force, minute by minute, straight from the rules in the package doc.
// Wildcard: every instant whose local time matches. Fixed-time: a matching
// local time fires at the first instant at which the local clock shows it or
// a later time (the clock's high-water mark passes it).
func oracle(s *Schedule, from, to time.Time) []time.Time {
	matches := func(c time.Time) bool {
		sp := s.cronSpec
		return sp.Month&(1<<uint(c.Month())) != 0 && dayMatches(sp, c.Year(), c.Month(), c.Day()) &&
			sp.Hour&(1<<uint(c.Hour())) != 0 && sp.Minute&(1<<uint(c.Minute())) != 0
	}
	var out []time.Time
	at := from.Add(-48 * time.Hour).Truncate(time.Minute)
	high, _ := civil(at.In(s.loc))
	for ; !at.After(to); at = at.Add(time.Minute) {
		c, _ := civil(at.In(s.loc))
		fire := false
		if s.wildcard {
			fire = matches(c)
		} else {
			for x := high.Add(time.Minute); !x.After(c); x = x.Add(time.Minute) {
				if matches(x) {
					fire = true
					break
				}
			}
		}
		if c.After(high) {
			high = c
		}
		if fire && at.After(from) {
			out = append(out, at)
		}
	}
	return out
}

// TestDSTOracle compares Next with the brute-force oracle around DST changes
// in zones with 1-hour, 30-minute, midnight and whole-day changes.
func TestDSTOracle(t *testing.T) {
	changes := []struct{ tz, at string }{
		{"America/New_York", "2024-03-10T07:00:00Z"},
		{"America/New_York", "2024-11-03T06:00:00Z"},
		{"Europe/Berlin", "2024-03-31T01:00:00Z"},
		{"Europe/Berlin", "2024-10-27T01:00:00Z"},
		{"Australia/Lord_Howe", "2024-04-06T15:00:00Z"},
		{"Australia/Lord_Howe", "2024-10-05T15:30:00Z"},
		{"America/Havana", "2024-03-10T05:00:00Z"},
		{"America/Havana", "2024-11-03T05:00:00Z"},
		{"America/Santiago", "2024-04-07T03:00:00Z"},
		{"America/Santiago", "2024-09-08T04:00:00Z"},
		{"Pacific/Apia", "2011-12-30T10:00:00Z"},
		{"Asia/Kathmandu", "1986-01-01T00:00:00Z"}, // +05:30 -> +05:45
	}
	specs := []string{
		"30 2 * * *", "30 1 * * *", "0 0 * * *", "59 23 * * *", "0,30 0-3 * * *", "45 1-3 * * *", "15 0 * * SUN",
		"*/15 * * * *", "0 * * * *", "30 * * * *", "*/20 2 * * *", "* 1 * * *", "7 */2 * * *", "@daily", "@hourly",
	}
	for _, ch := range changes {
		at := mustTime(t, ch.at)
		from, to := at.Add(-30*time.Hour), at.Add(30*time.Hour)
		for _, spec := range specs {
			s := mustParse(t, spec, ch.tz)
			want := oracle(s, from, to)
			var got []time.Time
			for x := s.Next(from); !x.After(to); x = s.Next(x) {
				got = append(got, x)
			}
			if len(got) != len(want) {
				t.Errorf("%s %s around %s: got %d fires, oracle %d\n got %v\nwant %v", ch.tz, spec, ch.at, len(got), len(want), got, want)
				continue
			}
			for i := range want {
				if !got[i].Equal(want[i]) {
					t.Errorf("%s %s around %s: fire %d: got %s, oracle %s", ch.tz, spec, ch.at, i,
						got[i].In(s.loc), want[i].In(s.loc))
				}
			}
			// Next depends only on the fire times: from any instant between
			// two fires it returns the later one.
			for i := 1; i < len(got); i++ {
				mid := got[i-1].Add(got[i].Sub(got[i-1]) / 2)
				if n := s.Next(mid); !n.Equal(got[i]) {
					t.Errorf("%s %s: Next(%s) = %s, want %s", ch.tz, spec, mid, n, got[i])
				}
				if n := s.Next(got[i].Add(-time.Nanosecond)); !n.Equal(got[i]) {
					t.Errorf("%s %s: Next(%s - 1ns) = %s", ch.tz, spec, got[i], n)
				}
			}
		}
	}
}

// TestDSTOracleSweep compares Next with the oracle around every offset change
// of many zones in 2024 (1985-2045 passed too: widen the years to
// re-check after changing next.go).
func TestDSTOracleSweep(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	const fromYear, toYear = 2024, 2025
	zones := []string{"America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "America/Havana", "America/Santiago",
		"Pacific/Apia", "Asia/Kathmandu", "Asia/Tehran", "Africa/Casablanca", "America/Sao_Paulo", "Europe/Moscow",
		"Australia/Sydney", "Antarctica/Troll", "Asia/Pyongyang", "America/St_Johns", "Pacific/Chatham", "Asia/Gaza"}
	specs := []string{
		"30 2 * * *", "30 1 * * *", "0 0 * * *", "59 23 * * *", "0,30 0-3 * * *", "45 1-3 * * *", "15 0 * * SUN",
		"*/15 * * * *", "0 * * * *", "30 * * * *", "*/20 2 * * *", "* 1 * * *", "7 */2 * * *", "0 0 1 * *", "0 12 * * *", "30 23 * * 6",
		"0 0-23/3 * * *", "* 0 * * *",
	}
	n := 0
	for _, z := range zones {
		loc, err := time.LoadLocation(z)
		if err != nil {
			t.Fatal(err)
		}
		x := time.Date(fromYear, 1, 1, 0, 0, 0, 0, time.UTC).In(loc)
		for x.Year() < toYear {
			end := zoneEnd(x)
			if end.IsZero() {
				break
			}
			_, o1 := x.Zone()
			_, o2 := end.Zone()
			x = end
			if o1 == o2 {
				continue
			}
			from, to := end.Add(-30*time.Hour), end.Add(30*time.Hour)
			for _, spec := range specs {
				s := mustParse(t, spec, z)
				want := oracle(s, from, to)
				var got []time.Time
				for y := s.Next(from); !y.IsZero() && !y.After(to); y = s.Next(y) {
					got = append(got, y)
				}
				n++
				if len(got) != len(want) {
					t.Errorf("%s %s around %s: got %d fires, oracle %d\n got %v\nwant %v", z, spec, end, len(got), len(want), got, want)
					continue
				}
				for i := range want {
					if !got[i].Equal(want[i]) {
						t.Errorf("%s %s around %s: fire %d: got %s, oracle %s", z, spec, end, i, got[i].In(loc), want[i].In(loc))
					}
				}
			}
		}
	}
	t.Logf("%d windows checked", n)
}

// TestLeapYearZoneBounds covers golang/go#81583: ZoneBounds returns an end
// before the instant in the last UTC day of a leap year served by a zone's
// TZ rule (here 2040). Next must not stall there.
func TestLeapYearZoneBounds(t *testing.T) {
	tests := []struct {
		spec, tz, from string
		want           []string
	}{
		{"59 23 31 12 *", "America/Santiago", "2039-06-01T00:00:00Z",
			[]string{"2039-12-31T23:59:00-03:00", "2040-12-31T23:59:00-03:00", "2041-12-31T23:59:00-03:00"}},
		{"@daily", "America/New_York", "2040-12-30T12:00:00-05:00",
			[]string{"2040-12-31T00:00:00-05:00", "2041-01-01T00:00:00-05:00", "2041-01-02T00:00:00-05:00"}},
		{"0 * * * *", "America/New_York", "2040-12-30T22:30:00-05:00",
			[]string{"2040-12-30T23:00:00-05:00", "2040-12-31T00:00:00-05:00", "2040-12-31T01:00:00-05:00"}},
		{"0 */6 * * *", "Europe/Berlin", "2040-12-31T00:30:00Z",
			[]string{"2040-12-31T06:00:00+01:00", "2040-12-31T12:00:00+01:00", "2040-12-31T18:00:00+01:00", "2041-01-01T00:00:00+01:00"}},
		{"0 0 1 1 *", "Australia/Lord_Howe", "2040-12-31T12:00:00Z",
			[]string{"2041-01-01T00:00:00+11:00", "2042-01-01T00:00:00+11:00"}},
	}
	for _, tt := range tests {
		t.Run(tt.spec+"|"+tt.tz, func(t *testing.T) {
			s := mustParse(t, tt.spec, tt.tz)
			checkTimes(t, s.NextN(mustTime(t, tt.from), len(tt.want)), tt.want)
		})
	}
}
