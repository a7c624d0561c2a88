package schedule

import "testing"

func TestDescribe(t *testing.T) {
	for _, c := range []struct{ spec, tz, want string }{
		{"@every 15m", "Europe/Paris", "every 15m"},
		{"@every 2h", "", "every 2h"},
		{"@every 90s", "", "every 1m30s"},
		{"@daily", "", "every day at 00:00"},
		{"@hourly", "UTC", "every hour, on the hour"},
		{"*/5 * * * *", "", "every 5 minutes"},
		// Issue 33, item 9: a step of one is said in the singular ("every 1 minutes").
		{"*/1 * * * *", "", "every minute"},
		{"*/01 * * * *", "", "every minute"},
		{"15 */1 * * *", "", "every hour at minute 15"},
		{"7 * * * *", "", "at minute 7 of every hour"},
		{"0 */2 * * *", "", "every 2 hours at minute 0"},
		{"30 9 * * *", "Asia/Tokyo", "every day at 09:30 (Asia/Tokyo time)"},
		{"30 9 * * 1-5", "", "every Monday to Friday at 09:30"},
		{"0 8 * * mon,fri", "", "every Monday, Friday at 08:00"},
		{"0 0 15 * *", "", "on day 15 of every month at 00:00"},
		{"0 9 */10 * 1-5", "", "cron 0 9 */10 * 1-5"},
		{"0 0 1 1 *", "", "cron 0 0 1 1 *"},
	} {
		if got := Describe(c.spec, c.tz); got != c.want {
			t.Errorf("Describe(%q, %q) = %q, want %q", c.spec, c.tz, got, c.want)
		}
	}
}
