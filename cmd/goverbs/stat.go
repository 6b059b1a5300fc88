package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/goverbs/goverbs/metrics"
	"github.com/goverbs/goverbs/provider/roce"
)

const statHelp = `usage: goverbs stat [--json] [--idle] COMMAND [ARGS...]

Runs another goverbs command (perf, ping, demo) in this process and then
prints the counters of every device it used, like rdma statistic and a
NIC's hw counters: messages and bytes per opcode, receives, completions
by error status, retransmissions and RNR NAKs, CQ overflows, and for RoCE
devices the datagrams sent, received and dropped. goverbs' devices live in
the process that uses them, so their counters are read there: a program
reads its own with QP.Counters and Context.Counters, and publishes them
with package metrics (expvar; Prometheus through its promcollector
module).

    goverbs stat perf write_bw -s 65536 -n 1000
`

func stat(args []string) error {
	fs := newCommand("stat", statHelp)
	fs.SetInterspersed(false) // the flags after COMMAND are its own
	asJSON := fs.Bool("json", false, "print the counters as JSON lines")
	all := fs.Bool("idle", false, "print devices that did nothing too")
	args, err := fs.parse(args)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		return badUsage("stat", "a command to run is needed (goverbs stat perf send_lat, say)")
	}
	if args[0] == "stat" {
		return badUsage("stat", "stat runs another command, not itself")
	}
	if err := fs.begin(); err != nil {
		return err
	}
	if code := run(args); code != 0 {
		// The command said why; stat exits as it did (2 for a bad
		// command line).
		return &exitError{code, fmt.Errorf("%s exited with status %d", args[0], code)}
	}
	return printCounters(*asJSON, *all)
}

// deviceStat is one device's counters as stat prints them.
type deviceStat struct {
	Device      string               `json:"device"`
	QPs         uint64               `json:"qps"`
	Sent        map[string][2]uint64 `json:"sent,omitempty"` // opcode: messages, bytes
	Received    [2]uint64            `json:"received"`
	Errors      map[string]uint64    `json:"errors,omitempty"`
	Retransmits uint64               `json:"retransmits"`
	RNRNaks     uint64               `json:"rnr_naks"`
	CQOverflows uint64               `json:"cq_overflows"`
	Wire        *roce.Counters       `json:"wire,omitempty"`
}

func printCounters(asJSON, all bool) error {
	var out []deviceStat
	for _, d := range metrics.Read() {
		c := &d.Counters
		if c.QPs == 0 && !all {
			continue
		}
		s := deviceStat{Device: d.Name, QPs: c.QPs, Sent: map[string][2]uint64{}, Errors: d.Errors(true),
			Received: [2]uint64{c.Received.Msgs, c.Received.Bytes}, Retransmits: c.Retransmits, RNRNaks: c.RNRNaks, CQOverflows: c.CQOverflows,
			Wire: d.Wire}
		for op, n := range d.Opcodes() {
			s.Sent[op] = [2]uint64{n.Msgs, n.Bytes}
		}
		for st, n := range d.Errors(false) {
			s.Errors[st] += n
		}
		out = append(out, s)
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		for _, s := range out {
			if err := enc.Encode(s); err != nil {
				return err
			}
		}
		return nil
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 8, 2, ' ', 0)
	for _, s := range out {
		fmt.Fprintf(w, "\n%s\tqps %d\tretransmits %d\trnr_naks %d\tcq_overflows %d\n", s.Device, s.QPs, s.Retransmits, s.RNRNaks, s.CQOverflows)
		for _, op := range slices.Sorted(maps.Keys(s.Sent)) {
			n := s.Sent[op]
			fmt.Fprintf(w, "  sent %s\t%d msgs\t%d bytes\n", op, n[0], n[1])
		}
		fmt.Fprintf(w, "  received\t%d msgs\t%d bytes\n", s.Received[0], s.Received[1])
		var errs []string
		for _, st := range slices.Sorted(maps.Keys(s.Errors)) {
			errs = append(errs, fmt.Sprintf("%s %d", st, s.Errors[st]))
		}
		if len(errs) > 0 {
			fmt.Fprintf(w, "  errors\t%s\n", strings.Join(errs, ", "))
		}
		if s.Wire != nil {
			fmt.Fprintf(w, "  wire\tsent %d (%d writes)\treceived %d\tsend_fail %d\tbad_icrc %d\tmalformed %d\tno_qp %d\tcm_timeout %d\n",
				s.Wire.Sent, s.Wire.Writes, s.Wire.Received, s.Wire.SendFail, s.Wire.BadICRC, s.Wire.Malformed, s.Wire.NoQP, s.Wire.CMTimeout)
		}
	}
	return w.Flush()
}
