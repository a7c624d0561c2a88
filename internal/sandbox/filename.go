package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"mime"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxFileNameBytes caps a file name (an input file's, or an output file's path).
const MaxFileNameBytes = 255

// CheckFileName returns nil when name can name a file in a run's working directory: a relative
// path of 1 to MaxFileNameBytes bytes of UTF-8, with "/" between parts, none of them empty, "."
// or "..", and no NUL, control character or backslash. The error says what is wrong in words
// that fit any interface ("… is not allowed in a file name").
func CheckFileName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("a file name is empty")
	case len(name) > MaxFileNameBytes:
		return fmt.Errorf("file name %.40q… is %d bytes; at most %d", name, len(name), MaxFileNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("file name %q is not valid UTF-8", name)
	case strings.HasPrefix(name, "/"):
		return fmt.Errorf("file name %q is absolute; give a path relative to the run's directory", name)
	}
	for _, r := range name {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == '\\' {
			return fmt.Errorf("file name %q holds %U, which is not allowed in a file name", name, r)
		}
	}
	for part := range strings.SplitSeq(name, "/") {
		switch part {
		case "":
			return fmt.Errorf("file name %q has an empty part (a doubled or trailing \"/\")", name)
		case ".", "..":
			return fmt.Errorf("file name %q has a %q part; give a plain relative path", name, part)
		}
	}
	return nil
}

// EscapeName returns name (a file name, or any text from a run) as it can be shown to a
// person, on a terminal or a web page: every control character (C0, DEL, C1), bidirectional
// override, embedding or isolate, and other invisible format character (zero-width joiners,
// the byte-order mark) is written as a Go escape (\x1b, \u202e), so a name cannot move the
// cursor, recolour a terminal or show its letters in another order than they are
// ("invoice\u202efdp.exe" is not shown as "invoiceexe.pdf").
func EscapeName(name string) string {
	var b strings.Builder
	for _, r := range name {
		if r == ' ' || (r != utf8.RuneError && strconv.IsPrint(r)) {
			b.WriteRune(r)
			continue
		}
		q := strconv.QuoteRuneToASCII(r)
		b.WriteString(q[1 : len(q)-1])
	}
	return b.String()
}

// EscapeText is EscapeName for text of several lines, such as a reason that quotes pip's own
// words: its line feeds stay line feeds, and every other character is written as EscapeName
// writes it (a carriage return too, which could overwrite the line it ends).
func EscapeText(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = EscapeName(l)
	}
	return strings.Join(lines, "\n")
}

// Holds says whether content is the bytes f describes: its size and SHA-256.
func (f File) Holds(content []byte) bool {
	sum := sha256.Sum256(content)
	return int64(len(content)) == f.SizeBytes && strings.EqualFold(hex.EncodeToString(sum[:]), f.SHA256)
}

// RasterImage returns mediaType's type without parameters, and whether it is a raster image
// every browser and MCP client shows: PNG, JPEG, GIF or WebP.
func RasterImage(mediaType string) (string, bool) {
	mt, _, _ := mime.ParseMediaType(mediaType)
	switch mt {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return mt, true
	}
	return mt, false
}

// CodeFileName is the file in the run's working directory that holds its code (written by the
// bootstrap): no input file may take its name, and it is never an output file.
const CodeFileName = "main.py"
