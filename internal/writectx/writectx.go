// Package writectx marks the context of the statement with which a
// core.Writer inserts events that need nothing back from the INSERT, so
// that a transaction able to send a statement later, with the next one
// (pgxtx with Config.SendWritesWithCommit), knows which statements it may
// hold back. Nothing else may be held: a statement whose result its caller
// reads must run when it is called.
package writectx

import "context"

type key struct{}

// Mark returns ctx marked.
func Mark(ctx context.Context) context.Context { return context.WithValue(ctx, key{}, true) }

// Marked reports whether ctx was marked.
func Marked(ctx context.Context) bool {
	v, _ := ctx.Value(key{}).(bool)
	return v
}
