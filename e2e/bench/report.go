package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"reflect"
	"strings"
	"text/tabwriter"
	"time"
)

// goal is one of issue 14's targets: measured, never asserted.
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

// passRatio is the spread over rounds of proxy/direct of one pass-through
// throughput (a round's proxy run against the same round's direct run).
func passRatio[T any](p sidePair[T], f func(T) float64) spread {
	return pairSpread(p.Proxy, p.Direct, func(x, d T) float64 { return f(x) / f(d) })
}

// judged adds to g's context when the spread of the rounds straddles the
// goal: the gap being judged is smaller than the noise.
func judged(g *goal, s spread, scale float64) {
	if s.straddles(g.Goal / scale) {
		g.Context += fmt.Sprintf("; the rounds' spread (%.4g–%.4g%s) straddles the goal: wider than the gap being judged, this run cannot decide it", s.Min*scale, s.Max*scale, g.Unit)
	}
}

func addContext(g *goal, format string, args ...any) {
	if g.Context != "" {
		g.Context += "; "
	}
	g.Context += fmt.Sprintf(format, args...)
}

func computeGoals(r *Results) []goal {
	var gs []goal
	pinned := r.Options.Pin
	k1000 := func(mode string) runKey { return runKey{Mode: mode, Batch: 1000} }

	// 1. Share-group EOS through sharetx against consumer-group EOS at
	// every transaction size, workers = partitions (issue 23: at least as
	// fast).
	for _, batch := range r.Options.Batches {
		kb := func(mode string) runKey { return runKey{Mode: mode, Batch: batch} }
		s := ratioSpread(r.Pipeline, kb(modeTxn), kb(modeGroupEOS))
		g := mkGoal(fmt.Sprintf("share_eos_vs_group_eos_at_%d", batch), s.Median*100, 100, "%", true, fmt.Sprintf("no %d-record pipeline rounds of both modes", batch))
		if s.N > 0 {
			avg := func(mode string) float64 {
				return fieldSpread(r.Pipeline, kb(mode), func(p *pipelineResult) float64 { return p.AvgBatch }).Median
			}
			addContext(&g, "median of %d rounds of txn (share-group EOS through sharetx, %d workers) / group-eos (consumer group + sendOffsetsToTransaction, direct, %d workers) on %d partitions, transactions of up to %d: %s; records/s txn %s, group-eos %s; records per transaction txn %.0f, group-eos %.0f",
				s.N, r.Options.PipelineWorkers, r.Options.PipelineWorkers, r.Options.Partitions, batch, s.format(pct0),
				rateSpread(r.Pipeline, kb(modeTxn)).format(f0), rateSpread(r.Pipeline, kb(modeGroupEOS)).format(f0), avg(modeTxn), avg(modeGroupEOS))
			judged(&g, s, 100)
		}
		gs = append(gs, g)
	}
	s := spread{}
	var g goal

	// 1b. Java and Python: the share consumer + the sharetx producer
	// through sharetx against the consumer group's EOS, and its commit p99
	// against the consumer group's.
	gs = append(gs, clientEOSGoals("java", "one JVM each", r.JavaEOS, r.Options.JavaEOSBatches, clientEOSModes{
		share: modeJavaShareEOS, group: modeJavaGroupEOS, txn: modeJavaShareTxn, txnDirect: modeJavaShareTxnDirect,
		shareName: "KafkaShareConsumer + SharetxProducer (through sharetx)", groupName: "KafkaConsumer + sendOffsetsToTransaction (direct)",
		txnName: "the stock KafkaShareConsumer with Kafka transactions alone"})...)
	gs = append(gs, clientEOSGoals("python", "one process each", r.PythonEOS, r.Options.PythonEOSBatches, clientEOSModes{
		share: modePyShareEOS, group: modePyGroupEOS, txn: modePyShareTxn, txnDirect: modePyShareTxnDirect,
		shareName: "confluent-kafka's ShareConsumer + sharetx.Producer (through sharetx)", groupName: "Consumer + send_offsets_to_transaction (direct)",
		txnName: "confluent-kafka's ShareConsumer with Kafka transactions alone"})...)

	// 2. Past the partition count: 8 workers on 1 partition.
	s = ratioSpread(r.Scaling, runKey{Mode: modeTxn, Workers: 8, Par: 1}, runKey{Mode: modeGroupEOS, Workers: 8, Par: 1})
	g = mkGoal("share_eos_vs_group_eos_8_workers_1_partition", s.Median, 6, "x", true, "no scaling rounds with 8 workers on 1 partition")
	if s.N > 0 {
		addContext(&g, "median of %d rounds of txn / group-eos, 8 workers on 1 partition, %.0f ms of waiting per record: %s; records/s txn %s, group-eos %s (one worker holds the partition; the ideal is 8×)",
			s.N, float64(r.Options.ScaleProc)/float64(time.Millisecond), s.format(times1),
			rateSpread(r.Scaling, runKey{Mode: modeTxn, Workers: 8, Par: 1}).format(f0), rateSpread(r.Scaling, runKey{Mode: modeGroupEOS, Workers: 8, Par: 1}).format(f0))
		judged(&g, s, 1)
	}
	gs = append(gs, g)

	// 3. Against Kafka transactions alone (direct) at 1000.
	s = ratioSpread(r.Pipeline, k1000(modeTxn), k1000(modeKafkaTxnDirect))
	g = mkGoal("share_eos_vs_kafka_txn_at_1000", s.Median*100, 95, "%", true, "no 1000-record pipeline rounds of txn and kafka-txn-direct")
	if s.N > 0 {
		addContext(&g, "median of %d rounds of txn / kafka-txn-direct (a transactional producer, ACCEPTs after the commit, no proxy): %s", s.N, s.format(pct0))
		if p := ratioSpread(r.Pipeline, k1000(modeKafkaTxn), k1000(modeKafkaTxnDirect)); p.N > 0 {
			addContext(&g, "the same through the proxy (kafka-txn / kafka-txn-direct: what pass-through costs here) %s", p.format(pct0))
		}
		if p := ratioSpread(r.Pipeline, k1000(modeTxn), k1000(modeKafkaTxn)); p.N > 0 {
			addContext(&g, "txn / kafka-txn, both through the proxy (what binding the acks costs) %s", p.format(pct0))
		}
		judged(&g, s, 100)
	}
	gs = append(gs, g)

	// 4. TxnShareAcknowledge p99 against the same run's transactional
	// produce p99 (the paced pipeline).
	x := math.NaN()
	if p := r.Paced; p != nil && p.ProduceP99Ms > 0 {
		x = p.TxnAckP99Ms / p.ProduceP99Ms
	}
	g = mkGoal("txn_share_ack_p99_vs_produce_p99", x, 1.2, "x", false, "latency pipeline did not run")
	if p := r.Paced; p != nil {
		addContext(&g, "TxnShareAcknowledge p50 %.2f ms, p99 %.2f ms against the same transactions' produce of their outputs through the proxy (acks=all), p50 %.2f ms, p99 %.2f ms; a TxnShareAcknowledge is one such produce (the shadow record)",
			p.TxnAckP50Ms, p.TxnAckP99Ms, p.ProduceP50Ms, p.ProduceP99Ms)
	}
	gs = append(gs, g)

	// 5. Pass-through in pin mode: the worst proxy/direct median of the
	// pass-through throughputs.
	worst, worstName, worstS := math.NaN(), "no pass-through throughput measured", spread{}
	check := func(name string, s spread) {
		if s.N > 0 && (math.IsNaN(worst) || s.Median < worst) {
			worst, worstName, worstS = s.Median, name, s
		}
	}
	check("franz produce", passRatio(r.FranzProduce, tputRecs))
	check("franz share consume", passRatio(r.FranzConsume, tputRecs))
	check("java produce", passRatio(r.JavaProduce, jpRecs))
	check("java share consume", passRatio(r.JavaConsume, jcRecs))
	// Judged against the bare relay of the same pinned run (issue 23): the
	// physical limit of any proxy that terminates TCP on this machine.
	vsRelay := func(x, y throughput) float64 { return x.RecordsSec / y.RecordsSec }
	relayWorst, relayName, relayS := math.NaN(), "", spread{}
	for _, c := range []struct {
		name string
		p    sidePair[throughput]
	}{{"franz produce", r.FranzProduce}, {"franz share consume", r.FranzConsume}} {
		if rs := pairSpread(c.p.Proxy, c.p.Relay, vsRelay); rs.N > 0 && (math.IsNaN(relayWorst) || rs.Median < relayWorst) {
			relayWorst, relayName, relayS = rs.Median, c.name, rs
		}
	}
	if pinned {
		g = mkGoal("proxy_throughput_vs_relay_pinned", relayWorst*100, 95, "%", true, "no pass-through throughput through both the proxy and the relay")
	} else {
		g = mkGoal("proxy_throughput_vs_relay_pinned", math.NaN(), 95, "%", true, "pin mode only (make bench-pin): unpinned, the proxy takes its CPU from the broker and the clients")
	}
	if !math.IsNaN(relayWorst) {
		addContext(&g, "the proxy against the bare relay, per round, worst median of %d rounds: %s %s", relayS.N, relayName, relayS.format(pct0))
	}
	if !math.IsNaN(worst) {
		mode := "unpinned"
		if pinned {
			mode = "pinned: " + r.Pinned
		}
		addContext(&g, "%s; worst median of %d rounds: %s %s", mode, worstS.N, worstName, worstS.format(pct0))
		if rp, rc := pairSpread(r.FranzProduce.Relay, r.FranzProduce.Direct, func(x, d throughput) float64 { return x.RecordsSec / d.RecordsSec }),
			pairSpread(r.FranzConsume.Relay, r.FranzConsume.Direct, func(x, d throughput) float64 { return x.RecordsSec / d.RecordsSec }); rp.N > 0 || rc.N > 0 {
			addContext(&g, "a bare user-space TCP relay (no protocol logic) reaches %s (franz produce) and %s (franz share consume) of direct in the same run", rp.format(pct0), rc.format(pct0))
		}
		if pinned && relayS.N > 0 {
			judged(&g, relayS, 100)
		}
	}
	gs = append(gs, g)

	// 6. CPU per MB/s over every proxied pass-through phase.
	mc := math.NaN()
	if r.ProxyCostTotal.BytesMoved > 0 {
		mc = r.ProxyCostTotal.MillicoresMB
	}
	g = mkGoal("proxy_millicores_per_MBps", mc, 2, "", false, "pass-through phases")
	if c, ok := r.RelayCost["franz_produce"]; ok && !math.IsNaN(mc) {
		addContext(&g, "proxy %.2f over the pass-through phases; the bare relay spends %.2f on franz produce", mc, c.MillicoresMB)
	}
	gs = append(gs, g)

	// 7. commit→applied, franz-go's default share consumer settings (the
	// paced pipeline: a long-poll ShareFetch in flight).
	ca := math.NaN()
	if r.Paced != nil && r.Paced.CommitAppliedN > 0 {
		ca = r.Paced.CommitAppliedP99Ms
	}
	g = mkGoal("commit_to_applied_p99", ca, 20, "ms", false, "latency pipeline did not run or no commit was applied")
	if p := r.Paced; p != nil {
		addContext(&g, "sharetx_commit_to_applied_seconds over %.0f transactions of the paced pipeline (franz-go's default share consumer settings): p50 %.2f ms", p.CommitAppliedN, p.CommitAppliedP50Ms)
	}
	gs = append(gs, g)

	// 8. Scale-out: a sidecar's cost follows its own traffic.
	return append(gs, scaleOutGoals(r)...)
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
	fmt.Fprintf(w, "sharetx bench: %d CPU(s), %s, direct %s, proxy %s, %.0fs; pass-through: medians of %d interleaved run(s) per side\n\n",
		r.CPUs, r.GoVersion, r.Bootstrap, r.ProxyAddr, r.Seconds, r.Options.Repeat)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "pass-through\tunit\tdirect\tproxy\tproxy/direct\trelay\trelay/direct\t")
	nan := math.NaN()
	row := func(name, unit string, d, p, rl float64) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name, unit, f1(d), f1(p), pct(p, d), f1(rl), pct(rl, d))
	}
	row("franz produce", "records/s", medianOf(r.FranzProduce.Direct, tputRecs), medianOf(r.FranzProduce.Proxy, tputRecs), medianOf(r.FranzProduce.Relay, tputRecs))
	row("franz produce", "MB/s", medianOf(r.FranzProduce.Direct, tputMB), medianOf(r.FranzProduce.Proxy, tputMB), medianOf(r.FranzProduce.Relay, tputMB))
	row("franz produce p50 @rate", "ms", medianOf(r.FranzLatency.Direct, latP50), medianOf(r.FranzLatency.Proxy, latP50), medianOf(r.FranzLatency.Relay, latP50))
	row("franz produce p99 @rate", "ms", medianOf(r.FranzLatency.Direct, latP99), medianOf(r.FranzLatency.Proxy, latP99), medianOf(r.FranzLatency.Relay, latP99))
	row("franz share consume", "records/s", medianOf(r.FranzConsume.Direct, tputRecs), medianOf(r.FranzConsume.Proxy, tputRecs), medianOf(r.FranzConsume.Relay, tputRecs))
	row("franz share consume", "MB/s", medianOf(r.FranzConsume.Direct, tputMB), medianOf(r.FranzConsume.Proxy, tputMB), medianOf(r.FranzConsume.Relay, tputMB))
	row("java ProducerPerformance", "records/s", medianOf(r.JavaProduce.Direct, jpRecs), medianOf(r.JavaProduce.Proxy, jpRecs), nan)
	row("java ProducerPerformance", "MiB/s", medianOf(r.JavaProduce.Direct, jpMiB), medianOf(r.JavaProduce.Proxy, jpMiB), nan)
	row("java ProducerPerformance p99", "ms", medianOf(r.JavaProduce.Direct, jpP99), medianOf(r.JavaProduce.Proxy, jpP99), nan)
	row("java ShareConsumerPerformance", "records/s", medianOf(r.JavaConsume.Direct, jcRecs), medianOf(r.JavaConsume.Proxy, jcRecs), nan)
	row("java ShareConsumerPerformance", "MiB/s", medianOf(r.JavaConsume.Direct, jcMiB), medianOf(r.JavaConsume.Proxy, jcMiB), nan)
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

	writePipelineTables(w, r)
	writeScaleOutTable(w, r)
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
	if r.Pinned != "" {
		fmt.Fprintf(w, "\npin mode: %s\n", r.Pinned)
	} else {
		fmt.Fprintln(w, "\nnote: a shared 2-core machine (broker, proxy, clients and other work on the same cores): single runs vary by 10-30%; figures are medians [min–max] of interleaved rounds.")
	}
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
	add("franz prod", medianOf(r.FranzProduce.Direct, tputRecs), medianOf(r.FranzProduce.Proxy, tputRecs), "direct", "proxy")
	add("franz cons", medianOf(r.FranzConsume.Direct, tputRecs), medianOf(r.FranzConsume.Proxy, tputRecs), "direct", "proxy")
	add("java prod", medianOf(r.JavaProduce.Direct, jpRecs), medianOf(r.JavaProduce.Proxy, jpRecs), "direct", "proxy")
	add("java cons", medianOf(r.JavaConsume.Direct, jcRecs), medianOf(r.JavaConsume.Proxy, jcRecs), "direct", "proxy")
	for _, batch := range r.Options.Batches {
		add(fmt.Sprintf("eos %d", batch), rateSpread(r.Pipeline, runKey{Mode: modeGroupEOS, Batch: batch}).Median,
			rateSpread(r.Pipeline, runKey{Mode: modeTxn, Batch: batch}).Median, "group-eos", "sharetx txn")
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

// clientEOSGoals are one language's goals of the exactly-once comparison at
// each size: records/s against the consumer group's EOS (>= 100 %) and the
// commit p99 against the consumer group's (<= 1.2x), with the share
// consumer's own ceiling (transactions alone, direct) and pass-through's
// share (transactions alone through sharetx) in the context.
func clientEOSGoals(lang, procs string, runs []*pipelineResult, batches []int, m clientEOSModes) []goal {
	var gs []goal
	none := fmt.Sprintf("no %s exactly-once rounds of both modes", strings.ToUpper(lang[:1])+lang[1:])
	for _, batch := range batches {
		ks, kg := runKey{Mode: m.share, Batch: batch}, runKey{Mode: m.group, Batch: batch}
		s := ratioSpread(runs, ks, kg)
		g := mkGoal(fmt.Sprintf("%s_share_eos_vs_group_eos_at_%d", lang, batch), s.Median*100, 100, "%", true, none)
		if s.N > 0 {
			addContext(&g, "median of %d rounds of %s / %s, %s, transactions of %d: %s; records/s %s against %s",
				s.N, m.shareName, m.groupName, procs, batch, s.format(pct0), rateSpread(runs, ks).format(f0), rateSpread(runs, kg).format(f0))
			judged(&g, s, 100)
			kt, kd := runKey{Mode: m.txn, Batch: batch}, runKey{Mode: m.txnDirect, Batch: batch}
			if c := ratioSpread(runs, kd, kg); c.N > 0 {
				addContext(&g, "%s (direct, no sharetx, ACCEPTs after the commit, at-least-once) reaches %s of the consumer group's records/s at %d: the ceiling of any share-group EOS on this consumer; through sharetx (pass-through only) %s of that; sharetx's exactly-once %s of the pass-through",
					m.txnName, c.format(pct0), batch, ratioSpread(runs, kt, kd).format(pct0), ratioSpread(runs, ks, kt).format(pct0))
			}
		}
		gs = append(gs, g)
		s = ratioSpread2(runs, ks, kg, javaCommitP99)
		g = mkGoal(fmt.Sprintf("%s_commit_p99_vs_group_eos_at_%d", lang, batch), s.Median, 1.2, "x", false, none)
		if s.N > 0 {
			addContext(&g, "commit p99, transactions of %d, median of %d rounds: %s ms through sharetx against %s ms for the consumer group; ratio %s",
				batch, s.N, f2(fieldSpread(runs, ks, javaCommitP99).Median), f2(fieldSpread(runs, kg, javaCommitP99).Median), s.format(times1))
			judged(&g, s, 1)
		}
		gs = append(gs, g)
	}
	return gs
}
