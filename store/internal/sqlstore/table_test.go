package sqlstore

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/outboxkit/outbox/core"
)

func TestParseTableName(t *testing.T) {
	cases := []struct {
		in          string
		allowSchema bool
		want        TableName
		ok          bool
	}{
		{"", false, TableName{Name: "outbox_event"}, true},
		{"events", false, TableName{Name: "events"}, true},
		{"_x9", false, TableName{Name: "_x9"}, true},
		{strings.Repeat("a", 63), false, TableName{Name: strings.Repeat("a", 63)}, true},
		{"app.events", true, TableName{Schema: "app", Name: "events"}, true},
		{"app.events", false, TableName{}, false},
		{strings.Repeat("a", 64), false, TableName{}, false},
		{"9events", false, TableName{}, false},
		{`ev"ents`, false, TableName{}, false},
		{"ev;ents", false, TableName{}, false},
		{"ev--ents", false, TableName{}, false},
		{"ev/**/ents", false, TableName{}, false},
		{"a.b.c", true, TableName{}, false},
		{".events", true, TableName{}, false},
		{"app.", true, TableName{}, false},
		{"ev ents", false, TableName{}, false},
		{"évents", false, TableName{}, false},
	}
	for _, tc := range cases {
		got, err := ParseTableName(tc.in, tc.allowSchema)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("ParseTableName(%q, %v) = %+v, %v", tc.in, tc.allowSchema, got, err)
		}
		if err != nil && !errors.Is(err, core.ErrInvalid) {
			t.Errorf("ParseTableName(%q): error %v does not match ErrInvalid", tc.in, err)
		}
	}
}

var safeQualified = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]{0,62}\.)?[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// FuzzParseTableName checks that whatever is accepted is a plain identifier,
// so nothing but letters, digits, '_' and one '.' ever reaches SQL.
func FuzzParseTableName(f *testing.F) {
	for _, s := range []string{"outbox_event", "app.events", `x"; DROP TABLE t; --`, "a.b.c", "", "é"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tn, err := ParseTableName(s, true)
		if err != nil {
			if !errors.Is(err, core.ErrInvalid) {
				t.Fatalf("error %v does not match ErrInvalid", err)
			}
			return
		}
		if !safeQualified.MatchString(tn.String()) {
			t.Fatalf("accepted unsafe name %q", tn.String())
		}
		if s != "" && tn.String() != s {
			t.Fatalf("name changed: %q -> %q", s, tn.String())
		}
	})
}

func TestIndexNameFits(t *testing.T) {
	long := TableName{Name: strings.Repeat("t", 63)}
	other := TableName{Name: strings.Repeat("t", 62) + "u"}
	a, b := long.IndexName("pending"), other.IndexName("pending")
	if len(a) > 63 || len(b) > 63 || a == b {
		t.Fatalf("index names %q (%d), %q (%d)", a, len(a), b, len(b))
	}
	if got := (TableName{Name: "ev"}).IndexName("dead"); got != "ev_dead" {
		t.Fatalf("short name: %q", got)
	}
}

func TestRenderDDLAndSplit(t *testing.T) {
	q := func(s string) string { return `"` + s + `"` }
	tmpl := "-- comment; with semicolon\nCREATE TABLE {{table}} (x INT);\nCREATE INDEX {{index:pending}} ON {{table}} (x) {{unknown}};\n"
	got := SplitStatements(RenderDDL(tmpl, TableName{Schema: "s", Name: "t"}, q))
	want := []string{`CREATE TABLE "s"."t" (x INT)`, `CREATE INDEX "t_pending" ON "s"."t" (x) {{unknown}}`}
	if !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
}

func TestRebind(t *testing.T) {
	d := Dialect{NumberedParams: true}
	if got := d.rebind("a = ? AND b IN (?, ?)"); got != "a = $1 AND b IN ($2, $3)" {
		t.Fatalf("numbered: %q", got)
	}
	d.NumberedParams = false
	if got := d.rebind("a = ?"); got != "a = ?" {
		t.Fatalf("plain: %q", got)
	}
}
