package tooltest_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPagesShowTheExamples: the "Using with goose" and "Using with
// golang-migrate" pages show the examples of this package as they are, so
// the pages' examples are ones that run.
func TestPagesShowTheExamples(t *testing.T) {
	t.Parallel()
	for page, example := range map[string]string{
		"goose.md":          "example_goose_test.go",
		"golang-migrate.md": "example_migrate_test.go",
	} {
		text, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "integrations", page))
		if err != nil {
			t.Fatal(err)
		}
		code, err := os.ReadFile(example)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(text), "```go\n"+string(code)+"```\n") {
			t.Errorf("docs/integrations/%s does not show %s as it is; copy the file into the page", page, example)
		}
	}
}
