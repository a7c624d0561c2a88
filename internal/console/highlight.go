package console

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Token classes of highlighted Python (the Class of a Span).
const (
	tokKeyword = "py-kw"
	tokBuiltin = "py-bi"
	tokString  = "py-str"
	tokComment = "py-com"
	tokNumber  = "py-num"
	tokDecor   = "py-dec"
)

var pyKeywords = map[string]bool{}
var pyBuiltins = map[string]bool{}

func init() {
	for _, k := range strings.Fields(`False None True and as assert async await break class continue def del elif else except finally
		for from global if import in is lambda nonlocal not or pass raise return try while with yield match case`) {
		pyKeywords[k] = true
	}
	for _, k := range strings.Fields(`print len range dict list set tuple int float str bool sum min max abs sorted enumerate zip map
		filter open isinstance type object super any all round INPUT OUTPUT agent`) {
		pyBuiltins[k] = true
	}
}

// maxHighlightBytes bounds the code that is highlighted; longer code is shown plain.
const maxHighlightBytes = 256 << 10

// HighlightPython splits Python source into spans classed as keyword, builtin, string,
// comment, number or decorator (plain text has no class). It is a lexer for display only: it
// never fails, and the spans' texts join to the source.
func HighlightPython(src string) []Span {
	if len(src) > maxHighlightBytes {
		return []Span{{Text: src}}
	}
	var spans []Span
	plain := 0 // start of the pending plain text
	emit := func(start, end int, class string) {
		if plain < start {
			spans = append(spans, Span{Text: src[plain:start]})
		}
		spans = append(spans, Span{Class: class, Text: src[start:end]})
		plain = end
	}
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '#':
			j := strings.IndexByte(src[i:], '\n')
			if j < 0 {
				j = len(src) - i
			}
			emit(i, i+j, tokComment)
			i += j
		case c == '"' || c == '\'':
			j := stringEnd(src, i)
			emit(i, j, tokString)
			i = j
		case c == '@' && (i == 0 || src[i-1] == '\n' || src[i-1] == ' '):
			j := i + 1
			for j < len(src) && (isIdent(src[j]) || src[j] == '.') {
				j++
			}
			emit(i, j, tokDecor)
			i = j
		case c >= '0' && c <= '9' && (i == 0 || !isIdent(src[i-1])):
			j := i
			for j < len(src) && (isIdent(src[j]) || src[j] == '.') {
				j++
			}
			emit(i, j, tokNumber)
			i = j
		case isIdentStart(src[i:]):
			j := i
			for j < len(src) {
				r, n := utf8.DecodeRuneInString(src[j:])
				if !(r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r)) {
					break
				}
				j += n
			}
			word := src[i:j]
			// A string prefix: f"...", rb'...'.
			if j < len(src) && (src[j] == '"' || src[j] == '\'') && len(word) <= 2 && strings.Trim(strings.ToLower(word), "rbfu") == "" {
				k := stringEnd(src, j)
				emit(i, k, tokString)
				i = k
				continue
			}
			if pyKeywords[word] {
				emit(i, j, tokKeyword)
			} else if pyBuiltins[word] {
				emit(i, j, tokBuiltin)
			}
			i = j
		default:
			_, n := utf8.DecodeRuneInString(src[i:])
			i += n
		}
	}
	if plain < len(src) {
		spans = append(spans, Span{Text: src[plain:]})
	}
	return spans
}

func isIdent(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c >= 0x80
}

func isIdentStart(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return r == '_' || unicode.IsLetter(r)
}

// stringEnd returns the end of the string literal whose quote is at src[i]: after its closing
// quote (triple quotes included), or the end of the line (or source) when it is not closed.
func stringEnd(src string, i int) int {
	q := src[i]
	if strings.HasPrefix(src[i:], strings.Repeat(string(q), 3)) {
		delim := strings.Repeat(string(q), 3)
		for j := i + 3; j < len(src); j++ {
			if src[j] == '\\' {
				j++
				continue
			}
			if strings.HasPrefix(src[j:], delim) {
				return j + 3
			}
		}
		return len(src)
	}
	for j := i + 1; j < len(src); j++ {
		switch src[j] {
		case '\\':
			j++
		case q:
			return j + 1
		case '\n':
			return j
		}
	}
	return len(src)
}
