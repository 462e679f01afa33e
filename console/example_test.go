package console_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/outboxkit/outbox/console"
	"github.com/outboxkit/outbox/store/sqlite"
)

// Mounting the console in a service, under a prefix and behind the
// service's own authentication (here a stand-in that checks a header).
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outbox-console-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "outbox.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlite.New(sqlite.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.CreateSchema(ctx, db); err != nil {
		log.Fatal(err)
	}

	c, err := console.New(console.Config{DB: db, Store: store, Title: "orders", AllowWrites: true})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ops/outbox/", adminOnly(http.StripPrefix("/ops/outbox", c)))

	srv := httptest.NewServer(mux)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/ops/outbox/dead", nil)
	req.Header.Set("X-Admin", "yes")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, strings.Contains(string(body), "No dead events"))
	// Output: 200 true
}

// adminOnly stands for the service's authentication.
func adminOnly(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Admin") != "yes" {
			http.Error(w, "forbidden", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}
