package promcollector_test

import (
	"bufio"
	"io"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/metrics/promcollector"
	"github.com/goverbs/goverbs/provider/loop"
	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/verbs"
)

// sends makes n SENDs of size bytes between two connected QPs of loop0,
// then fails the receiver with one receive posted: its flush is a
// completion error.
func sends(t *testing.T, n, size int) {
	t.Helper()
	ctx, err := verbs.OpenDevice(loop.DeviceName)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Dealloc()
	cq, err := ctx.CreateCQ(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Destroy()
	attr := verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
	a, err := pd.CreateQP(attr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Destroy()
	b, err := pd.CreateQP(attr)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Destroy()
	if err := loop.Connect(a, b); err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(make([]byte, 4096), verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer mr.Dereg()
	wc := make([]verbs.WC, 4)
	poll := func(want int) {
		for got, deadline := 0, time.Now().Add(10*time.Second); got < want; {
			k, err := cq.Poll(wc)
			if err != nil || time.Now().After(deadline) {
				t.Fatalf("poll: %v (%d of %d)", err, got, want)
			}
			got += k
		}
	}
	recv := func() {
		if err := b.PostRecv([]verbs.RecvWR{{SGList: []verbs.SGE{mr.SGE(2048, size)}}}); err != nil {
			t.Fatal(err)
		}
	}
	for range n {
		recv()
		if err := a.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGList: []verbs.SGE{mr.SGE(0, size)}}}); err != nil {
			t.Fatal(err)
		}
		poll(2)
	}
	recv()
	if err := b.Modify(&verbs.QPAttr{QPState: verbs.QPSErr}, verbs.QPAttrState); err != nil {
		t.Fatal(err)
	}
	poll(1)
}

// scrape fetches the text exposition from url and returns each sample's
// value by its name and labels, as the text shows them.
func scrape(t *testing.T, srv *httptest.Server) map[string]float64 {
	t.Helper()
	url := srv.URL + "/metrics"
	resp, err := srv.Client().Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s: %s\n%s", url, resp.Status, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			t.Fatalf("%q: not a sample", line)
		}
		out[line[:i]] = v
	}
	return out
}

// The collector, registered in a pedantic registry (which checks that
// what it collects is what it describes) and served over HTTP, reports the
// device's counters at each scrape: the SENDs, receives and flush between
// two scrapes show as exactly that much more; RoCE devices have their
// datagram counters; promlint finds nothing to say.
func TestScrape(t *testing.T) {
	leakcheck.Check(t)
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(promcollector.New())
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()

	const n, size = 30, 200
	dev := `{device="` + loop.DeviceName + `"}`
	sendsKey := `goverbs_sent_messages_total{device="loop0",opcode="SEND"}`
	bytesKey := `goverbs_sent_bytes_total{device="loop0",opcode="SEND"}`
	flushKey := `goverbs_completion_errors_total{device="loop0",queue="recv",status="` + verbs.WCWRFlushErr.Name() + `"}`
	before := scrape(t, srv)
	sends(t, n, size)
	after := scrape(t, srv)
	for _, c := range []struct {
		key  string
		want float64
	}{
		{sendsKey, n}, {bytesKey, n * size}, {"goverbs_received_messages_total" + dev, n},
		{"goverbs_received_bytes_total" + dev, n * size}, {flushKey, 1}, {"goverbs_qps_created_total" + dev, 2},
	} {
		got, ok := after[c.key]
		if !ok {
			t.Errorf("no %s in the scrape", c.key)
			continue
		}
		if d := got - before[c.key]; d != c.want {
			t.Errorf("%s: %v more, want %v", c.key, d, c.want)
		}
	}
	var roceDev bool
	for _, d := range verbs.Devices() {
		if _, ok := roce.DeviceAddr(d.Name()); ok {
			key := `goverbs_roce_datagrams_received_total{device="` + d.Name() + `"}`
			if _, ok := after[key]; !ok {
				t.Errorf("no %s", key)
			}
			roceDev = true
		}
	}
	if !roceDev {
		t.Error("no RoCE device (127.0.0.1 has one)")
	}
	problems, err := testutil.CollectAndLint(promcollector.New())
	if err != nil || len(problems) > 0 {
		t.Errorf("promlint: %v %v", err, problems)
	}
}
