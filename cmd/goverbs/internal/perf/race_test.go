//go:build race

package perf

// raceEnabled: write_lat polls memory that the transport writes from
// another goroutine (perftest's method), and so does send_bw -R (its
// receiver-credit word). That is a data race by
// construction, which the race detector reports and cannot be told about,
// so the -race run leaves write_lat out; .ci/run also runs this package's
// tests without -race, where write_lat is measured too.
const raceEnabled = true
