// Package sim is what the chaos test (e2e/chaos) and the demo
// (examples/demo) have in common: both run sharetx and worker processes,
// kill and restart them, and then check that every input reached the output
// exactly once and that the share group acknowledged every input.
//
//   - proc.go: child processes (start with a time-stamped log, wait for
//     sharetx's "ready" line, signal, stop, kill -9), building
//     ./cmd/sharetx, scraping its /metrics, free ports.
//   - cluster.go: Kafka clients and admin requests: topics, configs, the
//     output topic read read_committed and counted per value, the share
//     group's leftover records and lag.
//   - worker.go: the program re-executing itself as its workers (Main,
//     TestMain, the `worker` subcommand), and the parts of a
//     consume-transform-produce worker process that do not depend on how it
//     acknowledges: its common flags, its stdout lines, its stdin
//     commands, the poll loop, the transactional producer's options and
//     initialization; LineLog for the programs' tests.
//   - verify.go: the counting of outputs per input id.
//
// What the two programs do differently on purpose (the chaos fault plan and
// its pause points, the demo's at-least-once mode and crash points) stays
// in the programs.
package sim
