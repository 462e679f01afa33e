// Package config holds what every component's Config uses to validate
// itself, so that the rules read the same way and fail with the same kind
// of error in every package. Defaults need no helper: a zero field takes its
// default with cmp.Or(field, Default), and a nil func field with an if.
package config

import (
	"time"

	"github.com/rs/zerolog"

	"github.com/outboxkit/outbox/core"
)

// Validator records the first rule of a Config that does not hold. Rules are
// checked in the order they are written, so the error names the first
// problem a reader of the Config would meet; the zero Validator is ready
// once Component is set.
type Validator struct {
	// Component names the configuration in errors, e.g. "dispatch config".
	Component string
	err       error
}

// Require records "<field> is nil" unless set.
func (v *Validator) Require(field string, set bool) {
	if !set {
		v.fail("%s is nil", field)
	}
}

// Check records the reason format (with args) unless ok.
func (v *Validator) Check(ok bool, format string, args ...any) {
	if !ok {
		v.fail(format, args...)
	}
}

// Err returns the first rule that did not hold, as a *core.ValidationError
// (matching core.ErrInvalid), or nil.
func (v *Validator) Err() error { return v.err }

func (v *Validator) fail(format string, args ...any) {
	if v.err == nil {
		v.err = core.Invalid(v.Component, format, args...)
	}
}

// NonNegative records "<field> is negative" when x < 0: zero means the
// default in every Config, so only negative values are wrong.
func NonNegative[T int | time.Duration](v *Validator, field string, x T) {
	v.Check(x >= 0, "%s is negative", field)
}

// Owner records an Owner longer than the column that stores it.
func Owner(v *Validator, owner string) {
	v.Check(len(owner) <= core.MaxOwnerLen, "Owner is %d bytes, more than %d", len(owner), core.MaxOwnerLen)
}

// HasWriter reports whether l writes anywhere, i.e. whether it was built by
// zerolog.New (or derived from such a logger) rather than being the zero
// Logger, which has no writer and is silent. It lets an Outbox hand its own
// logger to components whose Logger was left zero. zerolog does not expose
// the writer, so HasWriter asks a copy of l to start an event with a sampler
// that records whether it was consulted and refuses: zerolog consults the
// sampler only after it has found a writer (and a level that lets the event
// through, which the copy's Trace level always does), and nothing is written.
// A zero Logger given context with With stays without a writer and counts as
// unset. While zerolog's global level is Disabled every logger is silent and
// HasWriter reports false.
func HasWriter(l zerolog.Logger) bool {
	var s probe
	probeLogger := l.Level(zerolog.TraceLevel).Sample(&s)
	if e := probeLogger.Log(); e != nil {
		// Sampling is disabled globally: the event was started, which only
		// a logger with a writer does. Drop it unsent.
		e.Discard()
		return true
	}
	return s.asked
}

// probe is a zerolog.Sampler that records that it was asked and drops the
// event.
type probe struct{ asked bool }

func (p *probe) Sample(zerolog.Level) bool {
	p.asked = true
	return false
}
