// Package ent is the ent client generated from ./schema for the
// integration's tests and examples. Regenerate it with go generate.
package ent

//go:generate go run entgo.io/ent/cmd/ent@v0.14.5 generate ./schema
