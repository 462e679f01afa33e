package postgres_test

import (
	"strings"
	"testing"

	"github.com/outboxkit/outbox/store/postgres"
)

// TestChannel: channel names fit PostgreSQL's 63-byte identifiers, which
// LISTEN would otherwise truncate (pg_notify would not), and distinct tables,
// however long their names, get distinct channels.
func TestChannel(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("a", 63)
	tables := []string{"outbox_event", "app.outbox_event", "other.outbox_event", long, "s." + long, long + "." + long, long[:62] + "b." + long}
	seen := map[string]string{}
	for _, table := range tables {
		ch := postgres.Channel(table)
		if len(ch) > 63 {
			t.Errorf("Channel(%q) = %q: %d bytes, over 63", table, ch, len(ch))
		}
		if other, dup := seen[ch]; dup {
			t.Errorf("tables %q and %q share channel %q", other, table, ch)
		}
		seen[ch] = table
		if ch != postgres.Channel(table) {
			t.Errorf("Channel(%q) is not stable", table)
		}
	}
	if got := postgres.Channel("app.outbox_event"); got != "outbox:app.outbox_event" {
		t.Errorf("Channel(app.outbox_event) = %q, want outbox:app.outbox_event", got)
	}
}
