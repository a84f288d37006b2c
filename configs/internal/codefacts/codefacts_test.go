package codefacts

import (
	"strings"
	"testing"
)

func root(t *testing.T) string {
	t.Helper()
	r, err := RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The scanner finds the series the README lists, with their types and
// labels: if it found nothing, every check built on it would pass vacuously.
func TestMetricsFound(t *testing.T) {
	ms, err := Metrics(root(t))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"sharetx_requests_total":            "counter",
		"sharetx_request_duration_seconds":  "histogram",
		"sharetx_client_connections_active": "gauge",
		"sharetx_tx_pending_records":        "gauge",
		"sharetx_commit_to_applied_seconds": "histogram",
		"sharetx_redelivered_records_total": "counter",
		"sharetx_lock_renewal_supported":    "gauge",
	}
	for name, typ := range want {
		m, ok := ms[name]
		if !ok {
			t.Errorf("%s not found", name)
			continue
		}
		if m.Type != typ {
			t.Errorf("%s: type %s, want %s", name, m.Type, typ)
		}
		if m.Help == "" {
			t.Errorf("%s: no help text found", name)
		}
	}
	if got := strings.Join(ms["sharetx_markers_total"].Labels, ","); got != "type,via" {
		t.Errorf("sharetx_markers_total labels %q, want type,via", got)
	}
	if len(ms) < 20 {
		t.Errorf("only %d series found", len(ms))
	}
}

func TestResolve(t *testing.T) {
	ms := map[string]Metric{
		"sharetx_h": {Name: "sharetx_h", Type: "histogram"},
		"sharetx_c": {Name: "sharetx_c", Type: "counter"},
	}
	for name, ok := range map[string]bool{
		"sharetx_h": true, "sharetx_h_bucket": true, "sharetx_h_sum": true, "sharetx_h_count": true,
		"sharetx_c": true, "sharetx_c_bucket": false, "sharetx_x": false,
	} {
		if _, got := Resolve(ms, name); got != ok {
			t.Errorf("Resolve(%s) = %v, want %v", name, got, ok)
		}
	}
	if got := SeriesRefs(`rate(sharetx_a_total[5m]) / sharetx_b_bucket{le="1"} and sharetx_a_total`); strings.Join(got, " ") != "sharetx_a_total sharetx_b_bucket" {
		t.Errorf("SeriesRefs: %v", got)
	}
}

func TestFlagsPathsTestsTargets(t *testing.T) {
	r := root(t)
	flags, err := Flags(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"config", "upstream", "bootstrap", "metrics", "check-config"} {
		if _, ok := flags[f]; !ok {
			t.Errorf("flag --%s not found (have %v)", f, flags)
		}
	}
	paths, err := HTTPPaths(r)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(paths, " ") != "/debug/pprof/ /debug/pprof/cmdline /debug/pprof/profile /debug/pprof/symbol /debug/pprof/trace /healthz /metrics /readyz" {
		t.Errorf("HTTP paths %v", paths)
	}
	tests, err := Tests(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"TestKIP1289ProxyKilled", "TestShutdownDrains", "FuzzTxnShareAcknowledge", "TestFlagsPathsTestsTargets"} {
		if tests[n] == "" {
			t.Errorf("test %s not found", n)
		}
	}
	targets, err := MakeTargets(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"test", "build", "kafka-up", "chaos"} {
		if !targets[n] {
			t.Errorf("make target %s not found", n)
		}
	}
	if targets["PHONY"] || targets[".PHONY"] {
		t.Error(".PHONY taken for a target")
	}
}

func TestCheckPromQL(t *testing.T) {
	ms := map[string]Metric{
		"sharetx_c_total": {Name: "sharetx_c_total", Type: "counter", Labels: []string{"result"}},
		"sharetx_h":       {Name: "sharetx_h", Type: "histogram"},
		"sharetx_g":       {Name: "sharetx_g", Type: "gauge"},
	}
	good := []string{
		`sum by (result) (rate(sharetx_c_total{pod=~"$pod", result!="ok"}[5m]))`,
		`histogram_quantile(0.99, sum by (le, pod) (rate(sharetx_h_bucket[5m])))`,
		`sharetx_g > 3`,
		`up{container="sharetx"} == 0`,
		`sum by (result) (rate(sharetx_c_total{result=~"$x"}[$__rate_interval]))`,
		`label_values(sharetx_g{namespace=~"$namespace"}, pod)`,
		`sum by (job) (up) / sum by (job) (up)`,
	}
	for _, e := range good {
		if errs := CheckPromQL("good", e, ms); len(errs) > 0 {
			t.Errorf("%s: %v", e, errs)
		}
	}
	bad := map[string]string{
		`sharetx_c_total > 0`:                                      "without rate()",
		`rate(sharetx_x_total[5m])`:                                "not registered",
		`rate(sharetx_c_total{outcome="x"}[5m])`:                   "no label outcome",
		`sum by (kind) (rate(sharetx_c_total[5m]))`:                "groups by kind",
		`sharetx_h > 1`:                                            "use _bucket",
		`sum(rate(sharetx_c_total[5m])`:                            "does not parse",
		`rate(sharetx_c_total[5m]) by (result)`:                    "does not parse",
		`increase(sharetx_h_bucket{le="1"}[5m]) + sharetx_c_total`: "without rate()",
		`sum by (result) (sharetx_g)`:                              "groups by result",
		`sum by (le) (sharetx_g)`:                                  "groups by le",
	}
	for e, want := range bad {
		errs := CheckPromQL("bad", e, ms)
		found := false
		for _, err := range errs {
			found = found || strings.Contains(err.Error(), want)
		}
		if !found {
			t.Errorf("%s: want an error with %q, got %v", e, want, errs)
		}
	}
}
