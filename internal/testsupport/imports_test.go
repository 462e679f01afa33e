package testsupport_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLibraryDoesNotImportTestSupport: no non-test package outside the test
// support itself, bench and reliability depends on internal/testsupport, so
// that the test helpers (which import the dispatcher, the poller and every
// dialect) never end up in a user's program.
func TestLibraryDoesNotImportTestSupport(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list over the module")
	}
	const module = "github.com/outboxkit/outbox/"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, module+"...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := []string{module + "internal/testsupport", module + "bench", module + "reliability"}
	checked := 0
	for line := range strings.Lines(string(out)) {
		pkg, deps, _ := strings.Cut(strings.TrimSpace(line), " ")
		if hasAnyPrefix(pkg, allowed) {
			continue
		}
		checked++
		for dep := range strings.FieldsSeq(deps) {
			if strings.HasPrefix(dep, module+"internal/testsupport") {
				t.Errorf("%s imports %s", pkg, dep)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d library packages checked; go list output:\n%s", checked, out)
	}
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if s == p || strings.HasPrefix(s, p+"/") {
			return true
		}
	}
	return false
}
