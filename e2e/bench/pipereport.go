package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"text/tabwriter"
	"time"
)

// eosChecked summarises the exactly-once checks of runs: "k/n checked,
// d duplicates, l lost".
func eosChecked(runs []*pipelineResult, keep func(*pipelineResult) bool) string {
	var n, ok int
	var dup, lost int64
	for _, r := range runs {
		if !exactlyOnce(r.Mode) || !keep(r) {
			continue
		}
		n++
		if r.Verified {
			ok++
		}
		dup += r.Duplicates
		lost += r.Lost
	}
	if n == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%d/%d exactly-once, %d dup, %d lost", ok, n, dup, lost)
}

// writePipelineTables prints the pipeline comparisons, the scaling runs and
// the Java comparison: medians [min–max] over the rounds.
func writePipelineTables(w io.Writer, r *Results) {
	if len(r.Pipeline) > 0 {
		fmt.Fprintf(w, "\npipelines: consume-transform-produce, %d worker(s) on %d partitions, medians [min–max] of %d interleaved rounds; ratios per round\n",
			r.Options.PipelineWorkers, r.Options.Partitions, r.Options.Rounds)
		tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "records/s\tgroup-eos\tkafka-txn direct\tkafka-txn\ttxn (sharetx)\talo\ttxn/group-eos\ttxn/kafka-txn direct\ttxn/kafka-txn\t")
		for _, batch := range r.Options.Batches {
			k := func(m string) runKey { return runKey{Mode: m, Batch: batch} }
			rate := func(m string) string { return rateSpread(r.Pipeline, k(m)).format(f0) }
			ratio := func(a, b string) string { return ratioSpread(r.Pipeline, k(a), k(b)).format(pct0) }
			fmt.Fprintf(tw, "transactions of %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", batch,
				rate(modeGroupEOS), rate(modeKafkaTxnDirect), rate(modeKafkaTxn), rate(modeTxn), rate(modeALO),
				ratio(modeTxn, modeGroupEOS), ratio(modeTxn, modeKafkaTxnDirect), ratio(modeTxn, modeKafkaTxn))
		}
		tw.Flush()
		tw = tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "txn (sharetx) detail\trecords/txn\tp50 ms produce / TxnShareAck / EndTxn\tTxnShareAck p99 ms\tcommit→applied p50 / p99 ms\tgroup-eos EndTxn p50 ms\texactly-once checks (txn, group-eos)\t")
		for _, batch := range r.Options.Batches {
			k := runKey{Mode: modeTxn, Batch: batch}
			med := func(f func(*pipelineResult) float64) string { return f2(fieldSpread(r.Pipeline, k, f).Median) }
			fmt.Fprintf(tw, "transactions of %d\t%s\t%s / %s / %s\t%s\t%s / %s\t%s\t%s\t\n", batch,
				f1(fieldSpread(r.Pipeline, k, func(p *pipelineResult) float64 { return p.AvgBatch }).Median),
				med(func(p *pipelineResult) float64 { return p.ProduceP50Ms }), med(func(p *pipelineResult) float64 { return p.TxnAckP50Ms }),
				med(func(p *pipelineResult) float64 { return p.EndTxnP50Ms }), med(func(p *pipelineResult) float64 { return p.TxnAckP99Ms }),
				med(func(p *pipelineResult) float64 { return p.CommitAppliedP50Ms }), med(func(p *pipelineResult) float64 { return p.CommitAppliedP99Ms }),
				f2(fieldSpread(r.Pipeline, runKey{Mode: modeGroupEOS, Batch: batch}, func(p *pipelineResult) float64 { return p.EndTxnP50Ms }).Median),
				eosChecked(r.Pipeline, func(p *pipelineResult) bool { return p.Batch == batch }))
		}
		tw.Flush()
		fmt.Fprintln(w, "(group-eos: a consumer group, a transactional producer and sendOffsetsToTransaction (franz-go's GroupTransactSession), direct to the broker; kafka-txn: a share group and a transactional producer, ACCEPTs after the commit — Kafka transactions alone, at-least-once (direct: without the proxy); txn: share-group exactly-once through sharetx, ACCEPTs bound to the transaction, sent while the outputs are in flight; alo: explicit ACCEPTs, idempotent producer. Every worker has its own consumer and producer; each run has a new group and output topic; exactly-once runs are checked by reading the outputs read_committed and counting them per input id)")
		writeBudget(w, r.Pipeline, r.Options.Batches, budgetModesOf(r.Options.pipelineModes()))
	}
	if len(r.Scaling) > 0 {
		fmt.Fprintf(w, "\nscaling: %.0f ms of waiting per record, transactions of %d, medians [min–max] of %d round(s)\n",
			float64(r.Options.ScaleProc)/float64(time.Millisecond), r.Options.ScaleBatch, r.Options.ScaleRounds)
		tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "partitions\tworkers\ttxn (sharetx) rec/s\tgroup-eos rec/s\ttxn/group-eos\tideal (workers × 1/processing)\texactly-once checks\t")
		for _, p := range r.Options.ScalePartitions {
			for _, wk := range r.Options.ScaleWorkers {
				ks, kg := runKey{Mode: modeTxn, Workers: wk, Par: p}, runKey{Mode: modeGroupEOS, Workers: wk, Par: p}
				ideal := float64(wk) * 1000 / (float64(r.Options.ScaleProc) / float64(time.Millisecond))
				fmt.Fprintf(tw, "%d\t%d\t%s\t%s\t%s\t%s\t%s\t\n", p, wk, rateSpread(r.Scaling, ks).format(f0), rateSpread(r.Scaling, kg).format(f0),
					ratioSpread(r.Scaling, ks, kg).format(times1), f0(ideal), eosChecked(r.Scaling, func(x *pipelineResult) bool { return x.Workers == wk && x.Partitions == p }))
			}
		}
		tw.Flush()
		fmt.Fprintln(w, "(consumer-group EOS can use one worker per partition; share-group EOS through sharetx all of them. The plot is bench-scaling.png)")
	}
	if len(r.JavaEOS) > 0 {
		fmt.Fprintf(w, "\njava (kafka-clients), one JVM each on %d partitions, medians [min–max] of %d round(s)\n", r.Options.Partitions, r.Options.Rounds)
		writeClientEOS(w, r.JavaEOS, r.Options.JavaEOSBatches, clientEOSModes{
			share: modeJavaShareEOS, group: modeJavaGroupEOS, txn: modeJavaShareTxn, txnDirect: modeJavaShareTxnDirect,
			shareName: "KafkaShareConsumer + SharetxProducer (sharetx)", groupName: "KafkaConsumer + sendOffsetsToTransaction (direct)",
			txnName: "KafkaShareConsumer + KafkaProducer transactions alone"})
	}
	if len(r.PythonEOS) > 0 {
		fmt.Fprintf(w, "\npython (confluent-kafka), one process each on %d partitions, medians [min–max] of %d round(s)\n", r.Options.Partitions, r.Options.Rounds)
		writeClientEOS(w, r.PythonEOS, r.Options.PythonEOSBatches, clientEOSModes{
			share: modePyShareEOS, group: modePyGroupEOS, txn: modePyShareTxn, txnDirect: modePyShareTxnDirect,
			shareName: "ShareConsumer + sharetx.Producer (sharetx)", groupName: "Consumer + send_offsets_to_transaction (direct)",
			txnName: "ShareConsumer + Producer transactions alone"})
	}
}

// clientEOSModes names one language's modes of the exactly-once
// comparison (java-eos, python-eos) and what its table calls them.
type clientEOSModes struct {
	share, group, txn, txnDirect  string
	shareName, groupName, txnName string
}

// writeClientEOS prints one language's exactly-once comparison: sharetx
// against the consumer group's EOS, and the share consumer with Kafka
// transactions alone through the proxy and direct, which split the gap
// into what the share consumer itself reaches, what pass-through costs and
// what sharetx adds; then the time budget of every mode.
func writeClientEOS(w io.Writer, runs []*pipelineResult, batches []int, m clientEOSModes) {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "records/s\t%s\t%s\t%s (sharetx)\t%s (direct)\tsharetx / group EOS\ttxn alone direct / group EOS\ttxn alone, sharetx / direct\tsharetx / txn alone (sharetx)\trecords/txn, sharetx / group EOS\tcommit p99 ms, sharetx / group EOS\texactly-once checks\t\n",
		m.shareName, m.groupName, m.txnName, m.txnName)
	avg := func(p *pipelineResult) float64 { return p.AvgBatch }
	for _, batch := range batches {
		ks, kg := runKey{Mode: m.share, Batch: batch}, runKey{Mode: m.group, Batch: batch}
		kt, kd := runKey{Mode: m.txn, Batch: batch}, runKey{Mode: m.txnDirect, Batch: batch}
		fmt.Fprintf(tw, "transactions of %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s / %s\t%s / %s\t%s\t\n", batch,
			rateSpread(runs, ks).format(f0), rateSpread(runs, kg).format(f0), rateSpread(runs, kt).format(f0), rateSpread(runs, kd).format(f0),
			ratioSpread(runs, ks, kg).format(pct0), ratioSpread(runs, kd, kg).format(pct0), ratioSpread(runs, kt, kd).format(pct0), ratioSpread(runs, ks, kt).format(pct0),
			f1(fieldSpread(runs, ks, avg).Median), f1(fieldSpread(runs, kg, avg).Median), f2(fieldSpread(runs, ks, javaCommitP99).Median), f2(fieldSpread(runs, kg, javaCommitP99).Median),
			eosChecked(runs, func(x *pipelineResult) bool { return x.Batch == batch }))
	}
	tw.Flush()
	fmt.Fprintln(w, "(transactions alone: the same share consumer and a transactional producer, the ACCEPTs sent with the next poll after the commit — at-least-once, not checked. Direct, it is what the share consumer itself reaches, the ceiling of the sharetx column; through sharetx, what pass-through costs the pattern; sharetx / txn alone (sharetx) is what sharetx's exactly-once adds)")
	writeBudget(w, runs, batches, []string{m.group, m.txnDirect, m.txn, m.share})
}

// scalingLines are the scaling plot's lines: records/s against workers,
// share-group EOS through sharetx (solid) and consumer-group EOS (dashed),
// one pair per partition count.
func (r *Results) scalingLines() []plotLine {
	if len(r.Scaling) == 0 {
		return nil
	}
	shades := [][2]color.RGBA{{colB, colA}, {{0xc4, 0x4e, 0x52, 0xff}, {0x55, 0xa8, 0x68, 0xff}}}
	var ls []plotLine
	for i, p := range r.Options.ScalePartitions {
		c := shades[i%len(shades)]
		share := plotLine{Name: fmt.Sprintf("share-group EOS via sharetx, %d partition(s)", p), Color: c[0]}
		group := plotLine{Name: fmt.Sprintf("consumer-group EOS, %d partition(s)", p), Color: c[1], Dashed: true}
		for _, wk := range r.Options.ScaleWorkers {
			share.X, share.Y = append(share.X, float64(wk)), append(share.Y, rateSpread(r.Scaling, runKey{Mode: modeTxn, Workers: wk, Par: p}).Median)
			group.X, group.Y = append(group.X, float64(wk)), append(group.Y, rateSpread(r.Scaling, runKey{Mode: modeGroupEOS, Workers: wk, Par: p}).Median)
		}
		ls = append(ls, share, group)
	}
	ideal := plotLine{Name: "ideal: workers x 1/processing time (a consumer group: partitions x that)", Color: colAxis, Dashed: true, NoLabels: true}
	for _, wk := range r.Options.ScaleWorkers {
		ideal.X = append(ideal.X, float64(wk))
		ideal.Y = append(ideal.Y, float64(wk)*1000/(float64(r.Options.ScaleProc)/float64(time.Millisecond)))
	}
	for _, l := range ls {
		for _, y := range l.Y {
			if !math.IsNaN(y) {
				return append(ls, ideal)
			}
		}
	}
	return nil
}
