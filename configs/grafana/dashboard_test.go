// Package grafana holds the Grafana dashboard of sharetx
// (sharetx-dashboard.json; import it, or provision it from a ConfigMap) and
// its test: every series a panel queries is one the code registers, with the
// labels the query uses, and every series the code registers is on a panel.
package grafana

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sharetx/sharetx/configs/internal/codefacts"
)

type dashboard struct {
	Title         string  `json:"title"`
	UID           string  `json:"uid"`
	SchemaVersion int     `json:"schemaVersion"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	GridPos     struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
		RefID        string `json:"refId"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

var panelTypes = map[string]bool{"timeseries": true, "stat": true, "gauge": true, "bargauge": true, "table": true}

func load(t *testing.T) dashboard {
	t.Helper()
	raw, err := os.ReadFile("sharetx-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("sharetx-dashboard.json: %v", err)
	}
	return d
}

func metrics(t *testing.T) map[string]codefacts.Metric {
	t.Helper()
	root, err := codefacts.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ms, err := codefacts.Metrics(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) == 0 {
		t.Fatal("no metrics found in the code")
	}
	return ms
}

// check returns every problem of d against the registered metrics.
func check(d dashboard, ms map[string]codefacts.Metric) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if d.Title == "" || d.UID == "" {
		fail("the dashboard needs a title and a uid")
	}
	if d.SchemaVersion < 36 {
		fail("schemaVersion %d: panels here use the timeseries format of Grafana 9+ (36+)", d.SchemaVersion)
	}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
		if v.Type == "datasource" && v.Query != "prometheus" {
			fail("variable %s: a datasource variable of type %v, want prometheus", v.Name, v.Query)
		}
		if v.Type == "query" {
			q := fmt.Sprint(v.Query)
			if m, ok := v.Query.(map[string]any); ok {
				q = fmt.Sprint(m["query"])
			}
			errs = append(errs, codefacts.CheckPromQL("variable "+v.Name, q, ms)...)
		}
	}
	for _, v := range []string{"datasource", "namespace", "pod"} {
		if !vars[v] {
			fail("no $%s variable", v)
		}
	}

	used := map[string]bool{}
	ids := map[int]bool{}
	type rect struct {
		title      string
		x, y, w, h int
	}
	var rects []rect
	var all []panel
	for _, p := range d.Panels {
		all = append(all, p)
		all = append(all, p.Panels...)
	}
	for _, p := range all {
		if ids[p.ID] {
			fail("panel id %d used twice", p.ID)
		}
		ids[p.ID] = true
		g := p.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.X+g.W > 24 {
			fail("panel %q: gridPos %+v is outside the 24-column grid", p.Title, g)
		}
		for _, r := range rects {
			if g.X < r.x+r.w && r.x < g.X+g.W && g.Y < r.y+r.h && r.y < g.Y+g.H {
				fail("panels %q and %q overlap", p.Title, r.title)
			}
		}
		rects = append(rects, rect{p.Title, g.X, g.Y, g.W, g.H})
		if p.Type == "row" {
			continue
		}
		where := fmt.Sprintf("panel %q", p.Title)
		if !panelTypes[p.Type] {
			fail("%s: type %q", where, p.Type)
		}
		if p.Title == "" || p.Description == "" {
			fail("panel %d needs a title and a description", p.ID)
		}
		if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			fail("%s: datasource must be ${datasource}", where)
		}
		if len(p.Targets) == 0 {
			fail("%s: no query", where)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if refs[tg.RefID] || tg.RefID == "" {
				fail("%s: refId %q missing or repeated", where, tg.RefID)
			}
			refs[tg.RefID] = true
			errs = append(errs, codefacts.CheckPromQL(where, tg.Expr, ms)...)
			// Every series is filtered by the dashboard's variables.
			for name, sels := range codefacts.Selectors(tg.Expr) {
				for _, s := range sels {
					if !strings.Contains(s, `pod=~"$pod"`) || !strings.Contains(s, `namespace=~"$namespace"`) {
						fail("%s: %s is not filtered by $namespace and $pod", where, name)
					}
				}
			}
			for _, r := range codefacts.SeriesRefs(tg.Expr) {
				if m, ok := codefacts.Resolve(ms, r); ok {
					used[m.Name] = true
				}
			}
			errs = append(errs, checkLegend(where, tg.Expr, tg.LegendFormat, ms)...)
		}
	}

	var missing []string
	for name := range ms {
		if !used[name] {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	for _, name := range missing {
		fail("series %s (registered in %s) is on no panel", name, ms[name].File)
	}
	return errs
}

var (
	legendRe = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)
	byRe     = regexp.MustCompile(`\bby\s*\(([^)]*)\)`)
	aggRe    = regexp.MustCompile(`\b(sum|min|max|avg|count|histogram_quantile)\s*\(`)
)

// checkLegend: a {{label}} in the legend must survive the query: a label of
// its by() clause, or, when nothing aggregates, of the series or the target.
func checkLegend(where, expr, legend string, ms map[string]codefacts.Metric) []error {
	var errs []error
	kept := map[string]bool{}
	if bys := byRe.FindAllStringSubmatch(expr, -1); len(bys) > 0 {
		for _, l := range strings.Split(bys[0][1], ",") {
			kept[strings.TrimSpace(l)] = true
		}
	} else if !aggRe.MatchString(expr) {
		for k := range codefacts.TargetLabels {
			kept[k] = true
		}
		for _, r := range codefacts.SeriesRefs(expr) {
			m, _ := codefacts.Resolve(ms, r)
			for _, l := range m.Labels {
				kept[l] = true
			}
		}
	}
	for _, m := range legendRe.FindAllStringSubmatch(legend, -1) {
		if !kept[m[1]] {
			errs = append(errs, fmt.Errorf("%s: legend {{%s}} is not a label the query keeps", where, m[1]))
		}
	}
	return errs
}

// TestDashboard: the dashboard matches the code, both ways.
func TestDashboard(t *testing.T) {
	for _, err := range check(load(t), metrics(t)) {
		t.Error(err)
	}
}

// TestDashboardKIPPanels: the KIP-1289 series the issue names each have a
// panel of their own (their name in its title or description).
func TestDashboardKIPPanels(t *testing.T) {
	d := load(t)
	for _, name := range []string{"tx_pending_records", "txn_share_acknowledge_total", "markers_total",
		"commit_to_applied_seconds", "upstream_ack_failures_total", "client_acks_absorbed_total",
		"client_share_session_epoch_errors_total", "lock_renewals_total", "lock_renewal_supported",
		"shadow_known_records", "redelivered_records_total"} {
		found := false
		for _, p := range d.Panels {
			for _, tg := range p.Targets {
				found = found || strings.Contains(tg.Expr, "sharetx_"+name)
			}
		}
		if !found {
			t.Errorf("no panel queries sharetx_%s", name)
		}
	}
}

// TestChecksCatchBrokenDashboard: the check fails on a renamed series, a
// label that does not exist, a counter graphed raw, and a series the code
// registers but no panel shows.
func TestChecksCatchBrokenDashboard(t *testing.T) {
	ms := metrics(t)
	cases := []struct {
		name, want string
		edit       func(d *dashboard)
	}{
		{"renamed series", "not registered", func(d *dashboard) {
			d.Panels[1].Targets[0].Expr = `min(sharetx_upstream_broker{namespace=~"$namespace", pod=~"$pod"})`
		}},
		{"label that does not exist", "has no label", func(d *dashboard) {
			d.Panels[1].Targets[0].Expr = `min(sharetx_upstream_brokers{namespace=~"$namespace", pod=~"$pod", api="x"})`
		}},
		{"counter without rate", "without rate()", func(d *dashboard) {
			d.Panels[3].Targets[0].Expr = `sum(sharetx_requests_total{namespace=~"$namespace", pod=~"$pod"})`
		}},
		{"series on no panel", "is on no panel", func(d *dashboard) {
			var kept []panel
			for _, p := range d.Panels {
				if !strings.Contains(fmt.Sprint(p.Targets), "sharetx_shadow_known_records") {
					kept = append(kept, p)
				}
			}
			d.Panels = kept
		}},
		{"not filtered by pod", "not filtered", func(d *dashboard) {
			d.Panels[1].Targets[0].Expr = `min(sharetx_upstream_brokers)`
		}},
		{"legend label dropped by the aggregation", "legend {{api}}", func(d *dashboard) {
			d.Panels[3].Targets[0].LegendFormat = "{{api}}"
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := load(t)
			tc.edit(&d)
			for _, err := range check(d, ms) {
				if strings.Contains(err.Error(), tc.want) {
					return
				}
			}
			t.Errorf("not reported with %q", tc.want)
		})
	}
}
