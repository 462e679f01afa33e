package ordercheck

import "testing"

func TestChecker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		run   func(c *Checker)
		wantN int
	}{
		{"in order", func(c *Checker) {
			for s := int64(1); s <= 3; s++ {
				c.Start("k", s)
				c.Finish("k", s, true)
			}
		}, 0},
		{"head redelivered", func(c *Checker) {
			c.Start("k", 1)
			c.Finish("k", 1, false)
			c.Start("k", 1)
			c.Finish("k", 1, true)
			c.Start("k", 2)
		}, 0},
		{"next starts before previous finished", func(c *Checker) {
			c.Start("k", 1)
			c.Start("k", 2)
		}, 1},
		{"next starts after a failed call", func(c *Checker) {
			c.Start("k", 1)
			c.Finish("k", 1, false)
			c.Start("k", 2)
		}, 1},
		{"goes back", func(c *Checker) {
			c.Start("k", 1)
			c.Finish("k", 1, true)
			c.Start("k", 2)
			c.Finish("k", 2, true)
			c.Start("k", 1)
		}, 1},
		{"skipped dead event", func(c *Checker) {
			c.Start("k", 1)
			c.Finish("k", 1, false)
			c.Skip("k", 1)
			c.Start("k", 2)
		}, 0},
		{"every violation counted", func(c *Checker) {
			for s := int64(1); s <= 2*maxViolations; s++ {
				c.Start("k", s+1)
			}
		}, 2 * maxViolations},
		{"keys independent", func(c *Checker) {
			c.Start("a", 1)
			c.Start("b", 1)
			c.Finish("b", 1, true)
			c.Start("b", 2)
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := New()
			tc.run(c)
			if n, v := c.Violations(); n != tc.wantN {
				t.Fatalf("%d violations %v, want %d", n, v, tc.wantN)
			}
		})
	}
}
