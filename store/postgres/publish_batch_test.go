package postgres

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// pubItem is one publish given to varplane_publish(_batch) by hand.
type pubItem struct {
	scope     string
	expected  int64
	doc       string // the revision is its digest
	key, hash string
}

func (p pubItem) revision() string {
	d := sha256.Sum256([]byte(p.scope + "\x00" + p.doc))
	return "sha256:" + hex.EncodeToString(d[:])
}

// args are varplane_publish's thirteen arguments for the item; the JSON
// bodies name the item so that the tables show which event went where, and
// each event's chain content is its body (any bytes do, for comparing two
// ways of linking them).
func (p pubItem) args() []any {
	gen := p.expected + 1
	body := func(kind string, g int64, key bool) string {
		k := ""
		if key && p.key != "" {
			k = fmt.Sprintf(`,"idempotencyKey":%q`, p.key)
		}
		return fmt.Sprintf(`{"kind":%q,"scope":%q,"generation":%d,"doc":%q%s}`, kind, p.scope, g, p.doc, k)
	}
	var key any
	if p.key != "" {
		key = p.key
	}
	created, activated, keyed := body("revision-created", p.expected, true), body("activated", gen, false), body("activated", gen, true)
	open := func(b string) string { return strings.TrimSuffix(b, "}") } // as the store sends bodies
	return []any{p.scope, p.expected, gen, p.revision(), fmt.Sprintf(`{"document":%q}`, p.doc),
		open(created), open(activated), open(keyed), key, p.hash, []byte(created), []byte(activated), []byte(keyed)}
}

// scanAnswers prints each row of rows (its values separated by spaces).
func scanAnswers(t *testing.T, rows pgx.Rows) []string {
	t.Helper()
	defer rows.Close()
	var out []string
	for rows.Next() {
		vals, err := rows.Values()
		if err != nil {
			t.Fatal(err)
		}
		f := make([]string, len(vals))
		for i, v := range vals {
			f[i] = fmt.Sprint(v)
		}
		out = append(out, strings.Join(f, " "))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// tablesOf prints what the commit functions wrote to the schema of conn,
// without the columns that differ between two equal histories (times).
func tablesOf(t *testing.T, conn *pgx.Conn) string {
	t.Helper()
	var b strings.Builder
	for _, q := range []string{
		"SELECT scope, kind, coalesce(generation, 0), body::text FROM events ORDER BY seq",
		"SELECT scope, revision, record::text FROM revisions ORDER BY scope, revision",
		"SELECT scope, generation, coalesce(revision, ''), coalesce(event::text, ''), coalesce(last_rejected::text, ''), version, chain_seq, coalesce(chain_hash, '') FROM heads ORDER BY scope",
		"SELECT i.key, i.request_hash, i.scope, i.generation, e.body::text FROM idempotency i JOIN events e ON e.seq = i.event_seq ORDER BY i.key",
	} {
		rows, err := conn.Query(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range scanAnswers(t, rows) {
			b.WriteString(l + "\n")
		}
		b.WriteString("--\n")
	}
	return b.String()
}

// TestPublishBatchMatchesCalls: varplane_publish_batch answers every item
// and writes the tables exactly as varplane_publish called for each item
// in order does, on independent items (the set-based path) and on items
// that share a scope or a key (one call per item): created and found
// revisions, keys recorded with the right event, conflicts with and
// without a heads row, duplicate keys, recorded and within the batch.
func TestPublishBatchMatchesCalls(t *testing.T) {
	seed := []pubItem{
		{scope: "b.found", doc: "one"},
		{scope: "b.conflict", doc: "one"},
		{scope: "b.dup", doc: "one", key: "k-seeded", hash: "h0"},
		{scope: "b.stored", doc: "one"},
	}
	independent := []pubItem{
		{scope: "b.conflict", expected: 0, doc: "two"},                     // CONFLICT at 1
		{scope: "b.dup", expected: 1, doc: "two", key: "k-seeded"},         // DUP
		{scope: "b.found", expected: 1, doc: "one", key: "k-found"},        // found: key at 2
		{scope: "b.missing", expected: 2, doc: "one"},                      // CONFLICT at 0
		{scope: "b.new", expected: 0, doc: "one", key: "k-new", hash: "h"}, // created: key at 0
		{scope: "b.new2", expected: 0, doc: "one"},                         // created, a first publish
		{scope: "b.stored", expected: 1, doc: "two"},                       // created at 2
	}
	cases := []struct {
		name  string
		items []pubItem
		want  []string // statuses
	}{
		{"independent", independent, []string{"CONFLICT", "DUP", "OK", "CONFLICT", "OK", "OK", "OK"}},
		{"shared scope", append(slices.Clone(independent),
			pubItem{scope: "b.new", expected: 1, doc: "two"},   // after b.new's first: OK
			pubItem{scope: "b.new2", expected: 0, doc: "two"}), // stale: CONFLICT
			[]string{"CONFLICT", "DUP", "OK", "CONFLICT", "OK", "OK", "OK", "OK", "CONFLICT"}},
		{"shared key", append(slices.Clone(independent),
			pubItem{scope: "b.other", expected: 0, doc: "one", key: "k-new"}), // recorded by b.new: DUP
			[]string{"CONFLICT", "DUP", "OK", "CONFLICT", "OK", "OK", "OK", "DUP"}},
	}
	base := sharedURL(t)
	ctx := context.Background()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var conns [2]*pgx.Conn
			for i := range conns {
				u := freshSchema(t, base)
				openStore(t, u, Options{}) // migrates
				conns[i] = rawConn(t, u)
				for _, p := range seed {
					if _, err := conns[i].Exec(ctx, "SELECT varplane_publish($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)", p.args()...); err != nil {
						t.Fatal(err)
					}
				}
			}
			// conns[0]: one varplane_publish_batch; conns[1]: the calls.
			cols := make([][]any, 13)
			for _, p := range c.items {
				for k, a := range p.args() {
					cols[k] = append(cols[k], a)
				}
			}
			arrays := make([]any, 13)
			for k, col := range cols {
				arrays[k] = col
			}
			rows, err := conns[0].Query(ctx, "SELECT * FROM varplane_publish_batch($1::text[], $2::bigint[], $3::bigint[], $4::text[], $5::json[], $6::text[], $7::text[], $8::text[], $9::text[], $10::text[], $11::bytea[], $12::bytea[], $13::bytea[])", arrays...)
			if err != nil {
				t.Fatal(err)
			}
			got := scanAnswers(t, rows)
			tx, err := conns[1].Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, p := range c.items {
				rows, err := tx.Query(ctx, "SELECT * FROM varplane_publish($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)", p.args()...)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, scanAnswers(t, rows)...)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("batch answered\n%s\ncalls answered\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			for i, a := range got {
				if st, _, _ := strings.Cut(a, " "); st != c.want[i] {
					t.Errorf("item %d (%s) answered %q, want status %s", i, c.items[i].scope, a, c.want[i])
				}
			}
			if g, w := tablesOf(t, conns[0]), tablesOf(t, conns[1]); g != w {
				t.Fatalf("batch wrote\n%s\ncalls wrote\n%s", g, w)
			}
		})
	}
}

// TestRevisionFormChecked: the revisions table refuses every revision
// that is not "sha256:" and 64 lowercase hex digits (the check migration 4
// rewrote), and takes one that is.
func TestRevisionFormChecked(t *testing.T) {
	u := freshSchema(t, sharedURL(t))
	openStore(t, u, Options{})
	conn := rawConn(t, u)
	hex64 := strings.Repeat("0123456789abcdef", 4)
	for _, c := range []struct {
		rev string
		ok  bool
	}{
		{"sha256:" + hex64, true},
		{"sha256:" + hex64[:63], false},
		{"sha256:" + hex64 + "0", false},
		{"sha256:" + strings.ToUpper(hex64), false},
		{"sha256:" + hex64[:63] + "g", false},
		{"sha256:" + hex64[:62] + "é", false}, // 71 characters, not hex
		{"sha512:" + hex64, false},
		{"sha256:" + hex64[:63] + "\n", false},
		{"", false},
	} {
		_, err := conn.Exec(context.Background(), "INSERT INTO revisions (scope, revision, record) VALUES ('form', $1, '{}')", c.rev)
		if (err == nil) != c.ok {
			t.Errorf("insert of revision %q: %v, want accepted %v", c.rev, err, c.ok)
		}
	}
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM revisions WHERE scope = 'form'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows stored (%v), want the one well-formed revision", n, err)
	}
}
