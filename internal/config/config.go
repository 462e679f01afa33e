// Package config holds what every component's Config uses to validate
// itself, so that the rules read the same way and fail with the same kind
// of error in every package. Defaults need no helper: a zero field takes its
// default with cmp.Or(field, Default), and a nil func field with an if.
package config

import (
	"time"

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

// Clock returns now, or time.Now when now is nil: the default of every
// Config's Now field.
func Clock(now func() time.Time) func() time.Time {
	if now == nil {
		return time.Now
	}
	return now
}
