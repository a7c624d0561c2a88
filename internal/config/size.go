package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

var sizeUnits = []struct {
	suffix string
	mult   int64
}{{"GiB", gib}, {"MiB", mib}, {"KiB", kib}}

// sizeSyntax describes what ParseSize accepts, for error messages.
const sizeSyntax = "a whole number of bytes, or a whole number followed by KiB, MiB or GiB (such as 512MiB)"

// ParseSize parses a size: a whole number of bytes ("1048576"), or a whole number followed
// by exactly one of the binary suffixes KiB, MiB or GiB ("64KiB", "512MiB", "1 GiB").
// Space around the number and between it and the suffix is allowed. Negative numbers,
// fractions and other suffixes (B, KB, M, GB, TiB, ...) are errors.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	num, mult := t, int64(1)
	for _, u := range sizeUnits {
		if n, ok := strings.CutSuffix(t, u.suffix); ok {
			num, mult = strings.TrimSpace(n), u.mult
			break
		}
	}
	if num == "" || strings.Trim(num, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a size: write %s%s", s, sizeSyntax, sizeHint(t))
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large a size", s)
	}
	return n * mult, nil
}

// sizeHint suggests the binary suffix for sizes written with decimal or short suffixes
// ("512MB", "1g").
func sizeHint(t string) string {
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != ' ' })
	if i <= 0 || strings.Trim(t[:i], "0123456789 ") != "" {
		return ""
	}
	num, suffix := strings.TrimSpace(t[:i]), strings.ToUpper(t[i:])
	for _, u := range sizeUnits {
		p := u.suffix[:1]
		if suffix == p || suffix == p+"B" || suffix == p+"IB" {
			return fmt.Sprintf("; did you mean %s%s?", num, u.suffix)
		}
	}
	return ""
}

// FormatSize formats n bytes in the largest of GiB, MiB and KiB that divides it exactly, or
// as plain bytes; ParseSize reads the result back.
func FormatSize(n int64) string {
	if n != 0 {
		for _, u := range sizeUnits {
			if n%u.mult == 0 {
				return strconv.FormatInt(n/u.mult, 10) + u.suffix
			}
		}
	}
	return strconv.FormatInt(n, 10)
}
