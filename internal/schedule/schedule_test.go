package schedule

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// from is the fixed instant of the tests: Monday 2024-01-15 10:17:30.5 UTC.
var from = time.Date(2024, 1, 15, 10, 17, 30, 500_000_000, time.UTC)

func mustParse(t testing.TB, spec, tz string) *Schedule {
	t.Helper()
	s, err := Parse(spec, tz)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", spec, tz, err)
	}
	return s
}

func mustTime(t testing.TB, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkTimes compares fire times with RFC 3339 strings (offsets allowed) and
// checks that they are in UTC.
func checkTimes(t *testing.T, got []time.Time, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d times %v, want %d %v", len(got), got, len(want), want)
		return
	}
	for i := range want {
		if w := mustTime(t, want[i]); !got[i].Equal(w) {
			t.Errorf("time %d: got %s, want %s", i, got[i], w)
		}
		if got[i].Location() != time.UTC {
			t.Errorf("time %d: location %v, want UTC", i, got[i].Location())
		}
	}
}

func TestAccepted(t *testing.T) {
	tests := []struct {
		spec string
		want []string // the next 3 fire times after `from`, UTC
	}{
		// Five fields.
		{"* * * * *", []string{"2024-01-15T10:18:00Z", "2024-01-15T10:19:00Z", "2024-01-15T10:20:00Z"}},
		{"*/15 * * * *", []string{"2024-01-15T10:30:00Z", "2024-01-15T10:45:00Z", "2024-01-15T11:00:00Z"}},
		{"*/1 * * * *", []string{"2024-01-15T10:18:00Z", "2024-01-15T10:19:00Z", "2024-01-15T10:20:00Z"}},
		{"5 * * * *", []string{"2024-01-15T11:05:00Z", "2024-01-15T12:05:00Z", "2024-01-15T13:05:00Z"}},
		{"5/20 * * * *", []string{"2024-01-15T10:25:00Z", "2024-01-15T10:45:00Z", "2024-01-15T11:05:00Z"}},
		{"0-10/5 3 * * *", []string{"2024-01-16T03:00:00Z", "2024-01-16T03:05:00Z", "2024-01-16T03:10:00Z"}},
		{"30 8-10 * * *", []string{"2024-01-15T10:30:00Z", "2024-01-16T08:30:00Z", "2024-01-16T09:30:00Z"}},
		{"0 9 * * *", []string{"2024-01-16T09:00:00Z", "2024-01-17T09:00:00Z", "2024-01-18T09:00:00Z"}},
		{"00 09 * * *", []string{"2024-01-16T09:00:00Z", "2024-01-17T09:00:00Z", "2024-01-18T09:00:00Z"}},
		{"0  9\u0020 *  * * ", []string{"2024-01-16T09:00:00Z", "2024-01-17T09:00:00Z", "2024-01-18T09:00:00Z"}},
		{"0 9 * * *\n", []string{"2024-01-16T09:00:00Z", "2024-01-17T09:00:00Z", "2024-01-18T09:00:00Z"}},
		{"0 9 * * MON-FRI", []string{"2024-01-16T09:00:00Z", "2024-01-17T09:00:00Z", "2024-01-18T09:00:00Z"}},
		{"0 9 * * mon,wed,Fri", []string{"2024-01-17T09:00:00Z", "2024-01-19T09:00:00Z", "2024-01-22T09:00:00Z"}},
		{"0 0 * * 1-5/2", []string{"2024-01-17T00:00:00Z", "2024-01-19T00:00:00Z", "2024-01-22T00:00:00Z"}},
		{"0 0 * * 0", []string{"2024-01-21T00:00:00Z", "2024-01-28T00:00:00Z", "2024-02-04T00:00:00Z"}},
		{"0 0 ? * SUN", []string{"2024-01-21T00:00:00Z", "2024-01-28T00:00:00Z", "2024-02-04T00:00:00Z"}},
		{"0 12 15 * *", []string{"2024-01-15T12:00:00Z", "2024-02-15T12:00:00Z", "2024-03-15T12:00:00Z"}},
		{"0 0 1 * *", []string{"2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z", "2024-04-01T00:00:00Z"}},
		{"0 0 1 jan,JUL *", []string{"2024-07-01T00:00:00Z", "2025-01-01T00:00:00Z", "2025-07-01T00:00:00Z"}},
		{"0 0 1 FEB-apr/2 *", []string{"2024-02-01T00:00:00Z", "2024-04-01T00:00:00Z", "2025-02-01T00:00:00Z"}},
		{"0 0 */10 * *", []string{"2024-01-21T00:00:00Z", "2024-01-31T00:00:00Z", "2024-02-01T00:00:00Z"}},
		{"0 0 31 * *", []string{"2024-01-31T00:00:00Z", "2024-03-31T00:00:00Z", "2024-05-31T00:00:00Z"}},
		{"0 0 29 2 *", []string{"2024-02-29T00:00:00Z", "2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z"}},
		{"0 0 30 1,2 *", []string{"2024-01-30T00:00:00Z", "2025-01-30T00:00:00Z", "2026-01-30T00:00:00Z"}},
		{"59 23 31 12 *", []string{"2024-12-31T23:59:00Z", "2025-12-31T23:59:00Z", "2026-12-31T23:59:00Z"}},
		// Both day fields restricted: either matches (the 16th is a Tuesday).
		{"0 0 16 * SUN", []string{"2024-01-16T00:00:00Z", "2024-01-21T00:00:00Z", "2024-01-28T00:00:00Z"}},
		// A day field starting with "*" (a step too) is unrestricted, so both
		// must match (cronie's crontab(5)): the 1st, 11th, 21st and 31st when
		// they are weekdays, not every weekday (robfig's reading).
		{"0 9 */10 * 1-5", []string{"2024-01-31T09:00:00Z", "2024-02-01T09:00:00Z", "2024-02-21T09:00:00Z"}},
		{"0 0 1 * */2", []string{"2024-02-01T00:00:00Z", "2024-06-01T00:00:00Z", "2024-08-01T00:00:00Z"}},
		{"0 0 ? * 1-5/2", []string{"2024-01-17T00:00:00Z", "2024-01-19T00:00:00Z", "2024-01-22T00:00:00Z"}},
		// A field that only contains "*" later is restricted (cronie reads the
		// first character): "1,*" is every day, so every day matches.
		{"0 0 1,* * 1", []string{"2024-01-16T00:00:00Z", "2024-01-17T00:00:00Z", "2024-01-18T00:00:00Z"}},
		// February 29th on a Sunday: 28 years apart, 40 across 2100.
		{"0 0 29 2 */7", []string{"2032-02-29T00:00:00Z", "2060-02-29T00:00:00Z", "2088-02-29T00:00:00Z"}},
		// Descriptors.
		{"@hourly", []string{"2024-01-15T11:00:00Z", "2024-01-15T12:00:00Z", "2024-01-15T13:00:00Z"}},
		{"@daily", []string{"2024-01-16T00:00:00Z", "2024-01-17T00:00:00Z", "2024-01-18T00:00:00Z"}},
		{"@midnight", []string{"2024-01-16T00:00:00Z", "2024-01-17T00:00:00Z", "2024-01-18T00:00:00Z"}},
		{"@DAILY", []string{"2024-01-16T00:00:00Z", "2024-01-17T00:00:00Z", "2024-01-18T00:00:00Z"}},
		{"@weekly", []string{"2024-01-21T00:00:00Z", "2024-01-28T00:00:00Z", "2024-02-04T00:00:00Z"}},
		{"@monthly", []string{"2024-02-01T00:00:00Z", "2024-03-01T00:00:00Z", "2024-04-01T00:00:00Z"}},
		{"@yearly", []string{"2025-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"}},
		{"@Annually", []string{"2025-01-01T00:00:00Z", "2026-01-01T00:00:00Z", "2027-01-01T00:00:00Z"}},
		// @every: from `from`, its fraction of a second dropped.
		{"@every 10s", []string{"2024-01-15T10:17:40Z", "2024-01-15T10:17:50Z", "2024-01-15T10:18:00Z"}},
		{"@every 1h30m", []string{"2024-01-15T11:47:30Z", "2024-01-15T13:17:30Z", "2024-01-15T14:47:30Z"}},
		{"@EVERY 90m", []string{"2024-01-15T11:47:30Z", "2024-01-15T13:17:30Z", "2024-01-15T14:47:30Z"}},
		{"@every 1.5h", []string{"2024-01-15T11:47:30Z", "2024-01-15T13:17:30Z", "2024-01-15T14:47:30Z"}},
		{"@every 10000ms", []string{"2024-01-15T10:17:40Z", "2024-01-15T10:17:50Z", "2024-01-15T10:18:00Z"}},
		{"@every 8784h", []string{"2025-01-15T10:17:30Z", "2026-01-16T10:17:30Z", "2027-01-17T10:17:30Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			s := mustParse(t, tt.spec, "")
			if got, want := s.String(), strings.TrimSpace(tt.spec); got != want {
				t.Errorf("String() = %q, want %q", got, want)
			}
			if s.loc != time.UTC {
				t.Errorf("location %v, want UTC", s.loc)
			}
			got := s.NextN(from, 3)
			checkTimes(t, got, tt.want)
			if n := s.Next(from); !n.Equal(got[0]) {
				t.Errorf("Next = %s, NextN[0] = %s", n, got[0])
			}
			// The same instant in another zone gives the same times.
			checkTimes(t, s.NextN(from.In(time.FixedZone("X", -7*3600)), 3), tt.want)
		})
	}
}

func TestRefused(t *testing.T) {
	tests := []struct {
		spec, tz string
		want     string // a substring of the error
	}{
		// Input hygiene.
		{"", "", "is empty"},
		{" \t\n ", "", "is empty"},
		{strings.Repeat("1,", 130) + "1 * * * *", "", "is too long (269 bytes); a schedule is at most 256 bytes"},
		{"0\t9 * * *", "", "control character '\\t' at byte 1"},
		{"0 9 * * *\n0 10 * * *", "", "control character '\\n'"},
		{"0 9 * * *\x00", "", "control character '\\x00'"},
		{"0 9 * * *\x7f", "", "control character"},
		{"0 9 * * \uff0a", "", "non-ASCII character at byte 8"},
		{"@every 10000000µs", "", "non-ASCII"},
		// Timezone prefixes (robfig panics on "TZ=" and "CRON_TZ=").
		{"TZ=", "", `timezone prefixes ("TZ=", "CRON_TZ=") are not accepted`},
		{"CRON_TZ=", "", "the timezone is a separate field of the job"},
		{"TZ=Europe/Berlin", "", "the timezone is a separate field of the job"},
		{"CRON_TZ= 0 9 * * *", "", "timezone prefixes"},
		{"TZ=Europe/Berlin 0 9 * * *", "", `set the job's timezone to "Europe/Berlin" and the schedule to "0 9 * * *"`},
		{"CRON_TZ=America/New_York @daily", "", `set the job's timezone to "America/New_York" and the schedule to "@daily"`},
		{"tz=Nowhere/Land 0 9 * * *", "", "timezone prefixes"},
		{"cron_tz=UTC 0 9 * * *", "Europe/Berlin", "timezone prefixes"},
		// Field counts.
		{"*/5 * * *", "", "expected 5 fields (minute hour day-of-month month day-of-week), got 4; example: \"*/5 * * * *\""},
		{"*", "", "got 1"},
		{"0 */5 * * * *", "", `got 6; a seconds field is not supported (the finest resolution is one minute): drop the first field, giving "*/5 * * * *"`},
		{"0 0 9 * * ? 2024", "", "got 7; Quartz-style specs with seconds and year fields are not supported"},
		{"0 9 * * * /bin/backup", "", `a schedule has no command part: remove "/bin/backup"`},
		{"99 99 * * * *", "", "got 6; 6-field specs with seconds are not supported"},
		{"daily", "", `did you mean "@daily"?`},
		{"every 5m", "", `did you mean "@every 5m"?`},
		// Out of range.
		{"60 * * * *", "", `minute field "60": 60 is out of range; minute values are 0-59`},
		{"0 24 * * *", "", `hour field "24": 24 is out of range; hour values are 0-23`},
		{"0 0 0 * *", "", "day-of-month values are 1-31"},
		{"0 0 32 * *", "", "day-of-month values are 1-31"},
		{"0 0 * 0 *", "", "month values are 1-12"},
		{"0 0 * 13 *", "", "month values are 1-12"},
		{"0 0 * * 7", "", "day-of-week values are 0-6 (0 or SUN is Sunday)"},
		{"0 0 * * 1-7", "", "0 or SUN is Sunday"},
		{"1000 * * * *", "", "1000 is out of range"},
		{"99999999999999999999 * * * *", "", "is out of range"},
		{"0 0-24 * * *", "", "24 is out of range"},
		// Ranges, steps, lists.
		{"5-1 * * * *", "", `range "5-1" goes backwards; write the smaller value first, or split a wrap-around into a list such as "5-59,0-1"`},
		{"0 22-2 * * *", "", `"22-23,0-2"`},
		{"0 0 * * FRI-MON", "", "goes backwards"},
		{"*/0 * * * *", "", "step 0 is out of range; a minute step is 1-60"},
		{"*/61 * * * *", "", "step 61 is out of range"},
		{"0 */25 * * *", "", "a hour step is 1-24"},
		{"*/5/5 * * * *", "", `more than one "/"`},
		{"5/ * * * *", "", `missing step after "/"`},
		{"/5 * * * *", "", `missing value before "/"`},
		{"*/x * * * *", "", `step "x" is not a number`},
		{"1,,2 * * * *", "", "empty list element"},
		{",1 * * * *", "", "empty list element"},
		{"1, * * * *", "", "empty list element"},
		{"*-5 * * * *", "", `"*" cannot be part of a range`},
		{"1-* * * * *", "", `"*" cannot be part of a range`},
		{"-5 * * * *", "", "missing value in a range"},
		{"5- * * * *", "", "missing value in a range"},
		{"1-2-3 * * * *", "", `more than one "-"`},
		{"+5 * * * *", "", `unexpected character '+'`},
		{"0 9 * * MON;TUE", "", `unexpected character ';'`},
		{"? * * * *", "", `"?" is only allowed in the day-of-month and day-of-week fields`},
		{"0 0 ?/2 * *", "", `"?" takes no step`},
		// Names.
		{"0 0 * * MONDAY", "", `unknown name "MONDAY"; use numbers 0-6 (0 or SUN is Sunday) or three-letter names SUN-SAT`},
		{"0 0 * FOO *", "", `unknown name "FOO"; use numbers 1-12 or three-letter names JAN-DEC`},
		{"0 0 MON * *", "", `day-of-month field "MON": "MON" is not a number; day-of-month values are 1-31`},
		{"a b c d e", "", `minute field "a": "a" is not a number`},
		{"0 0 * JAN-13 *", "", "13 is out of range"},
		// Quartz extensions.
		{"0 0 L * *", "", "Quartz extensions"},
		{"0 0 15W * *", "", "Quartz extensions"},
		{"0 0 LW * *", "", "Quartz extensions"},
		{"0 0 * * 5L", "", "Quartz extensions"},
		{"0 0 * * MON#2", "", "Quartz extensions"},
		// Never fires.
		{"0 0 30 2 *", "", "never fires: day 30 (the earliest in the day-of-month field) does not exist in February"},
		{"0 0 31 2 */2", "", "never fires: day 31 (the earliest in the day-of-month field) does not exist in February"},
		{"0 0 31 4 *", "", "does not exist in April"},
		{"0 0 31 4,6,9,11 *", "", "does not exist in April, June, September or November"},
		{"0 0 30,31 FEB *", "", "never fires: day 30"},
		{"0 0 31 2-4/2 ?", "", "does not exist in February or April"},
		// Descriptors.
		{"@", "", `unknown descriptor "@"`},
		{"@fortnightly", "", `unknown descriptor "@fortnightly"; use @hourly, @daily (or @midnight), @weekly, @monthly, @yearly (or @annually), or "@every <duration>"`},
		{"@reboot", "", "unknown descriptor"},
		{"@daily 5", "", `@daily takes no arguments; remove "5"`},
		{"@every", "", `"@every" needs a duration`},
		{"@every 1h 30m", "", "one word without spaces"},
		{"@every 5", "", `duration "5" has no unit; add s, m or h`},
		{"@every 1d", "", "days, weeks and years are not duration units"},
		{"@every 1w", "", "days, weeks and years"},
		{"@every abc", "", `"abc" is not a duration`},
		{"@every 1H", "", "is not a duration"},
		{"@every 0s", "", "must be positive"},
		{"@every 0", "", "must be positive"},
		{"@every -1h", "", "must be positive"},
		{"@every 5s", "", "the @every interval 5s is shorter than the minimum 10s"},
		{"@every 9s999ms", "", "not a whole number of seconds"},
		{"@every 10.5s", "", `not a whole number of seconds; round it, e.g. "@every 11s"`},
		{"@every 1500ms", "", "not a whole number of seconds"},
		{"@every 8785h", "", "longer than the maximum 8784h0m0s"},
		{"@every 3000000h", "", "is not a duration"}, // overflows time.Duration
		// Timezones.
		{"0 9 * * *", "Local", `timezone "Local" is not accepted: the daemon's zone is not the job's zone`},
		{"0 9 * * *", "local", `timezone "Local" is not accepted`},
		{"0 9 * * *", "Mars/Olympus_Mons", `timezone "Mars/Olympus_Mons" is not a known IANA time zone`},
		{"0 9 * * *", "../../etc/passwd", "is not an IANA time zone name"},
		{"0 9 * * *", "/etc/localtime", "is not an IANA time zone name"},
		{"0 9 * * *", "Europe/Berlin ", "is not an IANA time zone name"},
		{"0 9 * * *", "Europe/Berlin\n", "is not an IANA time zone name"},
		{"0 9 * * *", strings.Repeat("A", 65), "is not an IANA time zone name"},
		{"0 9 * * *", "+05:00", "is not an IANA time zone name"},
	}
	for _, tt := range tests {
		t.Run(tt.spec+"|"+tt.tz, func(t *testing.T) {
			s, err := Parse(tt.spec, tt.tz)
			if err == nil {
				t.Fatalf("accepted as %q in %v", s, s.loc)
			}
			msg := err.Error()
			if !strings.Contains(msg, tt.want) {
				t.Errorf("error %q\ndoes not contain %q", msg, tt.want)
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error %T is not *Error", err)
			}
			if !strings.HasPrefix(msg, "schedule \"") {
				t.Errorf("error %q does not start with the schedule", msg)
			}
			if r := e.Reason; r == "" || r[0] >= 'A' && r[0] <= 'Z' || strings.HasSuffix(r, ".") {
				t.Errorf("reason %q is not lowercase without a trailing period", r)
			}
			if isTZ := tt.tz != "" && !strings.Contains(tt.want, "timezone prefixes"); (e.TZ != "") != isTZ {
				t.Errorf("Error.TZ = %q, want set: %v", e.TZ, isTZ)
			}
			if len(msg) > 400 {
				t.Errorf("error is %d bytes long", len(msg))
			}
		})
	}
}

// TestErrorExact pins the full text of some errors.
func TestErrorExact(t *testing.T) {
	for spec, want := range map[string]string{
		"*/5 * * *":  `schedule "*/5 * * *": expected 5 fields (minute hour day-of-month month day-of-week), got 4; example: "*/5 * * * *"`,
		"0 0 30 2 *": `schedule "0 0 30 2 *": never fires: day 30 (the earliest in the day-of-month field) does not exist in February; check the day-of-month and month fields`,
		"TZ=Europe/Berlin 0 9 * * *": `schedule "TZ=Europe/Berlin 0 9 * * *": timezone prefixes ("TZ=", "CRON_TZ=") are not accepted in the schedule; ` +
			`the timezone is a separate field of the job: set the job's timezone to "Europe/Berlin" and the schedule to "0 9 * * *"`,
	} {
		if _, err := Parse(spec, ""); err == nil || err.Error() != want {
			t.Errorf("Parse(%q):\n got %v\nwant %s", spec, err, want)
		}
	}
	long := strings.Repeat("x", 300)
	_, err := Parse(long, "")
	if want := `schedule "` + strings.Repeat("x", 60) + `...": is too long (300 bytes); a schedule is at most 256 bytes`; err == nil || err.Error() != want {
		t.Errorf("long spec: got %v", err)
	}
}

func TestNextN(t *testing.T) {
	s := mustParse(t, "*/20 * * * *", "")
	if got := s.NextN(from, 0); got != nil {
		t.Errorf("NextN(0) = %v", got)
	}
	if got := s.NextN(from, -3); got != nil {
		t.Errorf("NextN(-3) = %v", got)
	}
	checkTimes(t, s.NextN(from, 4), []string{"2024-01-15T10:20:00Z", "2024-01-15T10:40:00Z", "2024-01-15T11:00:00Z", "2024-01-15T11:20:00Z"})
	if got := s.NextN(from, MaxNextN+5); len(got) != MaxNextN {
		t.Errorf("NextN(MaxNextN+5) returned %d times", len(got))
	}
	// Next is strictly after: from a fire time, the next one.
	fire := mustTime(t, "2024-01-15T10:20:00Z")
	checkTimes(t, s.NextN(fire, 1), []string{"2024-01-15T10:40:00Z"})
	checkTimes(t, s.NextN(fire.Add(-time.Nanosecond), 1), []string{"2024-01-15T10:20:00Z"})
}

func TestTimezones(t *testing.T) {
	tests := []struct {
		spec, tz, loc string
		want          []string
	}{
		{"0 9 * * *", "", "UTC", []string{"2024-01-16T09:00:00Z", "2024-01-17T09:00:00Z"}},
		{"0 9 * * *", "UTC", "UTC", []string{"2024-01-16T09:00:00Z", "2024-01-17T09:00:00Z"}},
		{"0 9 * * *", "Asia/Tokyo", "Asia/Tokyo", []string{"2024-01-16T09:00:00+09:00", "2024-01-17T09:00:00+09:00"}},
		{"0 9 * * *", "Asia/Kathmandu", "Asia/Kathmandu", []string{"2024-01-16T09:00:00+05:45", "2024-01-17T09:00:00+05:45"}},
		// from is 05:17 in New York: today's 09:00 is still to come.
		{"0 9 * * *", "America/New_York", "America/New_York", []string{"2024-01-15T09:00:00-05:00", "2024-01-16T09:00:00-05:00"}},
		{"0 9 * * *", "Etc/GMT+5", "Etc/GMT+5", []string{"2024-01-15T09:00:00-05:00", "2024-01-16T09:00:00-05:00"}},
		// from is 23:17 in Auckland (+13): the day is a local one.
		{"30 23 * * *", "Pacific/Auckland", "Pacific/Auckland", []string{"2024-01-15T23:30:00+13:00", "2024-01-16T23:30:00+13:00"}},
		{"0 0 * * MON", "Pacific/Auckland", "Pacific/Auckland", []string{"2024-01-22T00:00:00+13:00", "2024-01-29T00:00:00+13:00"}},
		{"@daily", "Europe/Berlin", "Europe/Berlin", []string{"2024-01-16T00:00:00+01:00", "2024-01-17T00:00:00+01:00"}},
		{"@monthly", "America/Los_Angeles", "America/Los_Angeles", []string{"2024-02-01T00:00:00-08:00", "2024-03-01T00:00:00-08:00"}},
		// @every ignores the zone.
		{"@every 1h", "Asia/Kathmandu", "Asia/Kathmandu", []string{"2024-01-15T11:17:30Z", "2024-01-15T12:17:30Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.spec+"|"+tt.tz, func(t *testing.T) {
			s := mustParse(t, tt.spec, tt.tz)
			if got := s.loc.String(); got != tt.loc {
				t.Errorf("location %s, want %s", got, tt.loc)
			}
			checkTimes(t, s.NextN(from, 2), tt.want)
		})
	}
}

func TestWildcardClass(t *testing.T) {
	for spec, want := range map[string]bool{
		"* * * * *": true, "*/15 * * * *": true, "0 * * * *": true, "*/5 1-3 * * *": true, "30 */2 * * *": true, "@hourly": true,
		"30 2 * * *": false, "0-59 0-23 * * *": false, "0 9 * * MON-FRI": false, "@daily": false, "@weekly": false,
		"@monthly": false, "@yearly": false, "@every 1h": false,
	} {
		if got := mustParse(t, spec, "").wildcard; got != want {
			t.Errorf("%q: wildcard = %v, want %v", spec, got, want)
		}
	}
}

func BenchmarkNext(b *testing.B) {
	for _, c := range []struct{ spec, tz string }{
		{"*/5 * * * *", ""}, {"30 2 * * *", "America/New_York"}, {"0 * * * *", "Europe/Berlin"},
		{"0 0 29 2 *", "Europe/Berlin"}, {"@every 1h", "America/New_York"},
	} {
		s := mustParse(b, c.spec, c.tz)
		b.Run(c.spec+"|"+c.tz, func(b *testing.B) {
			at := from
			for b.Loop() {
				at = s.Next(at)
			}
		})
	}
}
