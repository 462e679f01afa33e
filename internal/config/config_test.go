package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outboxkit/outbox/core"
	"github.com/outboxkit/outbox/internal/config"
)

func TestValidatorKeepsTheFirstBrokenRule(t *testing.T) {
	t.Parallel()
	v := config.Validator{Component: "thing config"}
	v.Require("Store", true)
	config.NonNegative(&v, "Size", 0)
	if err := v.Err(); err != nil {
		t.Fatalf("no rule broken, got %v", err)
	}
	v.Require("DB", false)
	config.NonNegative(&v, "Timeout", -time.Second)
	config.Owner(&v, strings.Repeat("o", core.MaxOwnerLen+1))
	err := v.Err()
	var ve *core.ValidationError
	if !errors.Is(err, core.ErrInvalid) || !errors.As(err, &ve) {
		t.Fatalf("err = %v, want a *core.ValidationError", err)
	}
	if ve.Field != "thing config" || ve.Reason != "DB is nil" {
		t.Errorf("got %q: %q, want thing config: DB is nil", ve.Field, ve.Reason)
	}
}

func TestValidatorRules(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		rule func(*config.Validator)
		want string // "" when the rule holds
	}{
		{"negative int", func(v *config.Validator) { config.NonNegative(v, "N", -1) }, "N is negative"},
		{"negative duration", func(v *config.Validator) { config.NonNegative(v, "D", -time.Nanosecond) }, "D is negative"},
		{"zero", func(v *config.Validator) { config.NonNegative(v, "N", 0) }, ""},
		{"owner at limit", func(v *config.Validator) { config.Owner(v, strings.Repeat("o", core.MaxOwnerLen)) }, ""},
		{"owner over limit", func(v *config.Validator) { config.Owner(v, strings.Repeat("o", core.MaxOwnerLen+1)) }, "Owner is 129 bytes, more than 128"},
		{"check", func(v *config.Validator) { v.Check(false, "A %d exceeds B %d", 2, 1) }, "A 2 exceeds B 1"},
	} {
		v := config.Validator{Component: "c"}
		tt.rule(&v)
		err := v.Err()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v, want nil", tt.name, err)
		case tt.want != "" && (err == nil || !strings.HasSuffix(err.Error(), ": "+tt.want)):
			t.Errorf("%s: %v, want one ending in %q", tt.name, err, tt.want)
		}
	}
}

func TestClock(t *testing.T) {
	fixed := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if got := config.Clock(func() time.Time { return fixed })(); !got.Equal(fixed) {
		t.Errorf("Clock(f)() = %v, want f's %v", got, fixed)
	}
	if got := config.Clock(nil)(); time.Since(got) > time.Minute || got.IsZero() {
		t.Errorf("Clock(nil)() = %v, want the current time", got)
	}
}
