package metrics_test

import (
	"net/http"

	"github.com/goverbs/goverbs/metrics"
)

// A program serves its devices' counters as JSON at /debug/vars, with
// expvar's other variables (importing expvar registers its handler on
// http.DefaultServeMux).
func Example() {
	metrics.Publish()
	_ = http.ListenAndServe("localhost:8080", nil)
}
