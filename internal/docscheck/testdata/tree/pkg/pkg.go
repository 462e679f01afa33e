// Package pkg points into the fixture's docs: docs/page.md#a-heading is
// there, docs/page.md#gone is not, and neither is docs/nothing.md.
// Fixed in issue 7 (a result dated by work item).
package pkg

// Config is documented in docs/page.md as pkg.Config, with `Named` only.
type Config struct {
	Named   int
	Missing int
	hidden  int
}

// OtherConfig is not documented at all.
type OtherConfig struct{ A int }
