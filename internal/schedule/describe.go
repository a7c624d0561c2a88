package schedule

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Describe says a schedule spec in English words, for people ("every 15 minutes", "every day
// at 09:30", "at minute 5 of every hour", "every Monday at 08:00"), with its timezone when not
// UTC. A spec it has no words for (lists, ranges, steps in several fields) is returned as
// "cron <spec>". It does not validate: parse first with Parse.
func Describe(spec, tz string) string {
	words := describe(strings.Fields(strings.TrimSpace(spec)))
	if tz != "" && tz != "UTC" && !strings.HasPrefix(strings.ToLower(strings.TrimSpace(spec)), "@every") {
		words += " (" + tz + " time)"
	}
	return words
}

var descriptorWords = map[string]string{
	"@yearly": "every year on 1 January at 00:00", "@annually": "every year on 1 January at 00:00",
	"@monthly": "on the 1st of every month at 00:00", "@weekly": "every Sunday at 00:00",
	"@daily": "every day at 00:00", "@midnight": "every day at 00:00", "@hourly": "every hour, on the hour",
}

func describe(f []string) string {
	if len(f) == 0 {
		return "never"
	}
	kw := strings.ToLower(f[0])
	if kw == "@every" && len(f) == 2 {
		if d, err := time.ParseDuration(f[1]); err == nil {
			return "every " + shortDuration(d)
		}
	}
	if w, ok := descriptorWords[kw]; ok {
		return w
	}
	raw := "cron " + strings.Join(f, " ")
	if len(f) != 5 {
		return raw
	}
	min, hour, dom, month, dow := f[0], f[1], f[2], f[3], f[4]
	star := func(s string) bool { return s == "*" || s == "?" }
	if !star(month) {
		return raw
	}
	m, errM := strconv.Atoi(min)
	h, errH := strconv.Atoi(hour)
	switch {
	case star(min) && star(hour) && star(dom) && star(dow):
		return "every minute"
	case strings.HasPrefix(min, "*/") && star(hour) && star(dom) && star(dow):
		return every(strings.TrimPrefix(min, "*/"), "minute")
	case errM == nil && star(hour) && star(dom) && star(dow):
		return fmt.Sprintf("at minute %d of every hour", m)
	case errM == nil && strings.HasPrefix(hour, "*/") && star(dom) && star(dow):
		return fmt.Sprintf("%s at minute %d", every(strings.TrimPrefix(hour, "*/"), "hour"), m)
	case errM == nil && errH == nil && star(dom) && star(dow):
		return fmt.Sprintf("every day at %02d:%02d", h, m)
	case errM == nil && errH == nil && star(dom):
		if days := dayWords(dow); days != "" {
			return fmt.Sprintf("every %s at %02d:%02d", days, h, m)
		}
	case errM == nil && errH == nil && star(dow):
		if d, err := strconv.Atoi(dom); err == nil {
			return fmt.Sprintf("on day %d of every month at %02d:%02d", d, h, m)
		}
	}
	return raw
}

// every says a step of n units: "every minute" for a step of 1, "every 5 minutes" otherwise.
func every(n, unit string) string {
	if v, err := strconv.Atoi(n); err == nil && v == 1 {
		return "every " + unit
	}
	return "every " + n + " " + unit + "s"
}

var dayNames = []string{"Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"}

// dayWords names a day-of-week field of single days and ranges ("1-5" is "Monday to Friday").
func dayWords(field string) string {
	day := func(s string) (int, bool) {
		if n, err := strconv.Atoi(s); err == nil && n >= 0 && n <= 7 {
			return n % 7, true
		}
		for i, name := range dayNames {
			if strings.EqualFold(s, name[:3]) {
				return i, true
			}
		}
		return 0, false
	}
	var parts []string
	for _, el := range strings.Split(field, ",") {
		if a, b, ok := strings.Cut(el, "-"); ok {
			x, ok1 := day(a)
			y, ok2 := day(b)
			if !ok1 || !ok2 {
				return ""
			}
			parts = append(parts, dayNames[x]+" to "+dayNames[y])
			continue
		}
		d, ok := day(el)
		if !ok {
			return ""
		}
		parts = append(parts, dayNames[d])
	}
	return strings.Join(parts, ", ")
}

// shortDuration writes d without its zero units: "15m", "1h", "1h30m", "90s" is "1m30s".
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
