package storegen_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/outboxkit/outbox/store/internal/storegen"
)

var update = flag.Bool("update", false, "rewrite the generated files (as go generate ./store/... does)")

// TestGeneratedFilesUpToDate: each dialect's store_gen.go is what the
// generator writes today, so that go generate after a change of the method
// list is never forgotten.
func TestGeneratedFilesUpToDate(t *testing.T) {
	for _, d := range storegen.Dialects {
		t.Run(d.Pkg, func(t *testing.T) {
			want, err := storegen.Generate(d)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("..", "..", d.Pkg, storegen.FileName)
			if *update {
				if err := os.WriteFile(path, want, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s is stale: run go generate ./store/... (or go test ./store/internal/storegen -update)", path)
			}
		})
	}
}
