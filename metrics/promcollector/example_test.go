package promcollector_test

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/goverbs/goverbs/metrics/promcollector"
)

// A program serves its devices' counters to Prometheus at /metrics.
func Example() {
	reg := prometheus.NewRegistry()
	reg.MustRegister(promcollector.New())
	http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	_ = http.ListenAndServe("localhost:9464", nil)
}
