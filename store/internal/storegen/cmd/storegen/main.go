// Command storegen writes store_gen.go, the delegating methods of one
// dialect's Store, into the current directory. Each dialect package runs it
// with go generate:
//
//	//go:generate go run ../internal/storegen/cmd/storegen -pkg postgres
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/outboxkit/outbox/store/internal/storegen"
)

func main() {
	pkg := flag.String("pkg", "", "package name of the dialect (postgres, mysql or sqlite)")
	flag.Parse()
	d, ok := storegen.Lookup(*pkg)
	if !ok {
		fmt.Fprintf(os.Stderr, "storegen: unknown dialect package %q\n", *pkg)
		os.Exit(2)
	}
	src, err := storegen.Generate(d)
	if err == nil {
		err = os.WriteFile(storegen.FileName, src, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
