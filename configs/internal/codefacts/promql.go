package codefacts

import (
	"fmt"
	"regexp"
	"strings"
)

// TargetLabels are the labels Prometheus attaches to every series it
// scrapes from a pod (the Prometheus Operator's PodMonitor relabelling),
// which queries may match and group by besides a series' own labels.
var TargetLabels = map[string]bool{"job": true, "instance": true, "pod": true, "namespace": true, "container": true, "endpoint": true, "service": true}

var (
	selectorRe = regexp.MustCompile(`(sharetx_[a-z0-9_]*[a-z0-9])\{([^}]*)\}`)
	matcherRe  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)`)
	byRe       = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// CheckPromQL checks, without a PromQL parser, what can drift from the code
// in a query: each sharetx series it names is registered, a counter is only
// used through rate() or increase(), the labels it matches exist on the
// series, and the labels it groups by exist on one of its series. Brackets
// must balance. It returns one error per problem, prefixed with where.
func CheckPromQL(where, expr string, metrics map[string]Metric) []error {
	var errs []error
	if strings.Count(expr, "(") != strings.Count(expr, ")") || strings.Count(expr, "{") != strings.Count(expr, "}") || strings.Count(expr, "[") != strings.Count(expr, "]") {
		errs = append(errs, fmt.Errorf("%s: unbalanced brackets in %q", where, expr))
	}
	refs := SeriesRefs(expr)
	if len(refs) == 0 {
		return errs
	}
	labels := map[string]bool{}
	for k := range TargetLabels {
		labels[k] = true
	}
	for _, r := range refs {
		m, ok := Resolve(metrics, r)
		if !ok {
			errs = append(errs, fmt.Errorf("%s: series %s is not registered by the code", where, r))
			continue
		}
		if m.Type == "counter" && !regexp.MustCompile(`\b(rate|irate|increase)\(\s*`+r+`\b`).MatchString(expr) {
			errs = append(errs, fmt.Errorf("%s: counter %s used without rate() or increase()", where, r))
		}
		if m.Type == "histogram" && r == m.Name {
			errs = append(errs, fmt.Errorf("%s: histogram %s has no series of that name (use _bucket, _sum or _count)", where, r))
		}
		if strings.HasSuffix(r, "_bucket") {
			labels["le"] = true
		}
		for _, l := range m.Labels {
			labels[l] = true
		}
	}
	for _, sm := range selectorRe.FindAllStringSubmatch(expr, -1) {
		m, ok := Resolve(metrics, sm[1])
		if !ok {
			continue
		}
		own := map[string]bool{"le": strings.HasSuffix(sm[1], "_bucket")}
		for _, l := range m.Labels {
			own[l] = true
		}
		for _, mm := range matcherRe.FindAllStringSubmatch(sm[2], -1) {
			if !own[mm[1]] && !TargetLabels[mm[1]] {
				errs = append(errs, fmt.Errorf("%s: %s has no label %s (it has %v)", where, sm[1], mm[1], m.Labels))
			}
		}
	}
	for _, bm := range byRe.FindAllStringSubmatch(expr, -1) {
		for _, l := range strings.Split(bm[1], ",") {
			if l = strings.TrimSpace(l); l != "" && !labels[l] {
				errs = append(errs, fmt.Errorf("%s: groups by %s, a label none of its series has", where, l))
			}
		}
	}
	return errs
}

// Selectors returns, for each sharetx series reference in expr, the label
// matchers written in its braces ("" when it has none).
func Selectors(expr string) map[string][]string {
	out := map[string][]string{}
	re := regexp.MustCompile(`(sharetx_[a-z0-9_]*[a-z0-9])(\{[^}]*\})?`)
	for _, m := range re.FindAllStringSubmatch(expr, -1) {
		out[m[1]] = append(out[m[1]], strings.Trim(m[2], "{}"))
	}
	return out
}
