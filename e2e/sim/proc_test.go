package sim

import (
	"strings"
	"testing"
)

const metricsText = `# HELP sharetx_markers_total markers
# TYPE sharetx_markers_total counter
sharetx_markers_total{type="commit"} 7
sharetx_markers_total{type="abort"} 2
sharetx_markers_total_extra 100
sharetx_tx_pending_records 0
go_goroutines 12
`

func TestParseMetricsAndSum(t *testing.T) {
	m, err := ParseMetrics(strings.NewReader(metricsText), "sharetx_")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m["go_goroutines"]; ok {
		t.Fatalf("prefix not applied: %v", m)
	}
	if len(m) != 4 || m[`sharetx_markers_total{type="commit"}`] != 7 {
		t.Fatalf("parsed %v", m)
	}
	for _, tc := range []struct {
		name   string
		labels []string
		sum    float64
		found  bool
	}{
		{"sharetx_markers_total", nil, 9, true},
		{"sharetx_markers_total", []string{`type="commit"`}, 7, true},
		{"sharetx_markers_total", []string{`type="none"`}, 0, false},
		{"sharetx_tx_pending_records", nil, 0, true},
		{"sharetx_absent", nil, 0, false},
	} {
		sum, found := Sum(m, tc.name, tc.labels...)
		if sum != tc.sum || found != tc.found {
			t.Errorf("Sum(%s, %v) = %v, %v; want %v, %v", tc.name, tc.labels, sum, found, tc.sum, tc.found)
		}
	}
}
