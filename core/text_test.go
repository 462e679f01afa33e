package core

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// textRule is checkText's rule stated with the standard library, one
// question at a time: what the single pass of checkText must agree with.
func textRule(s string, maxLen int, required bool) string {
	switch {
	case s == "" && required:
		return "is empty"
	case required && strings.TrimSpace(s) == "":
		return "is only whitespace"
	case len(s) > maxLen:
		return "exceeds the limit"
	case !utf8.ValidString(s):
		return "is not valid UTF-8"
	case strings.ContainsRune(s, 0):
		return "contains a NUL byte"
	}
	return ""
}

// FuzzCheckText checks that checkText refuses exactly what textRule
// refuses, for the same reason.
func FuzzCheckText(f *testing.F) {
	for _, s := range []string{"", " ", "\t\n\v\f\r ", "\u00a0\u2003", "\u00a0x", "order", "a\x00b", "\xff", " \xff ",
		"\u0085", "\ufffd", "é", strings.Repeat("x", 40), "\x00", "\u3000\u3000"} {
		f.Add(s, true)
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, s string, required bool) {
		want := textRule(s, 36, required)
		err := checkText("field", s, 36, required)
		switch {
		case want == "" && err != nil:
			t.Fatalf("checkText(%q, required %v) = %v, want nil", s, required, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Fatalf("checkText(%q, required %v) = %v, want an error that %s", s, required, err, want)
		}
	})
}

// TestGeneratedIDs: only an id NewEnvelope generated counts as generated;
// a write holds its INSERT back only when every id in it does.
func TestGeneratedIDs(t *testing.T) {
	envelope := func(id string) Envelope {
		env, err := NewEnvelope(EnvelopeSpec{ID: id, Type: EventName("Placed"), JSON: []byte(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	generated, chosen := envelope(""), envelope(NewEventID())
	restored, err := RestoreEnvelope(EnvelopeFields{ID: generated.ID(), Type: "Placed", AggregateType: GlobalAggregateName,
		OccurredAt: generated.OccurredAt(), Payload: []byte(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		envs []Envelope
		want bool
	}{
		{"generated", []Envelope{generated, generated}, true},
		{"chosen", []Envelope{chosen}, false},
		{"restored", []Envelope{restored}, false},
		{"generated and chosen", []Envelope{generated, chosen}, false},
	} {
		if got := generatedIDs(c.envs); got != c.want {
			t.Errorf("%s: generatedIDs = %v, want %v", c.name, got, c.want)
		}
	}
}
