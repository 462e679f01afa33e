package prometheus

import (
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	prom "github.com/prometheus/client_golang/prometheus"

	"github.com/outboxkit/outbox/internal/testsupport/testdb"
)

// The dashboard and the alert rules in monitoring/ query series by name; a
// renamed or removed series would leave a panel empty or an alert that can
// never fire, with no error anywhere. These tests tie them to the code.

// recorder is a Registerer that keeps what is registered on it.
type recorder struct {
	prom.Registerer
	collectors []prom.Collector
}

func (r *recorder) Register(c prom.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registerer.Register(c)
}

func (r *recorder) MustRegister(cs ...prom.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// exportedSeries returns the names of every series the Exporter and the
// Sampler register with the default namespace.
func exportedSeries(t *testing.T) []string {
	t.Helper()
	rec := &recorder{Registerer: prom.NewRegistry()}
	if _, err := New(Config{Registerer: rec}); err != nil {
		t.Fatal(err)
	}
	tg := testdb.SQLite(t)
	newSampler(t, SamplerConfig{Metrics: Config{Registerer: rec}, DB: tg.DB, Store: inspector(t, tg)})

	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	var names []string
	for _, c := range rec.collectors {
		descs := make(chan *prom.Desc, 16)
		go func() { c.Describe(descs); close(descs) }()
		for d := range descs {
			m := fqName.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("no fqName in %s", d)
			}
			names = append(names, m[1])
		}
	}
	if len(names) < 10 {
		t.Fatalf("found only %d series (%v): the descriptor format changed?", len(names), names)
	}
	return names
}

var seriesName = regexp.MustCompile(`\boutbox_[a-z_]+\b`)

// dashboardExprs returns every query of the Grafana dashboard.
func dashboardExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("monitoring/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("dashboard.json: %v", err)
	}
	var exprs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query") {
					exprs = append(exprs, s)
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	return exprs
}

// alertExprs returns the expr lines of the alert rules.
func alertExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("monitoring/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, m := range regexp.MustCompile(`(?m)^\s*expr:\s*(.+)$`).FindAllStringSubmatch(string(raw), -1) {
		exprs = append(exprs, m[1])
	}
	return exprs
}

// TestMonitoringSeriesExist checks that every series the dashboard and the
// alerts query is one the code exports, and that every exported series is
// shown or alerted on somewhere.
func TestMonitoringSeriesExist(t *testing.T) {
	exported := exportedSeries(t)
	used := map[string]bool{}
	for file, exprs := range map[string][]string{"dashboard.json": dashboardExprs(t), "alerts.yml": alertExprs(t)} {
		if len(exprs) == 0 {
			t.Fatalf("%s: no queries found", file)
		}
		for _, e := range exprs {
			for _, name := range seriesName.FindAllString(e, -1) {
				// A histogram is queried through its _bucket, _sum and
				// _count series.
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(exported, base) {
						name = base
					}
				}
				used[name] = true
				if !slices.Contains(exported, name) {
					t.Errorf("%s queries %s, which the exporter and sampler do not export (they export %s)",
						file, name, strings.Join(exported, ", "))
				}
			}
		}
	}
	for _, name := range exported {
		if !used[name] {
			t.Errorf("series %s is on neither the dashboard nor in an alert rule", name)
		}
	}
}

// TestAlertRules runs promtool on the rules: a syntax check, and the unit
// tests in alerts_test.yml, which say when each alert fires and when not.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		msg := "promtool not found (Debian package prometheus)"
		if testdb.Required() {
			t.Fatal(msg + "; OUTBOX_REQUIRE_DBS=1 requires it")
		}
		t.Skip(msg + "; OUTBOX_REQUIRE_DBS=1 makes this a failure")
	}
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "monitoring"
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
