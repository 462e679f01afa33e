package sqlstore

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"

	"github.com/outboxkit/outbox/core"
)

// DefaultTable is the table name used when a store's config names none.
const DefaultTable = "outbox_event"

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// TableName is a validated, optionally schema-qualified table name.
type TableName struct {
	Schema string // "" when unqualified
	Name   string
}

// ParseTableName validates name against ^[A-Za-z_][A-Za-z0-9_]{0,62}$, with
// one optional "schema." prefix when allowSchema is set. An empty name means
// DefaultTable. Anything else (quotes, spaces, semicolons, comments) returns a
// *core.ValidationError, so no identifier ever reaches SQL unchecked.
func ParseTableName(name string, allowSchema bool) (TableName, error) {
	if name == "" {
		return TableName{Name: DefaultTable}, nil
	}
	schema, table, qualified := strings.Cut(name, ".")
	if !qualified {
		schema, table = "", name
	}
	if qualified && !allowSchema {
		return TableName{}, core.Invalid("table name", "%q: schema-qualified names are not supported by this database", name)
	}
	parts := []string{table}
	if qualified {
		parts = append(parts, schema)
	}
	for _, part := range parts {
		if !identRE.MatchString(part) {
			return TableName{}, core.Invalid("table name", "%q must match %s (optionally schema-qualified)", name, identRE)
		}
	}
	return TableName{Schema: schema, Name: table}, nil
}

// String returns the unquoted name, schema-qualified when it has a schema.
func (t TableName) String() string {
	if t.Schema == "" {
		return t.Name
	}
	return t.Schema + "." + t.Name
}

// Quoted returns the name quoted with q, for instance `"s"."t"`.
func (t TableName) Quoted(q func(string) string) string {
	if t.Schema == "" {
		return q(t.Name)
	}
	return q(t.Schema) + "." + q(t.Name)
}

// IndexName returns an index name for this table with the given suffix, at
// most 63 bytes long so it fits every database's identifier limit. Long table
// names are shortened with a hash so two tables never share index names.
func (t TableName) IndexName(suffix string) string {
	name := t.Name + "_" + suffix
	if len(name) <= 63 {
		return name
	}
	h := fnv.New32a()
	h.Write([]byte(t.Name))
	keep := 63 - len(suffix) - 10
	return fmt.Sprintf("%s_%08x_%s", t.Name[:keep], h.Sum32(), suffix)
}

// KeyTable returns the table of the per-key sequence counters of ordered
// delivery: the table's name with the suffix "_key" (shortened with a hash
// as IndexName does), in the same schema.
func (t TableName) KeyTable() TableName {
	return TableName{Schema: t.Schema, Name: t.IndexName("key")}
}

// PosTable returns the table of the persisted position of position
// delivery: the table's name with the suffix "_pos", in the same schema.
func (t TableName) PosTable() TableName {
	return TableName{Schema: t.Schema, Name: t.IndexName("pos")}
}

// PosSeq returns the sequence of the positions (PostgreSQL): the table's
// name with the suffix "_pos_seq", in the same schema.
func (t TableName) PosSeq() TableName {
	return TableName{Schema: t.Schema, Name: t.IndexName("pos_seq")}
}

// RenderDDL substitutes the table into a DDL template. The template refers to
// {{table}} (the quoted, qualified table), {{name}} (the unquoted bare name),
// {{keytable}} (the quoted, qualified KeyTable), {{postable}} and {{posseq}}
// (PosTable and PosSeq, quoted and qualified) and {{index:SUFFIX}} (a
// quoted index name).
func RenderDDL(tmpl string, t TableName, q func(string) string) string {
	var b strings.Builder
	for {
		i := strings.Index(tmpl, "{{")
		if i < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		j := strings.Index(tmpl[i:], "}}")
		if j < 0 {
			b.WriteString(tmpl)
			return b.String()
		}
		b.WriteString(tmpl[:i])
		key := tmpl[i+2 : i+j]
		switch {
		case key == "table":
			b.WriteString(t.Quoted(q))
		case key == "name":
			b.WriteString(t.Name)
		case key == "keytable":
			b.WriteString(t.KeyTable().Quoted(q))
		case key == "postable":
			b.WriteString(t.PosTable().Quoted(q))
		case key == "posseq":
			b.WriteString(t.PosSeq().Quoted(q))
		case strings.HasPrefix(key, "index:"):
			b.WriteString(q(t.IndexName(strings.TrimPrefix(key, "index:"))))
		default:
			b.WriteString(tmpl[i : i+j+2])
		}
		tmpl = tmpl[i+j+2:]
	}
}

// SplitStatements splits a DDL script on semicolons that end a line. DDL
// templates contain no semicolons inside statements.
func SplitStatements(script string) []string {
	var out []string
	for _, stmt := range strings.Split(script, ";\n") {
		lines := strings.Split(stmt, "\n")
		kept := lines[:0]
		for _, l := range lines {
			if trimmed := strings.TrimSpace(l); trimmed != "" && !strings.HasPrefix(trimmed, "--") {
				kept = append(kept, l)
			}
		}
		if s := strings.TrimSuffix(strings.TrimSpace(strings.Join(kept, "\n")), ";"); s != "" {
			out = append(out, s)
		}
	}
	return out
}
