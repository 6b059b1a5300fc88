package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	gvcapture "github.com/goverbs/goverbs/capture"
	"github.com/goverbs/goverbs/cmd/goverbs/internal/perf"
	"github.com/goverbs/goverbs/verbs"
)

// Flags after the server address are read, as perftest's users type them
// (GNU getopt permutes): the port, size and iterations given after SERVER
// are the ones used.
func TestPerfFlagsAfterServer(t *testing.T) {
	for _, args := range [][]string{
		{"send_lat", "127.0.0.1", "-p", "7400", "-s", "64"},
		{"send_lat", "-p", "7400", "127.0.0.1", "-s", "64"},
		{"-s", "64", "send_lat", "127.0.0.1", "--port=7400"},
		{"send_lat", "127.0.0.1", "-p7400", "-s64"},
		{"send_lat", "127.0.0.1", "--port", "7400", "--size=64"},
		{"send_lat", "127.0.0.1", "-p=7400", "-size", "64"}, // Go's flag package spellings
	} {
		r, err := parsePerf(args)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if r.dial != "127.0.0.1:7400" || r.cfg.Size != 64 || r.cfg.Test != "send_lat" || r.server || r.listen != "" {
			t.Errorf("%q: dial %q, size %d, test %q, server %v, listen %q", args, r.dial, r.cfg.Size, r.cfg.Test, r.server, r.listen)
		}
		if r.cfg.Iters != 1000 || r.cfg.Warmup != defaultWarmup || len(r.sizes) != 1 || r.sizes[0] != 64 {
			t.Errorf("%q: defaults: %d iterations, %d warm-up, sizes %v", args, r.cfg.Iters, r.cfg.Warmup, r.sizes)
		}
	}
}

// A post list (perftest's -l, --post_list) reaches the bandwidth test's
// configuration, after the server address too; by default it is 1.
func TestPerfPostList(t *testing.T) {
	for _, args := range [][]string{
		{"write_bw", "127.0.0.1", "-s", "8", "-l", "16"},
		{"write_bw", "-d", "shm0", "--post-list=16", "-s8"},
	} {
		r, err := parsePerf(args)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if r.cfg.PostList != 16 || r.cfg.Size != 8 {
			t.Errorf("%q: post list %d, size %d", args, r.cfg.PostList, r.cfg.Size)
		}
	}
	if r, err := parsePerf([]string{"write_bw"}); err != nil || r.cfg.PostList != 1 {
		t.Fatalf("default post list: %v %v", r, err)
	}
}

// Event mode (perftest's -e, --events) reaches the test's configuration,
// in either role and with -R; it is off by default.
func TestPerfEvents(t *testing.T) {
	for _, args := range [][]string{
		{"send_lat", "-e"},
		{"write_lat", "--events", "-d", "shm0"},
		{"send_bw", "127.0.0.1", "-e", "-R"},
		{"read_bw", "--server", "-e"},
	} {
		r, err := parsePerf(args)
		if err != nil {
			t.Fatalf("%q: %v", args, err)
		}
		if !r.cfg.Events {
			t.Errorf("%q: not in event mode", args)
		}
	}
	if r, err := parsePerf([]string{"send_lat"}); err != nil || r.cfg.Events {
		t.Fatalf("default: %+v %v", r, err)
	}
}

// Every flag spelling that scripts use keeps working: the single-dash long
// names of Go's flag package (-json, -server), perftest's short flags
// anywhere, and GNU long names.
func TestPerfSpellings(t *testing.T) {
	r, err := parsePerf([]string{"write_bw", "-server", "-json", "-d", "shm0", "-p", "9000", "-D", "3", "-q", "2", "-t", "64", "-Q", "10"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.server || !r.json || r.dev != "shm0" || r.listen != "unix:@goverbs-perf-9000" ||
		r.cfg.Duration != 3*time.Second || r.cfg.QPs != 2 || r.cfg.TxDepth != 64 || r.cfg.CQMod != 10 {
		t.Fatalf("%+v", r)
	}
	r, err = parsePerf([]string{"read_bw", "10.0.0.2", "-R", "--json", "-n", "300", "--qp=3"})
	if err != nil {
		t.Fatal(err)
	}
	if !r.perftest || !r.json || r.dial != "10.0.0.2:18515" || r.cfg.Iters != 300 || r.cfg.QPs != 3 || r.cfg.Warmup != 0 {
		t.Fatalf("%+v", r)
	}
	// Over shared memory SERVER is this host, or a unix: address.
	if r, err = parsePerf([]string{"send_lat", "localhost", "-d", "shm0", "-p", "7400"}); err != nil || r.dial != "unix:@goverbs-perf-7400" {
		t.Fatalf("%+v %v", r, err)
	}
	if r, err = parsePerf([]string{"send_lat", "unix:@x", "-d", "shm0"}); err != nil || r.dial != "unix:@x" {
		t.Fatalf("%+v %v", r, err)
	}
	// In loopback, -p is the port listened on.
	if r, err = parsePerf([]string{"send_lat", "-p", "7400"}); err != nil || r.listen != "127.0.0.1:7400" || r.dial != "" {
		t.Fatalf("%+v %v", r, err)
	}
	// No argument at all is the summary of every test.
	if r, err = parsePerf(nil); err != nil || !r.summary {
		t.Fatalf("%+v %v", r, err)
	}
	// Ping: rping's short flags in any order and the -crc of earlier versions.
	if got := goSpellings(pingFlags().FlagSet, []string{"-crc", "--v", "-a", "-crc", "-S=64"}); strings.Join(got, " ") != "--crc -v -a -crc -S=64" {
		t.Fatalf("ping spellings: %q", got)
	}
}

// pingFlags is a flag set like ping's, for goSpellings.
func pingFlags() *command {
	fs := newCommand("ping", "")
	fs.BoolP("verbose", "v", false, "")
	fs.StringP("addr", "a", "", "")
	fs.IntP("size", "S", 64, "")
	fs.Bool("crc", false, "")
	return fs
}

// What perf would ignore is refused, before anything runs or is printed.
func TestPerfRefuses(t *testing.T) {
	for _, args := range [][]string{
		{"-d", "shm0"},         // flags without a TEST
		{"nope"},               // unknown test
		{"send_lat", "a", "b"}, // two servers
		{"send_lat", "127.0.0.1", "--server"},
		{"send_lat", "-D", "1"},             // latency tests are counted
		{"send_bw", "-D", "1"},              // send_bw posts its receives first
		{"write_bw", "-D", "1", "-n", "10"}, // timed or counted
		{"write_bw", "-D", "0"},
		{"read_bw", "-R", "-D", "1"},
		{"send_bw", "-w", "10"},        // send_bw posts its receives first
		{"write_bw", "-R", "-w", "10"}, // perftest's peers have no warm-up
		{"send_lat", "-Q", "10"},       // cq_mod is for bandwidth tests
		{"send_lat", "-l", "16"},       // so is a post list
		{"write_bw", "-l", "0"},
		{"send_bw", "-n", "9000"}, // over iWARP (the default device)
		{"write_bw", "-a", "-s", "64"},
		{"send_lat", "-d", "shm0", "example.com"},
		{"send_lat", "-d", "shm0", "unix:@x", "-p", "1"},
		{"send_lat", "unix:@x"},
		{"send_lat", "-R", "-d", "shm0"},
		{"send_lat", "-t", "0"},
		{"send_lat", "-s", "0"},
		{"write_lat", "-q", "2"},
		{"send_lat", "-x"},
	} {
		if _, err := parsePerf(args); err == nil {
			t.Errorf("%q: no error", args)
		} else if _, ok := err.(*usageError); !ok {
			t.Errorf("%q: %v is not a usage error", args, err)
		}
	}
}

// A goverbs server given parameters checks that its client asks for the
// same ones; those it was not given are the client's to choose.
func TestPerfServerMatch(t *testing.T) {
	r, err := parsePerf([]string{"write_bw", "--server", "-s", "4096", "-D", "2"})
	if err != nil {
		t.Fatal(err)
	}
	ok := perf.Config{Test: "write_bw", Size: 4096, Iters: 77, QPs: 3, Duration: 2 * time.Second, CQMod: 5}
	if err := r.cfg.Match(ok); err != nil {
		t.Fatalf("matching client refused: %v", err)
	}
	bad := ok
	bad.Size, bad.Duration = 8, time.Second
	if err := r.cfg.Match(bad); err == nil || !strings.Contains(err.Error(), "-s 8 (this server: 4096)") || !strings.Contains(err.Error(), "-D 1s") {
		t.Fatalf("mismatch: %v", err)
	}
	// With -a, each run's size is expected in turn.
	r, err = parsePerf([]string{"write_bw", "--server", "-a"})
	if err != nil {
		t.Fatal(err)
	}
	r.matchSize(r.sizes[3])
	if err := r.cfg.Match(perf.Config{Size: r.sizes[3]}); err != nil {
		t.Fatal(err)
	}
	if err := r.cfg.Match(perf.Config{Size: r.sizes[4]}); err == nil {
		t.Fatal("-a: the wrong size accepted")
	}
}

// capture runs f with the standard output and help going to a pipe and
// returns what was written.
func capture(t *testing.T, f func()) string {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan string)
	go func() {
		b, _ := io.ReadAll(pr)
		out <- string(b)
	}()
	stdout, help := os.Stdout, helpOut
	os.Stdout, helpOut = pw, pw
	defer func() { os.Stdout, helpOut = stdout, help }()
	f()
	pw.Close()
	return <-out
}

// -h and --help print the command's help and exit 0; each flag's line
// shows its default once.
func TestHelp(t *testing.T) {
	for _, cmd := range []string{"devices", "demo", "ping", "perf", "soak", "stat"} {
		for _, h := range []string{"-h", "--help", "-help"} {
			var code int
			out := capture(t, func() { code = run([]string{cmd, h}) })
			if code != 0 {
				t.Errorf("goverbs %s %s: exit status %d", cmd, h, code)
			}
			if !strings.HasPrefix(out, "usage: goverbs "+cmd) || !strings.Contains(out, "\nflags:\n") {
				t.Errorf("goverbs %s %s printed:\n%s", cmd, h, out)
			}
			flags := out[strings.Index(out, "\nflags:\n"):]
			for _, line := range strings.Split(flags, "\n") {
				if strings.Count(line, "default") > 1 {
					t.Errorf("goverbs %s help: a default shown twice: %q", cmd, line)
				}
			}
		}
	}
	// The help also works after other arguments.
	if code := run([]string{"perf", "send_lat", "127.0.0.1", "-h"}); code != 0 {
		t.Errorf("perf ... -h: exit status %d", code)
	}
	if code := run([]string{"-h"}); code != 0 {
		t.Errorf("goverbs -h: exit status %d", code)
	}
}

// A bad command line exits 2 and prints nothing on standard output (each
// command parses all its flags first).
func TestBadCommandLine(t *testing.T) {
	for _, args := range [][]string{
		{"devices", "extra"},
		{"devices", "-x"},
		{"demo", "-n", "0"},
		{"demo", "-n", "10", "extra"},
		{"demo", "-D", "0s"},
		{"demo", "-d", "1s"}, // -d is a device, not demo's duration
		{"ping"},
		{"ping", "-s", "-c"},
		{"ping", "-c"},
		{"ping", "-c", "-a", "unix:@x", "-p", "1"},
		{"ping", "-s", "-S", "10"},
		{"ping", "-s", "extra"},
		{"perf", "send_lat", "127.0.0.1", "-p", "7400", "-x"},
		{"perf", "write_bw", "-D", "1", "-n", "5"},
		{"nope"},
		{"stat", "--bogus", "perf"},
		{"stat", "perf", "send_lat", "-x"},
		{},
	} {
		var code int
		out := capture(t, func() { code = run(args) })
		if code != 2 {
			t.Errorf("%q: exit status %d, want 2", args, code)
		}
		if out != "" {
			t.Errorf("%q printed on standard output:\n%s", args, out)
		}
	}
}

// The loop demo runs from its command line with flags in any order.
func TestDemoRuns(t *testing.T) {
	var code int
	out := capture(t, func() { code = run([]string{"demo", "-D", "20ms", "--iters=2000"}) })
	if code != 0 || !strings.Contains(out, "device loop0") || !strings.Contains(out, "write_bw") {
		t.Fatalf("exit status %d:\n%s", code, out)
	}
	if !strings.Contains(out, " 2000 ") {
		t.Fatalf("-n 2000 not used:\n%s", out)
	}
}

// A result names the provider and the device it was measured on, in the
// table's heading and in every JSON line.
func TestResultsNameProviderAndDevice(t *testing.T) {
	// shm0's socket is named after the port: one of this process's own,
	// below Linux's ephemeral range (32768-60999) so that no connection of
	// a test running alongside holds it, and free now.
	port := ""
	for p := 20000 + os.Getpid()%12000; port == ""; p = 20000 + (p-19999)%12000 {
		if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p)); err == nil {
			ln.Close()
			port = strconv.Itoa(p)
		}
	}
	for _, c := range []struct{ dev, prov string }{{"iwarp0", "iwarp"}, {"shm0", "shm"}} {
		var code int
		out := capture(t, func() {
			code = run([]string{"perf", "send_lat", "-d", c.dev, "-n", "50", "-w", "10", "-p", port})
		})
		if code != 0 || !strings.Contains(out, "device "+c.dev+" (provider "+c.prov+":") {
			t.Errorf("perf send_lat -d %s: exit status %d:\n%s", c.dev, code, out)
		}
		out = capture(t, func() {
			code = run([]string{"perf", "write_bw", "-d", c.dev, "-n", "50", "-s", "4096", "--json", "-p", port})
		})
		var res struct{ Provider, Device string }
		if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil || res.Provider != c.prov || res.Device != c.dev {
			t.Errorf("perf write_bw -d %s --json: exit status %d, %v:\n%s", c.dev, code, err, out)
		}
	}
}

// stat runs a command and prints the counters of the devices it used:
// a loopback send_lat of n iterations is 2n SENDs and 2n receives (plus
// the warm-up), none with an error but the flushes of the receives left
// posted at the end.
func TestStatCountsWhatPerfDid(t *testing.T) {
	var code int
	out := capture(t, func() { code = run([]string{"stat", "--json", "perf", "send_lat", "-n", "200", "-d", "shm0"}) })
	if code != 0 {
		t.Fatalf("exit status %d:\n%s", code, out)
	}
	var found bool
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var s deviceStat
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("%q: %v", line, err)
		}
		if s.Device != "shm0" {
			continue
		}
		found = true
		if sent := s.Sent["SEND"]; sent[0] < 400 || s.Received[0] < 400 || s.QPs < 2 {
			t.Fatalf("shm0 counted %+v, want 400 SENDs and receives at least over 2 QPs", s)
		}
		for st, n := range s.Errors {
			if st != verbs.WCWRFlushErr.Name() {
				t.Fatalf("shm0 counted %d %s", n, st)
			}
		}
	}
	if !found {
		t.Fatalf("no counters of shm0 in:\n%s", out)
	}
}

// TestMain lets the test binary be the soak's peer process: soak starts
// os.Args[0] with "soak --peer".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "soak" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// A short soak over iWARP and shm with the peer killed twice: every work
// request completes (none lost), every byte checks, and the run says so.
func TestSoakSurvivesKills(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", fmt.Sprintf("unix:@goverbs-soak-test-%d", os.Getpid())} {
		var code int
		out := capture(t, func() { code = run([]string{"soak", addr, "-D", "4", "-q", "3", "--kill-every", "1500ms"}) })
		if code != 0 {
			t.Fatalf("%s: exit status %d:\n%s", addr, code, out)
		}
		if !strings.Contains(out, "lost 0, corrupted 0") || strings.Contains(out, " 0 peer kills") || strings.Contains(out, " 0 operations") {
			t.Fatalf("%s: %s", addr, out)
		}
	}
}

// goverbs ping recorded with --capture over iwarp, shm and roce: tshark
// decodes every packet (iwarp: its TCP stream; roce: RoCEv2; shm: the
// packets a RoCE wire would carry) and sees rping's operations: SENDs, the server's RDMA READ
// of the client's buffer and its RDMA WRITE back.
func TestPingCaptureDecodes(t *testing.T) {
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed (apt-get install tshark; .ci/run installs it)")
	}
	p := os.Getpid()
	for _, c := range []struct{ name, addr, port string }{
		{"iwarp", "127.0.0.1", "7497"},
		{"shm", fmt.Sprintf("unix:@goverbs-ping-capture-%d", p), ""},
		{"roce", fmt.Sprintf("roce://127.%d.%d.30", 16+p%200, p/200%250), "7498"},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), c.name+".pcapng")
			rec, err := gvcapture.Start(file, gvcapture.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer rec.Stop()
			args := func(role string) []string {
				a := []string{"ping", role, "-a", c.addr, "-C", "3", "-S", "100"}
				if c.port != "" {
					a = append(a, "-p", c.port)
				}
				return a
			}
			done := make(chan int, 1)
			go func() { done <- run(args("-s")) }()
			var code int
			for range 50 { // until the server listens
				if code = run(args("-c")); code == 0 {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if code != 0 {
				t.Fatalf("ping client: exit status %d", code)
			}
			if code := <-done; code != 0 {
				t.Fatalf("ping server: exit status %d", code)
			}
			if err := rec.Stop(); err != nil {
				t.Fatal(err)
			}
			dec := func(args ...string) string {
				out, err := exec.Command(tshark, append([]string{"-r", file, "-d", "udp.port==4791,infiniband", "--disable-protocol", "rpcordma"}, args...)...).Output()
				if err != nil {
					t.Fatalf("tshark: %v", err)
				}
				return string(out)
			}
			all := dec()
			// iWARP is recorded as its TCP stream (MPA, DDP, RDMAP), the
			// others as RoCEv2.
			undecoded, ops := "!infiniband", []string{"Send Only", "RDMA Read Request", "RDMA Read Response", "RDMA Write", "Acknowledge"}
			if c.name == "iwarp" {
				undecoded, ops = "tcp.len > 0 && !iwarp_mpa", []string{"MPA Request Frame", "MPA Reply Frame", "Send [last DDP segment]",
					"Read Request [last DDP segment]", "Read Response [last DDP segment]", "Write [last DDP segment]"}
			}
			if bad := dec("-Y", `_ws.malformed || _ws.expert.severity >= "warning" || `+undecoded); bad != "" || all == "" {
				t.Fatalf("malformed or undecoded packets:\n%s\nof\n%s", bad, all)
			}
			for _, op := range ops {
				if !strings.Contains(all, op) {
					t.Errorf("no %q in:\n%s", op, all)
				}
			}
		})
	}
}
