package codefacts

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
)

// TargetLabels are the labels Prometheus attaches to every series it
// scrapes from a pod (the Prometheus Operator's PodMonitor relabelling),
// which queries may match and group by besides a series' own labels.
var TargetLabels = map[string]bool{"job": true, "instance": true, "pod": true, "namespace": true, "container": true, "endpoint": true, "service": true}

var promql = parser.NewParser(parser.Options{})

// grafanaVars are Grafana's range variables, read as 5m; labelValues is a
// Grafana query variable's label_values(selector, label).
var (
	grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "${__rate_interval}", "5m", "$__interval", "5m", "$__range", "5m")
	labelValues = regexp.MustCompile(`^\s*label_values\((.*),\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)\s*$`)
)

// CheckPromQL checks, with Prometheus's own PromQL parser, what can drift
// from the code in a query (an alert rule's, a dashboard panel's or query
// variable's; Grafana's range variables read as 5m, label_values(selector,
// label) as its selector): it parses; each sharetx series it names is
// registered; a counter is read only through rate(), irate() or increase();
// a histogram only through its _bucket, _sum or _count series; the labels a
// selector matches exist on its series (or are target labels); the labels an
// aggregation groups by exist on one of the series it aggregates. It returns
// one error per problem, prefixed with where.
func CheckPromQL(where, expr string, metrics map[string]Metric) []error {
	q := grafanaVars.Replace(expr)
	if m := labelValues.FindStringSubmatch(q); m != nil {
		q = m[1]
	}
	root, err := promql.ParseExpr(q)
	if err != nil {
		return []error{fmt.Errorf("%s: %q does not parse: %v", where, expr, err)}
	}
	var errs []error
	parser.Inspect(root, func(n parser.Node, path []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			errs = append(errs, checkSelector(where, n, path, metrics)...)
		case *parser.AggregateExpr:
			if n.Without || len(n.Grouping) == 0 {
				return nil
			}
			have, unknown := seriesLabels(n.Expr, metrics)
			for _, l := range n.Grouping {
				if !have[l] && !unknown {
					errs = append(errs, fmt.Errorf("%s: groups by %s, a label none of its series has", where, l))
				}
			}
		}
		return nil
	})
	return errs
}

// checkSelector checks one selector of a sharetx series (path: its
// ancestors, outermost first).
func checkSelector(where string, vs *parser.VectorSelector, path []parser.Node, metrics map[string]Metric) []error {
	if !strings.HasPrefix(vs.Name, "sharetx_") {
		return nil
	}
	m, ok := Resolve(metrics, vs.Name)
	if !ok {
		return []error{fmt.Errorf("%s: series %s is not registered by the code", where, vs.Name)}
	}
	var errs []error
	if m.Type == "counter" && !inRate(path) {
		errs = append(errs, fmt.Errorf("%s: counter %s used without rate() or increase()", where, vs.Name))
	}
	if m.Type == "histogram" && vs.Name == m.Name {
		errs = append(errs, fmt.Errorf("%s: histogram %s has no series of that name (use _bucket, _sum or _count)", where, vs.Name))
	}
	own := ownLabels(vs.Name, m)
	for _, lm := range vs.LabelMatchers {
		if lm.Name != model.MetricNameLabel && !own[lm.Name] {
			errs = append(errs, fmt.Errorf("%s: %s has no label %s (it has %v)", where, vs.Name, lm.Name, m.Labels))
		}
	}
	return errs
}

// inRate: the selector is the range of a rate(), irate() or increase().
func inRate(path []parser.Node) bool {
	if len(path) < 2 {
		return false
	}
	if _, ok := path[len(path)-1].(*parser.MatrixSelector); !ok {
		return false
	}
	c, ok := path[len(path)-2].(*parser.Call)
	return ok && (c.Func.Name == "rate" || c.Func.Name == "irate" || c.Func.Name == "increase")
}

// ownLabels are the labels a series of m named name carries, target labels
// included.
func ownLabels(name string, m Metric) map[string]bool {
	own := map[string]bool{"le": strings.HasSuffix(name, "_bucket")}
	for k := range TargetLabels {
		own[k] = true
	}
	for _, l := range m.Labels {
		own[l] = true
	}
	return own
}

// seriesLabels are the labels any series selected under n carries; unknown
// when one of them is not sharetx's (what it carries is not known here).
func seriesLabels(n parser.Node, metrics map[string]Metric) (have map[string]bool, unknown bool) {
	have = map[string]bool{}
	parser.Inspect(n, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		m, ok := Resolve(metrics, vs.Name)
		if !ok || !strings.HasPrefix(vs.Name, "sharetx_") {
			unknown = true
			return nil
		}
		for l, ok := range ownLabels(vs.Name, m) {
			have[l] = have[l] || ok
		}
		return nil
	})
	return have, unknown
}

// Selectors returns, for each sharetx series a query selects, the label
// matchers written in its braces (the name's own left out; "" when it has
// none), e.g. `outcome="unverified"`.
func Selectors(expr string) map[string][]string {
	out := map[string][]string{}
	root, err := promql.ParseExpr(grafanaVars.Replace(expr))
	if err != nil {
		return out
	}
	parser.Inspect(root, func(n parser.Node, _ []parser.Node) error {
		vs, ok := n.(*parser.VectorSelector)
		if !ok || !strings.HasPrefix(vs.Name, "sharetx_") {
			return nil
		}
		var ms []string
		for _, lm := range vs.LabelMatchers {
			if lm.Name != model.MetricNameLabel {
				ms = append(ms, lm.String())
			}
		}
		sort.Strings(ms)
		out[vs.Name] = append(out[vs.Name], strings.Join(ms, ", "))
		return nil
	})
	return out
}
