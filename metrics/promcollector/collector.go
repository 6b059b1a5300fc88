// Package promcollector is a Prometheus collector of the counters of
// goverbs' devices (package metrics reads them). It is a module of its own,
// so that goverbs' core depends on no Prometheus code:
//
//	reg := prometheus.NewRegistry()
//	reg.MustRegister(promcollector.New())
//	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
//
// Every metric is a counter labelled with the device, read afresh at each
// scrape; what a device did is counted in the process that used it:
//
//	goverbs_qps_created_total{device}
//	goverbs_sent_messages_total{device,opcode}      successful send requests (opcode: SEND, RDMA_WRITE, ...)
//	goverbs_sent_bytes_total{device,opcode}
//	goverbs_received_messages_total{device}         successful receives
//	goverbs_received_bytes_total{device}
//	goverbs_completion_errors_total{device,queue,status}  queue: send or recv; status: IBV_WC_...
//	goverbs_retransmits_total{device}               packets sent again (RoCE)
//	goverbs_rnr_naks_total{device}                  RNR NAKs received (RoCE)
//	goverbs_cq_overflows_total{device}
//	goverbs_roce_datagrams_received_total{device}   a RoCE device's socket
//	goverbs_roce_datagrams_sent_total{device}
//	goverbs_roce_send_syscalls_total{device}
//	goverbs_roce_datagrams_dropped_total{device,reason}  reason: send_failed, bad_icrc, malformed, no_qp
//
// An opcode, status or drop reason shows once it has counted something.
package promcollector

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/goverbs/goverbs/metrics"
)

// Collector collects the counters of every goverbs device.
type Collector struct {
	qps, sentMsgs, sentBytes, recvMsgs, recvBytes, errs *prometheus.Desc
	retransmits, rnrNaks, overflows                     *prometheus.Desc
	wireRecv, wireSent, wireWrites, wireDropped         *prometheus.Desc
	descs                                               []*prometheus.Desc
}

// New returns a collector of the counters of every device of this process.
func New() *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("goverbs_"+name, help, append([]string{"device"}, labels...), nil)
	}
	c := &Collector{
		qps:         d("qps_created_total", "QPs the device created."),
		sentMsgs:    d("sent_messages_total", "Send requests that completed successfully, by opcode.", "opcode"),
		sentBytes:   d("sent_bytes_total", "Bytes of the send requests that completed successfully, by opcode.", "opcode"),
		recvMsgs:    d("received_messages_total", "Receives that completed successfully."),
		recvBytes:   d("received_bytes_total", "Bytes placed by the receives that completed successfully."),
		errs:        d("completion_errors_total", "Completions with an error status (IBV_WC_...), of the send or the receive queues.", "queue", "status"),
		retransmits: d("retransmits_total", "Packets sent again (go-back-N), on transports that retransmit."),
		rnrNaks:     d("rnr_naks_total", "RNR NAKs received, on transports that have them."),
		overflows:   d("cq_overflows_total", "CQs that overflowed."),
		wireRecv:    d("roce_datagrams_received_total", "Datagrams a RoCE device read from its socket."),
		wireSent:    d("roce_datagrams_sent_total", "Datagrams a RoCE device's socket took."),
		wireWrites:  d("roce_send_syscalls_total", "System calls that sent a RoCE device's datagrams (a GSO batch is one)."),
		wireDropped: d("roce_datagrams_dropped_total", "Datagrams a RoCE device dropped, by reason.", "reason"),
	}
	c.descs = []*prometheus.Desc{c.qps, c.sentMsgs, c.sentBytes, c.recvMsgs, c.recvBytes, c.errs,
		c.retransmits, c.rnrNaks, c.overflows, c.wireRecv, c.wireSent, c.wireWrites, c.wireDropped}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	for _, dev := range metrics.Read() {
		n, k := dev.Name, &dev.Counters
		counter(c.qps, k.QPs, n)
		for op, m := range dev.Opcodes() {
			counter(c.sentMsgs, m.Msgs, n, op)
			counter(c.sentBytes, m.Bytes, n, op)
		}
		counter(c.recvMsgs, k.Received.Msgs, n)
		counter(c.recvBytes, k.Received.Bytes, n)
		for _, q := range []string{"send", "recv"} {
			for st, v := range dev.Errors(q == "send") {
				counter(c.errs, v, n, q, st)
			}
		}
		counter(c.retransmits, k.Retransmits, n)
		counter(c.rnrNaks, k.RNRNaks, n)
		counter(c.overflows, k.CQOverflows, n)
		if w := dev.Wire; w != nil {
			counter(c.wireRecv, w.Received, n)
			counter(c.wireSent, w.Sent, n)
			counter(c.wireWrites, w.Writes, n)
			for reason, v := range map[string]uint64{"send_failed": w.SendFail, "bad_icrc": w.BadICRC, "malformed": w.Malformed, "no_qp": w.NoQP} {
				if v > 0 {
					counter(c.wireDropped, v, n, reason)
				}
			}
		}
	}
}
