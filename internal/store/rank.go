package store

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// Full-text ranking. FTS5's own bm25() weighs words by statistics of the whole index, which
// holds every agent's rows: one agent's scores would then tell how often a word occurs in other
// agents' data. The store therefore matches with the shared FTS5 index (filtered by agent) and
// ranks with Okapi BM25 (k1 1.2, b 0.75, as FTS5) computed from the agent's own rows only.

const (
	bm25K1 = 1.2
	bm25B  = 0.75
	// maxCandidates bounds the matching rows ranked for one search.
	maxCandidates = 20000
	// rankPrefix is how many characters of each matching row are ranked (term frequencies
	// count there; the row's length in words is its whole text's), and maxRankBytes how many
	// bytes of them one search reads in all: with rows of 64 KiB, reading 20,000 whole ones
	// cost the daemon 6 s of CPU and 460 MiB per call (found by an attack).
	rankPrefix   = 2048
	maxRankBytes = 16 << 20
)

// tokens splits text into the lowercase words FTS5's unicode61 tokenizer indexes (letters and
// digits; diacritics are kept, so a rare accented word may count a little differently).
func tokens(text string) []string {
	return strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// candidate is a matching row with the text it is ranked on.
type candidate struct {
	rowid  int64
	text   string
	tokens int
}

// rank orders candidates by BM25 for the query's words, with the agent's own statistics:
// docs rows in all, avgLen words on average, and df[w] rows containing word w. It returns the
// scores by rowid.
func rank(cands []candidate, query []string, docs int, avgLen float64, df map[string]int) map[int64]float64 {
	scores := make(map[int64]float64, len(cands))
	for _, c := range cands {
		tf := map[string]int{}
		for _, w := range tokens(c.text) {
			tf[w]++
		}
		var score float64
		for _, w := range query {
			f := float64(tf[w])
			if f == 0 {
				continue
			}
			n := float64(df[w])
			idf := math.Log((float64(docs)-n+0.5)/(n+0.5) + 1)
			score += idf * f * (bm25K1 + 1) / (f + bm25K1*(1-bm25B+bm25B*float64(c.tokens)/math.Max(avgLen, 1)))
		}
		scores[c.rowid] = score
	}
	return scores
}

// search matches q (words) against kind's index for agent and returns up to limit rowids, best
// first, with their scores.
func (s *Store) search(ctx context.Context, kind, agent string, words []string, limit int) ([]int64, map[int64]float64, error) {
	table, fts, rowid, text := "memories", "memories_fts", "id", "t.text"
	if kind == "documents" {
		table, fts, rowid, text = "documents", "documents_fts", "rid", "t.title || ' ' || t.content"
	}
	if s.pg {
		text = "left(" + text + ", " + strconv.Itoa(rankPrefix) + ")"
	} else {
		text = "substr(" + text + ", 1, " + strconv.Itoa(rankPrefix) + ")"
	}
	// matches is the query that selects the agent's rows matching some of words (the
	// arguments follow: the words, the agent).
	matches := func(cols string, words []string) (string, []any) {
		if s.pg {
			return `SELECT ` + cols + ` FROM ` + table + ` t WHERE t.words && ? AND t.agent = ?`, []any{indexable(words), agent}
		}
		return `SELECT ` + cols + ` FROM ` + fts + ` JOIN ` + table + ` t ON t.` + rowid + ` = ` + fts + `.rowid
		WHERE ` + fts + ` MATCH ? AND t.agent = ?`, []any{ftsMatch(words), agent}
	}
	q, args := matches(`t.`+rowid+`, `+text+`, t.tokens`, words)
	rows, err := s.r.QueryContext(ctx, q+` LIMIT ?`, append(args, maxCandidates)...)
	if err != nil {
		return nil, nil, err
	}
	var cands []candidate
	read := 0
	for rows.Next() && read < maxRankBytes {
		var c candidate
		if err := rows.Scan(&c.rowid, &c.text, &c.tokens); err != nil {
			rows.Close()
			return nil, nil, err
		}
		read += len(c.text)
		cands = append(cands, c)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil || len(cands) == 0 {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil { // the call's time is up: rank nothing more
		return nil, nil, err
	}
	var docs int
	var avgLen sql.NullFloat64
	if err := s.r.QueryRowContext(ctx, `SELECT count(*), avg(tokens) FROM `+table+` WHERE agent = ?`, agent).Scan(&docs, &avgLen); err != nil {
		return nil, nil, err
	}
	df := map[string]int{}
	for _, w := range words {
		if _, ok := df[w]; ok {
			continue
		}
		var n int
		q, args := matches(`count(*)`, []string{w})
		if err := s.r.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
			return nil, nil, err
		}
		df[w] = n
	}
	scores := rank(cands, words, docs, avgLen.Float64, df)
	ids := make([]int64, len(cands))
	for i, c := range cands {
		ids[i] = c.rowid
	}
	sort.SliceStable(ids, func(i, j int) bool {
		if scores[ids[i]] != scores[ids[j]] {
			return scores[ids[i]] > scores[ids[j]]
		}
		return ids[i] < ids[j]
	})
	if len(ids) > limit {
		ids = ids[:limit]
	}
	return ids, scores, nil
}

// ftsMatch is an FTS5 query matching any of words, each quoted: user text never reaches
// FTS5's own syntax.
func ftsMatch(words []string) string {
	quoted := make([]string, len(words))
	for i, w := range words {
		quoted[i] = `"` + strings.ReplaceAll(w, `"`, `""`) + `"`
	}
	return strings.Join(quoted, " OR ")
}

// maxIndexWord is the longest word (in bytes) PostgreSQL's index of rows' words holds; a GIN
// index entry must fit in a page. Longer words are not matched on PostgreSQL.
const maxIndexWord = 1000

// indexWords returns the distinct words of text as PostgreSQL's words column holds them.
func indexWords(text string) []string {
	return indexable(tokens(text))
}

// indexable returns the distinct words of words that PostgreSQL's index holds, in order.
func indexable(words []string) []string {
	seen := make(map[string]bool, len(words))
	out := make([]string, 0, len(words))
	for _, w := range words {
		if len(w) <= maxIndexWord && !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	return out
}

// dropAgentIndexes removes the per-agent full-text tables of migration 5 and counts the words
// of rows stored before migration 6.
func (s *Store) dropAgentIndexes(ctx context.Context) error {
	if s.pg {
		return nil // migration 5 was SQLite's only
	}
	return s.tx(ctx, func(tx *Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT name FROM sqlite_master WHERE type = 'table' AND (name GLOB 'fts_memories_*' OR name GLOB 'fts_documents_*')
			AND sql LIKE 'CREATE VIRTUAL TABLE%'`)
		if err != nil {
			return err
		}
		names, err := collect(rows, func(r scanner) (string, error) { var n string; return n, r.Scan(&n) })
		if err != nil {
			return err
		}
		for _, n := range names {
			if _, err := tx.ExecContext(ctx, `DROP TABLE "`+n+`"`); err != nil {
				return err
			}
		}
		for _, t := range []struct{ table, key, text string }{{"memories", "id", "text"}, {"documents", "rid", "title || ' ' || content"}} {
			rows, err := tx.QueryContext(ctx, `SELECT `+t.key+`, `+t.text+` FROM `+t.table+` WHERE tokens < 0`)
			if err != nil {
				return err
			}
			cands, err := collect(rows, func(r scanner) (candidate, error) {
				var c candidate
				return c, r.Scan(&c.rowid, &c.text)
			})
			if err != nil {
				return err
			}
			for _, c := range cands {
				if _, err := tx.ExecContext(ctx, `UPDATE `+t.table+` SET tokens = ? WHERE `+t.key+` = ?`, len(tokens(c.text)), c.rowid); err != nil {
					return err
				}
			}
		}
		return nil
	})
}
