package console

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Span is a run of text with the same style: Class is a space-separated list of class names
// from a fixed set (ansi-fg0..15, ansi-bg0..15, ansi-bold, ansi-dim, ansi-italic,
// ansi-underline), never text taken from the program.
type Span struct {
	Class string
	Text  string
}

// ansiStyle is the SGR state.
type ansiStyle struct {
	fg, bg                       int // -1: default; 0..15
	bold, dim, italic, underline bool
}

func (s ansiStyle) class() string {
	var c []string
	if s.fg >= 0 {
		c = append(c, "ansi-fg"+strconv.Itoa(s.fg))
	}
	if s.bg >= 0 {
		c = append(c, "ansi-bg"+strconv.Itoa(s.bg))
	}
	if s.bold {
		c = append(c, "ansi-bold")
	}
	if s.dim {
		c = append(c, "ansi-dim")
	}
	if s.italic {
		c = append(c, "ansi-italic")
	}
	if s.underline {
		c = append(c, "ansi-underline")
	}
	return strings.Join(c, " ")
}

// maxSpans bounds the spans of one stream: past it the rest is one plain span (a program that
// changes colour at every character cannot make the page unbounded in elements).
const maxSpans = 20000

// ANSISpans splits program output into styled spans. SGR sequences (ESC [ ... m) set colours
// (the 16 standard ones, and the first 16 of the 256-colour palette) and bold, dim, italic and
// underline; every other escape sequence (cursor moves, OSC titles and hyperlinks, ...) is
// dropped, and other control characters but newline and tab are shown as U+FFFD. The text of
// the spans is plain text, to be escaped where it is written.
func ANSISpans(s string) []Span {
	var (
		spans []Span
		cur   = ansiStyle{fg: -1, bg: -1}
		text  strings.Builder
	)
	flush := func() {
		if text.Len() == 0 {
			return
		}
		cls := cur.class()
		if n := len(spans); n > 0 && spans[n-1].Class == cls {
			spans[n-1].Text += text.String()
		} else {
			spans = append(spans, Span{Class: cls, Text: text.String()})
		}
		text.Reset()
	}
	for i := 0; i < len(s); {
		if len(spans) >= maxSpans {
			text.WriteString(stripControls(s[i:]))
			cur = ansiStyle{fg: -1, bg: -1}
			break
		}
		ch := s[i]
		switch {
		case ch == 0x1b:
			flush()
			n, params, final := escapeSequence(s[i:])
			if final == 'm' {
				cur = applySGR(cur, params)
			}
			i += n
			continue
		case ch < 0x20 && ch != '\n' && ch != '\t', ch == 0x7f:
			if ch == '\r' {
				// A carriage return (progress bars): keep the line's last state only.
				rest := s[i+1:]
				if len(rest) > 0 && rest[0] == '\n' {
					i++
					continue
				}
				t := text.String()
				if j := strings.LastIndexByte(t, '\n'); j >= 0 {
					text.Reset()
					text.WriteString(t[:j+1])
				} else {
					text.Reset()
				}
				i++
				continue
			}
			text.WriteString("\uFFFD")
			i++
			continue
		}
		text.WriteByte(ch)
		i++
	}
	flush()
	return spans
}

// stripControls removes escape sequences and control characters from s.
// showControls returns s with each control character but newline and tab (C0, DEL and C1,
// escape sequences' ESC too) replaced by U+FFFD: shown, never passed to the page raw nor
// deleted.
func showControls(s string) string {
	if !strings.ContainsFunc(s, isShownControl) {
		return s
	}
	return strings.Map(func(r rune) rune {
		if isShownControl(r) {
			return utf8.RuneError
		}
		return r
	}, s)
}

func isShownControl(r rune) bool {
	return r != '\n' && r != '\t' && (r < 0x20 || (r >= 0x7f && r < 0xa0))
}

func stripControls(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if s[i] == 0x1b {
			n, _, _ := escapeSequence(s[i:])
			i += n
			continue
		}
		if (s[i] < 0x20 && s[i] != '\n' && s[i] != '\t') || s[i] == 0x7f {
			i++
			continue
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}

// escapeSequence measures the escape sequence at the start of s (s[0] is ESC): its length,
// and for a CSI sequence its parameters and final byte.
func escapeSequence(s string) (n int, params string, final byte) {
	if len(s) < 2 {
		return len(s), "", 0
	}
	switch s[1] {
	case '[': // CSI: parameter and intermediate bytes, then a final byte 0x40..0x7e
		for j := 2; j < len(s); j++ {
			if s[j] >= 0x40 && s[j] <= 0x7e {
				return j + 1, s[2:j], s[j]
			}
			if s[j] < 0x20 || s[j] > 0x3f && s[j] < 0x40 || s[j] > 0x7e {
				return j, "", 0 // malformed: drop what came so far
			}
		}
		return len(s), "", 0
	case ']', 'P', '_', '^', 'X': // OSC, DCS, APC, PM, SOS: up to BEL or ESC \
		for j := 2; j < len(s); j++ {
			if s[j] == 0x07 {
				return j + 1, "", 0
			}
			if s[j] == 0x1b && j+1 < len(s) && s[j+1] == '\\' {
				return j + 2, "", 0
			}
		}
		return len(s), "", 0
	default: // a two-byte sequence (ESC c, ESC 7, ...)
		return 2, "", 0
	}
}

// applySGR returns st after the SGR parameters params ("1;31", "38;5;9", "" = reset).
func applySGR(st ansiStyle, params string) ansiStyle {
	if params == "" {
		return ansiStyle{fg: -1, bg: -1}
	}
	fields := strings.FieldsFunc(params, func(r rune) bool { return r == ';' || r == ':' })
	for i := 0; i < len(fields); i++ {
		n, err := strconv.Atoi(fields[i])
		if err != nil {
			continue
		}
		switch {
		case n == 0:
			st = ansiStyle{fg: -1, bg: -1}
		case n == 1:
			st.bold = true
		case n == 2:
			st.dim = true
		case n == 3:
			st.italic = true
		case n == 4:
			st.underline = true
		case n == 22:
			st.bold, st.dim = false, false
		case n == 23:
			st.italic = false
		case n == 24:
			st.underline = false
		case n >= 30 && n <= 37:
			st.fg = n - 30
		case n == 39:
			st.fg = -1
		case n >= 40 && n <= 47:
			st.bg = n - 40
		case n == 49:
			st.bg = -1
		case n >= 90 && n <= 97:
			st.fg = n - 90 + 8
		case n >= 100 && n <= 107:
			st.bg = n - 100 + 8
		case n == 38 || n == 48:
			// 38;5;N or 38;2;R;G;B: the palette's first 16 are kept, others dropped.
			c := -1
			if i+2 < len(fields) && fields[i+1] == "5" {
				if v, err := strconv.Atoi(fields[i+2]); err == nil && v >= 0 && v < 16 {
					c = v
				}
				i += 2
			} else if i+4 < len(fields) && fields[i+1] == "2" {
				i += 4
			}
			if c >= 0 {
				if n == 38 {
					st.fg = c
				} else {
					st.bg = c
				}
			}
		}
	}
	return st
}
