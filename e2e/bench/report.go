package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"text/tabwriter"
)

// goal is one of issue 5's targets: measured, never asserted.
type goal struct {
	Name     string  `json:"name"`
	Measured float64 `json:"measured"`
	Goal     float64 `json:"goal"`
	Unit     string  `json:"unit"`
	AtLeast  bool    `json:"at_least"` // true: measured >= goal; false: measured <= goal
	Met      bool    `json:"met"`
	Valid    bool    `json:"valid"` // false: not measured (a failed or skipped phase)
	Detail   string  `json:"detail"`
	// Context: what else the same run measured that bears on the goal (a
	// physical floor or ceiling), printed under the tables.
	Context string `json:"context,omitempty"`
}

func (g goal) Line() string {
	if !g.Valid {
		return fmt.Sprintf("GOAL %s measured=n/a goal=%s missed (not measured: %s)", g.Name, g.fmt(g.Goal), g.Detail)
	}
	v := "missed"
	if g.Met {
		v = "met"
	}
	return fmt.Sprintf("GOAL %s measured=%s goal=%s %s", g.Name, g.fmt(g.Measured), g.fmt(g.Goal), v)
}

func (g goal) fmt(x float64) string {
	op := "<="
	if g.AtLeast {
		op = ">="
	}
	if x == g.Goal {
		return fmt.Sprintf("%s%.4g%s", op, x, g.Unit)
	}
	return fmt.Sprintf("%.4g%s", x, g.Unit)
}

func mkGoal(name string, measured, target float64, unit string, atLeast bool, detail string) goal {
	g := goal{Name: name, Measured: measured, Goal: target, Unit: unit, AtLeast: atLeast, Detail: detail}
	g.Valid = !math.IsNaN(measured) && !math.IsInf(measured, 0)
	if !g.Valid {
		g.Measured = 0 // JSON has no NaN
	} else {
		g.Met = measured <= target
		if atLeast {
			g.Met = measured >= target
		}
	}
	return g
}

// best picks the best run of a side: the highest value of f (throughput)
// or, with lowest, the lowest (latency). NaN when there is none.
func best[T any](runs []T, f func(T) float64, lowest bool) float64 {
	b := math.NaN()
	for _, r := range runs {
		v := f(r)
		if math.IsNaN(b) || (lowest && v < b) || (!lowest && v > b) {
			b = v
		}
	}
	return b
}

func tputRecs(t throughput) float64       { return t.RecordsSec }
func latP99(l latencyResult) float64      { return l.P99Ms }
func latP50(l latencyResult) float64      { return l.P50Ms }
func jpRecs(j javaProduce) float64        { return j.RecordsSec }
func jcRecs(j javaShareConsume) float64   { return j.RecordsSec }
func jpP99(j javaProduce) float64         { return j.P99Ms }
func tputMB(t throughput) float64         { return t.MBSec }
func jpMiB(j javaProduce) float64         { return j.MiBSec }
func jcMiB(j javaShareConsume) float64    { return j.MiBSec }
func ratio(proxy, direct float64) float64 { return proxy / direct }

// pipelineAt finds the run of mode at batch.
func (r *Results) pipelineAt(mode string, batch int) *pipelineResult {
	for _, p := range r.Pipeline {
		if p.Mode == mode && p.Batch == batch {
			return p
		}
	}
	return nil
}

func computeGoals(r *Results) []goal {
	var gs []goal
	// 1. Throughput: the worst proxy/direct ratio of the four pass-through
	// throughputs (best run of each side).
	worst, worstName := math.NaN(), "no pass-through throughput measured"
	check := func(name string, p, d float64) {
		x := ratio(p, d)
		if math.IsNaN(x) {
			return
		}
		if math.IsNaN(worst) || x < worst {
			worst, worstName = x, name
		}
	}
	check("franz produce", best(r.FranzProduce.Proxy, tputRecs, false), best(r.FranzProduce.Direct, tputRecs, false))
	check("franz share consume", best(r.FranzConsume.Proxy, tputRecs, false), best(r.FranzConsume.Direct, tputRecs, false))
	check("java produce", best(r.JavaProduce.Proxy, jpRecs, false), best(r.JavaProduce.Direct, jpRecs, false))
	check("java share consume", best(r.JavaConsume.Proxy, jcRecs, false), best(r.JavaConsume.Direct, jcRecs, false))
	g := mkGoal("proxy_throughput_vs_direct", worst*100, 95, "%", true, "worst of the pass-through throughputs: "+worstName)
	g.Context = "worst: " + worstName
	if rp, rc := ratio(best(r.FranzProduce.Relay, tputRecs, false), best(r.FranzProduce.Direct, tputRecs, false)),
		ratio(best(r.FranzConsume.Relay, tputRecs, false), best(r.FranzConsume.Direct, tputRecs, false)); !math.IsNaN(rp) || !math.IsNaN(rc) {
		g.Context += fmt.Sprintf("; a bare user-space TCP relay (no protocol logic) reaches %.1f%% (franz produce) and %.1f%% (franz share consume) of direct in the same run", rp*100, rc*100)
	}
	gs = append(gs, g)
	// 2. Added p99 produce latency at a moderate fixed rate.
	added := best(r.FranzLatency.Proxy, latP99, true) - best(r.FranzLatency.Direct, latP99, true)
	g = mkGoal("added_p99_produce_latency", added, 1, "ms", false, "franz-go at --latency-rate")
	if d := best(r.FranzLatency.Direct, latP99, true); !math.IsNaN(d) {
		g.Context = fmt.Sprintf("direct p99 %.2f ms", d)
		if rl := best(r.FranzLatency.Relay, latP99, true); !math.IsNaN(rl) {
			g.Context += fmt.Sprintf("; the bare relay adds %.2f ms", rl-d)
		}
	}
	gs = append(gs, g)
	// 3. CPU per MB/s over every proxied pass-through phase.
	mc := math.NaN()
	if r.ProxyCostTotal.BytesMoved > 0 {
		mc = r.ProxyCostTotal.MillicoresMB
	}
	gs = append(gs, mkGoal("proxy_millicores_per_MBps", mc, 5, "", false, "pass-through phases"))
	// 4. Transactional against at-least-once at 1000-record transactions.
	x := math.NaN()
	if a, t := r.pipelineAt("alo", 1000), r.pipelineAt("txn", 1000); a != nil && t != nil && a.RecordsSec > 0 {
		x = t.RecordsSec / a.RecordsSec * 100
	}
	g = mkGoal("txn_vs_alo_at_1000", x, 90, "%", true, "no 1000-record pipeline runs")
	if a, k := r.pipelineAt("alo", 1000), r.pipelineAt("kafka-txn", 1000); a != nil && k != nil && a.RecordsSec > 0 {
		g.Context = fmt.Sprintf("Kafka transactions alone (kafka-txn: transactional producer, ACCEPTs after the commit) reach %.1f%% of alo", k.RecordsSec/a.RecordsSec*100)
		if kd := r.pipelineAt("kafka-txn-direct", 1000); kd != nil {
			g.Context += fmt.Sprintf(" through the proxy, %.1f%% without it", kd.RecordsSec/a.RecordsSec*100)
		}
	}
	gs = append(gs, g)
	// 5, 6. Latencies, from the paced pipeline (franz-go default share
	// consumer settings, a long-poll ShareFetch in flight).
	ack, ca := math.NaN(), math.NaN()
	if r.Paced != nil {
		ack, ca = r.Paced.TxnAckP99Ms, r.Paced.CommitAppliedP99Ms
	}
	g = mkGoal("txn_share_ack_p99", ack, 2, "ms", false, "latency pipeline did not run")
	if r.Paced != nil && r.Paced.ProduceP99Ms > 0 {
		g.Context = fmt.Sprintf("a TxnShareAcknowledge waits for one transactional produce (the shadow record, acks=all); the same transactions' own produce of their outputs, just before, took p50 %.2f ms, p99 %.2f ms", r.Paced.ProduceP50Ms, r.Paced.ProduceP99Ms)
	}
	gs = append(gs, g)
	gs = append(gs, mkGoal("commit_to_applied_p99", ca, 20, "ms", false, "latency pipeline did not run or no commit was applied"))
	return gs
}

func f0(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf("%.0f", x)
}

func f1(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f", x)
}

func f2(x float64) string {
	if math.IsNaN(x) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f", x)
}

func pct(p, d float64) string {
	x := ratio(p, d) * 100
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", x)
}

// WriteTable prints the results as tables.
func WriteTable(w io.Writer, r *Results) {
	fmt.Fprintf(w, "sharetx bench: %d CPU(s), %s, direct %s, proxy %s, %.0fs; best of %d run(s) per side\n\n",
		r.CPUs, r.GoVersion, r.Bootstrap, r.ProxyAddr, r.Seconds, r.Options.Repeat)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pass-through\tunit\tdirect\tproxy\tproxy/direct\trelay\trelay/direct\t")
	nan := math.NaN()
	row := func(name, unit string, d, p, rl float64) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, unit, f1(d), f1(p), pct(p, d), f1(rl), pct(rl, d))
	}
	row("franz produce", "records/s", best(r.FranzProduce.Direct, tputRecs, false), best(r.FranzProduce.Proxy, tputRecs, false), best(r.FranzProduce.Relay, tputRecs, false))
	row("franz produce", "MB/s", best(r.FranzProduce.Direct, tputMB, false), best(r.FranzProduce.Proxy, tputMB, false), best(r.FranzProduce.Relay, tputMB, false))
	row("franz produce p50 @rate", "ms", best(r.FranzLatency.Direct, latP50, true), best(r.FranzLatency.Proxy, latP50, true), best(r.FranzLatency.Relay, latP50, true))
	row("franz produce p99 @rate", "ms", best(r.FranzLatency.Direct, latP99, true), best(r.FranzLatency.Proxy, latP99, true), best(r.FranzLatency.Relay, latP99, true))
	row("franz share consume", "records/s", best(r.FranzConsume.Direct, tputRecs, false), best(r.FranzConsume.Proxy, tputRecs, false), best(r.FranzConsume.Relay, tputRecs, false))
	row("franz share consume", "MB/s", best(r.FranzConsume.Direct, tputMB, false), best(r.FranzConsume.Proxy, tputMB, false), best(r.FranzConsume.Relay, tputMB, false))
	row("java ProducerPerformance", "records/s", best(r.JavaProduce.Direct, jpRecs, false), best(r.JavaProduce.Proxy, jpRecs, false), nan)
	row("java ProducerPerformance", "MiB/s", best(r.JavaProduce.Direct, jpMiB, false), best(r.JavaProduce.Proxy, jpMiB, false), nan)
	row("java ProducerPerformance p99", "ms", best(r.JavaProduce.Direct, jpP99, true), best(r.JavaProduce.Proxy, jpP99, true), nan)
	row("java ShareConsumerPerformance", "records/s", best(r.JavaConsume.Direct, jcRecs, false), best(r.JavaConsume.Proxy, jcRecs, false), nan)
	row("java ShareConsumerPerformance", "MiB/s", best(r.JavaConsume.Direct, jcMiB, false), best(r.JavaConsume.Proxy, jcMiB, false), nan)
	tw.Flush()
	if len(r.RelayCost) > 0 {
		fmt.Fprintln(w, "(relay: the franz-go runs through a bare user-space TCP relay process, read/write with no protocol logic: the ceiling of any proxy that terminates TCP on this machine)")
	}

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "proxy process\tCPU s\tMB moved\tCPU s/GB\tmillicores per MB/s\t")
	for _, name := range []string{"franz_produce", "franz_latency", "franz_consume", "java_produce", "java_consume"} {
		if c, ok := r.ProxyCost[name]; ok {
			fmt.Fprintf(tw, "%s\t%.2f\t%.0f\t%.2f\t%.2f\t\n", name, c.CPUSeconds, c.BytesMoved/1e6, c.CPUSecPerGB, c.MillicoresMB)
		}
	}
	c := r.ProxyCostTotal
	fmt.Fprintf(tw, "all pass-through\t%.2f\t%.0f\t%.2f\t%.2f\t\n", c.CPUSeconds, c.BytesMoved/1e6, c.CPUSecPerGB, c.MillicoresMB)
	for _, name := range []string{"franz_produce", "franz_latency", "franz_consume"} {
		if c, ok := r.RelayCost[name]; ok {
			fmt.Fprintf(tw, "relay %s\t%.2f\t%.0f\t%.2f\t%.2f\t\n", name, c.CPUSeconds, c.BytesMoved/1e6, c.CPUSecPerGB, c.MillicoresMB)
		}
	}
	tw.Flush()
	fmt.Fprintf(w, "proxy RSS: %.1f MiB at start, %.1f MiB at end, peak (VmHWM) %.1f MiB\n",
		float64(r.ProxyRSSStart)/(1<<20), float64(r.ProxyRSSEnd)/(1<<20), float64(r.ProxyHWM)/(1<<20))

	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pipeline (through proxy)\talo rec/s\tkafka-txn rec/s\tkafka-txn direct\ttxn-seq rec/s\ttxn rec/s\ttxn/alo\ttxn/kafka-txn\trecs/txn\ttxn p50 ms produce/TxnShareAck/EndTxn\tTxnShareAck p99 ms\tcommit→applied p50/p99 ms\t")
	seen := map[int]bool{}
	for _, p := range r.Pipeline {
		if seen[p.Batch] {
			continue
		}
		seen[p.Batch] = true
		rate := func(mode string) float64 {
			if x := r.pipelineAt(mode, p.Batch); x != nil {
				return x.RecordsSec
			}
			return math.NaN()
		}
		av, kv, kd, ts, tv := rate("alo"), rate("kafka-txn"), rate("kafka-txn-direct"), rate("txn-seq"), rate("txn")
		stages, ack, ca, per := "n/a", "n/a", "n/a", "n/a"
		if t := r.pipelineAt("txn", p.Batch); t != nil {
			per = f1(t.AvgBatch)
			stages = f2(t.ProduceP50Ms) + " / " + f2(t.TxnAckP50Ms) + " / " + f2(t.EndTxnP50Ms)
			ack = f2(t.TxnAckP99Ms)
			ca = f2(t.CommitAppliedP50Ms) + " / " + f2(t.CommitAppliedP99Ms)
		}
		fmt.Fprintf(tw, "transactions of %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.Batch, f0(av), f0(kv), f0(kd), f0(ts), f0(tv), pct(tv, av), pct(tv, kv), per, stages, ack, ca)
	}
	tw.Flush()
	fmt.Fprintln(w, "(alo: explicit ACCEPTs, idempotent producer; kafka-txn: a transactional producer, ACCEPTs after the commit — Kafka transactions alone (kafka-txn direct: the same without the proxy); txn: ACCEPTs bound to the transaction, sent while the outputs are in flight (its produce stage runs from the first Produce to the end of Flush, the TxnShareAcknowledge inside it); txn-seq: the same, sent after the outputs were acknowledged)")
	if p := r.Paced; p != nil {
		fmt.Fprintf(w, "\nlatency pipeline (paced input %d records/s, franz-go default share consumer settings): %d records, %d transactions (%.1f records each)\n",
			r.Options.PacedRate, p.Records, p.Transactions, p.AvgBatch)
		fmt.Fprintf(w, "  TxnShareAcknowledge (SendShareAcknowledgementsToTransaction, sent after the outputs were acknowledged: no touch record): p50 %s ms, p99 %s ms\n", f2(p.TxnAckP50Ms), f2(p.TxnAckP99Ms))
		fmt.Fprintf(w, "  the same transactions' produce of their outputs (acks=all, through the proxy): p50 %s ms, p99 %s ms\n", f2(p.ProduceP50Ms), f2(p.ProduceP99Ms))
		fmt.Fprintf(w, "  commit→applied (sharetx_commit_to_applied_seconds bucket deltas, n=%.0f): p50 %s ms, p99 %s ms\n", p.CommitAppliedN, f2(p.CommitAppliedP50Ms), f2(p.CommitAppliedP99Ms))
	}
	if s := r.Staged; s != nil {
		fmt.Fprintf(w, "staged memory: %d TxnShareAcknowledge calls, %.0f records pending, RSS %.1f → %.1f MiB", s.Calls, s.PendingRecords,
			float64(s.RSSBefore)/(1<<20), float64(s.RSSStaged)/(1<<20))
		fmt.Fprintf(w, " — %s\n", s.Note)
	}
	fmt.Fprintln(w, "\nnote: a shared 2-core machine (broker, proxy, clients and other work on the same cores): expect run-to-run noise of 10-30%.")
	if gs := r.Goals; len(gs) > 0 {
		fmt.Fprintln(w, "goals in context (what the same run measured around each):")
		for _, g := range gs {
			if g.Context != "" {
				fmt.Fprintf(w, "  %s: %s\n", g.Name, g.Context)
			}
		}
	}
}

// WriteJSON writes the results. A value that was not measured (NaN) is
// written as 0.
func WriteJSON(path string, r *Results) error {
	scrubNaN(reflect.ValueOf(r))
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// plotGroups: direct vs proxy for the pass-through throughputs, alo vs txn
// for the pipelines.
func (r *Results) plotGroups() []barGroup {
	var gs []barGroup
	add := func(label string, a, b float64, al, bl string) {
		if math.IsNaN(a) && math.IsNaN(b) {
			return
		}
		if math.IsNaN(a) {
			a = 0
		}
		if math.IsNaN(b) {
			b = 0
		}
		gs = append(gs, barGroup{Label: label, A: a, B: b, ALabel: al, BLabel: bl})
	}
	add("franz prod", best(r.FranzProduce.Direct, tputRecs, false), best(r.FranzProduce.Proxy, tputRecs, false), "direct", "proxy")
	add("franz cons", best(r.FranzConsume.Direct, tputRecs, false), best(r.FranzConsume.Proxy, tputRecs, false), "direct", "proxy")
	add("java prod", best(r.JavaProduce.Direct, jpRecs, false), best(r.JavaProduce.Proxy, jpRecs, false), "direct", "proxy")
	add("java cons", best(r.JavaConsume.Direct, jcRecs, false), best(r.JavaConsume.Proxy, jcRecs, false), "direct", "proxy")
	seen := map[int]bool{}
	for _, p := range r.Pipeline {
		if seen[p.Batch] {
			continue
		}
		seen[p.Batch] = true
		a, t := math.NaN(), math.NaN()
		if x := r.pipelineAt("alo", p.Batch); x != nil {
			a = x.RecordsSec
		}
		if x := r.pipelineAt("txn", p.Batch); x != nil {
			t = x.RecordsSec
		}
		add(fmt.Sprintf("pipe %d", p.Batch), a, t, "alo", "txn")
	}
	return gs
}

// scrubNaN sets every NaN or infinite float reachable from v to 0.
func scrubNaN(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			scrubNaN(v.Elem())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				scrubNaN(v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := 0; i < v.Len(); i++ {
			scrubNaN(v.Index(i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			e := reflect.New(v.Type().Elem()).Elem()
			e.Set(v.MapIndex(k))
			scrubNaN(e)
			v.SetMapIndex(k, e)
		}
	case reflect.Float64, reflect.Float32:
		if f := v.Float(); (math.IsNaN(f) || math.IsInf(f, 0)) && v.CanSet() {
			v.SetFloat(0)
		}
	}
}
