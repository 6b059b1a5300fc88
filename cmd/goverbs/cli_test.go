package main

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goverbs/goverbs/provider/roce"
	"github.com/goverbs/goverbs/verbs"
)

// runAll runs goverbs with args and returns its exit status, standard
// output (and help) and standard error.
func runAll(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	stderr = withStderr(t, func() {
		stdout = capture(t, func() { code = run(args) })
	})
	return code, stdout, stderr
}

// goverbs help COMMAND prints what COMMAND -h prints; help alone is the
// overview, as -h and --help are.
func TestHelpCommand(t *testing.T) {
	for _, cmd := range commandNames {
		code, out, _ := runAll(t, "help", cmd)
		_, want, _ := runAll(t, cmd, "-h")
		if code != 0 || out != want || !strings.HasPrefix(out, "usage: goverbs "+cmd) {
			t.Errorf("goverbs help %s: exit status %d, printed:\n%s\nwant:\n%s", cmd, code, out, want)
		}
	}
	_, overview, _ := runAll(t, "-h")
	for _, args := range [][]string{{"help"}, {"--help"}, {"-help"}} {
		if code, out, _ := runAll(t, args...); code != 0 || out != overview || !strings.Contains(out, "commands:") {
			t.Errorf("goverbs %q: exit status %d:\n%s", args, code, out)
		}
	}
	if code, out, errs := runAll(t, "help", "nope"); code != 2 || out != "" || strings.Count(errs, "\n") != 1 {
		t.Errorf("goverbs help nope: exit status %d, stdout %q, stderr %q", code, out, errs)
	}
}

// --version names goverbs, its module version and the Go that built it.
func TestVersion(t *testing.T) {
	for _, v := range []string{"--version", "-version"} {
		code, out, _ := runAll(t, v)
		if code != 0 || !strings.HasPrefix(out, "goverbs ") || !strings.Contains(out, runtime.Version()) || strings.Count(out, "\n") != 1 {
			t.Errorf("goverbs %s: exit status %d: %q", v, code, out)
		}
	}
}

// An unknown command is one line on standard error (naming the commands),
// exit status 2; a perf test given as the command says where it belongs.
func TestUnknownCommandIsOneLine(t *testing.T) {
	for _, c := range []struct{ cmd, hint string }{
		{"nope", "commands: devices, demo, ping, perf, soak, stat"},
		{"send_lat", "goverbs perf send_lat"},
	} {
		code, out, errs := runAll(t, c.cmd)
		if code != 2 || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, c.hint) {
			t.Errorf("goverbs %s: exit status %d, stdout %q, stderr %q", c.cmd, code, out, errs)
		}
	}
	if code, _, errs := runAll(t, "--bogus", "devices"); code != 2 || strings.Count(errs, "\n") != 1 {
		t.Errorf("goverbs --bogus devices: exit status %d, %q", code, errs)
	}
}

// The global flags come before the command: -v is the command's -v,
// --capture its --capture; a command without -v says so.
func TestGlobalFlagsBeforeCommand(t *testing.T) {
	_, want, _ := runAll(t, "devices", "-v")
	code, got, _ := runAll(t, "-v", "devices")
	if code != 0 || got != want || !strings.Contains(got, "hca_id:") {
		t.Fatalf("goverbs -v devices: exit status %d:\n%s\nwant (devices -v):\n%s", code, got, want)
	}
	if code, _, errs := runAll(t, "-v", "demo"); code != 2 || !strings.Contains(errs, "demo has no verbose output") {
		t.Errorf("goverbs -v demo: exit status %d: %s", code, errs)
	}
	file := filepath.Join(t.TempDir(), "d.pcapng")
	code, out, errs := runAll(t, "--capture", file, "demo", "-n", "200", "-D", "5ms")
	if st, err := os.Stat(file); code != 0 || err != nil || st.Size() < 1000 || !strings.Contains(errs, "packets recorded in "+file) {
		t.Fatalf("goverbs --capture FILE demo: exit status %d, %v, %v:\n%s\n%s", code, st, err, out, errs)
	}
}

// --capture is in every command's help, and refused (with the reason,
// before any file is made) where nothing would be recorded.
func TestCaptureInEveryHelp(t *testing.T) {
	for _, cmd := range commandNames {
		if _, out, _ := runAll(t, cmd, "-h"); !regexp.MustCompile(`(?m)^\s+--capture FILE\s+\S`).MatchString(out) {
			t.Errorf("goverbs %s -h has no --capture FILE:\n%s", cmd, out)
		}
	}
	dir := t.TempDir()
	for _, args := range [][]string{
		{"devices", "--capture", "x"},
		{"--capture", "x", "devices"},
		{"devices", "-v", "--capture=x"},
		{"stat", "--capture", "x", "perf", "send_lat", "--capture", "y", "-n", "10"},
	} {
		for i, a := range args {
			if a == "x" || a == "y" || strings.HasSuffix(a, "=x") {
				args[i] = strings.Replace(a, a[len(a)-1:], filepath.Join(dir, a[len(a)-1:]), 1)
			}
		}
		code, out, errs := runAll(t, args...)
		if code != 2 || out != "" || !strings.Contains(errs, "--capture") {
			t.Errorf("%q: exit status %d, stdout %q, stderr %q", args, code, out, errs)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 { // stat's own, started before perf refused the second
		t.Errorf("files made: %v", ents)
	}
}

// One syntax for every duration: seconds as perftest's -D has them, or a
// Go duration.
func TestDurationSyntax(t *testing.T) {
	for s, want := range map[string]time.Duration{
		"1.5": 1500 * time.Millisecond, "1.5s": 1500 * time.Millisecond, "2": 2 * time.Second,
		"200ms": 200 * time.Millisecond, "0": 0, "1m30s": 90 * time.Second, "0.001": time.Millisecond,
	} {
		if got, err := parseDuration(s); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "abc", "1.5x", "NaN", "Inf", "0x10", "1e300", "1_0"} {
		if got, err := parseDuration(s); err == nil {
			t.Errorf("%q: %v, no error", s, got)
		}
	}
	for _, d := range []string{"1.5", "1.5s", "1500ms"} {
		r, err := parsePerf([]string{"write_bw", "-D", d})
		if err != nil || r.cfg.Duration != 1500*time.Millisecond {
			t.Errorf("perf write_bw -D %s: %+v, %v", d, r, err)
		}
	}
	for _, args := range [][]string{{"demo", "-D", "abc"}, {"soak", "-D", "0"}, {"soak", "--kill-every", "-1"}, {"ping", "-s", "--timeout", "0"}} {
		if code, _, errs := runAll(t, args...); code != 2 || errs == "" {
			t.Errorf("%q: exit status %d: %s", args, code, errs)
		}
	}
}

// helpFlags returns the flags a command's help lists: long name -> short
// letter ("" for none).
func helpFlags(t *testing.T, cmd string) map[string]string {
	t.Helper()
	_, out, _ := runAll(t, cmd, "-h")
	i := strings.Index(out, "\nflags:\n")
	if i < 0 {
		t.Fatalf("goverbs %s -h lists no flags:\n%s", cmd, out)
	}
	re := regexp.MustCompile(`^\s+(?:-(\w), )?--([\w-]+)`)
	flags := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out[i:]))
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			flags[m[2]] = m[1]
		}
	}
	return flags
}

// Every letter means one thing in every command, and every long flag is
// one letter (or none) wherever it is, but for ping's, which are rping's;
// the package doc's table lists every letter with its long name.
func TestOneMeaningPerLetter(t *testing.T) {
	// rping's letters, where perftest's (perf's) differ.
	rping := map[string]bool{"s server": true, "a addr": true, "d debug": true, "S size": true}
	doc, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	letter := map[string]string{} // letter -> long name, and where
	long := map[string]string{}   // long name -> letter, and where
	for _, cmd := range commandNames {
		for name, l := range helpFlags(t, cmd) {
			if l != "" && !regexp.MustCompile(`(?m)^//\s+-`+l+`\s+--`+name+`\s|\(`+cmd+`: -`+l+` is --`+name+`\W`).Match(doc) {
				t.Errorf("goverbs %s -%s --%s: not in the package doc's table", cmd, l, name)
			}
			if cmd == "ping" && rping[l+" "+name] {
				continue
			}
			if l != "" {
				if prev, ok := letter[l]; ok && !strings.HasPrefix(prev, name+" ") {
					t.Errorf("-%s is --%s in %s and --%s", l, name, cmd, prev)
				}
				letter[l] = name + " (" + cmd + ")"
			}
			if prev, ok := long[name]; ok && !strings.HasPrefix(prev, l+" ") {
				t.Errorf("--%s is -%s in %s and -%s", name, l, cmd, prev)
			}
			long[name] = l + " (" + cmd + ")"
		}
	}
	if len(letter) < 15 {
		t.Fatalf("only %d letters found: %v", len(letter), letter)
	}
}

// A letter that meant something else in an earlier version says what to
// give now.
func TestMovedLetterSaysWhatNow(t *testing.T) {
	for _, c := range []struct{ args, want []string }{
		{[]string{"demo", "-d", "1s"}, []string{"-D (--duration)"}},
		{[]string{"soak", "-a", "127.0.0.1:0"}, []string{"ADDR or --addr"}},
		{[]string{"ping", "-c", "-a", "x", "-t", "5s"}, []string{"--timeout"}},
	} {
		code, _, errs := runAll(t, c.args...)
		if code != 2 || strings.Count(errs, "\n") != 2 {
			t.Errorf("%q: exit status %d: %s", c.args, code, errs)
		}
		for _, w := range c.want {
			if !strings.Contains(errs, w) {
				t.Errorf("%q: %q not in %s", c.args, w, errs)
			}
		}
	}
}

// perftest's long spellings are perf's flags too.
func TestPerfTakesPerftestSpellings(t *testing.T) {
	r, err := parsePerf([]string{"write_bw", "10.0.0.2", "--qp=2", "--post_list", "4", "--cq_mod=10", "--tx_depth", "64", "--ib_dev=iwarp0"})
	if err != nil {
		t.Fatal(err)
	}
	if r.cfg.QPs != 2 || r.cfg.PostList != 4 || r.cfg.CQMod != 10 || r.cfg.TxDepth != 64 {
		t.Fatalf("%+v", r.cfg)
	}
	if r, err = parsePerf([]string{"send_lat", "10.0.0.2", "--rdma_cm"}); err != nil || !r.perftest {
		t.Fatalf("--rdma_cm: %+v %v", r, err)
	}
}

// perf -d loop0 says why the loop device cannot serve perf.
func TestPerfLoop0SaysWhy(t *testing.T) {
	_, err := parsePerf([]string{"send_lat", "-d", "loop0"})
	if _, ok := err.(*usageError); !ok || !strings.Contains(err.Error(), "one process") || !strings.Contains(err.Error(), "shm0") {
		t.Fatalf("perf -d loop0: %v", err)
	}
}

// ping's -a is a host; a port in it is refused with the -p to use.
func TestPingAddrWithPort(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1:7174":         "-a 127.0.0.1 -p 7174",
		"[::1]:7000":             "-a ::1 -p 7000",
		"roce://127.0.0.1:17174": "-a roce://127.0.0.1 -p 17174",
	} {
		code, _, errs := runAll(t, "ping", "-c", "-a", addr)
		if code != 2 || !strings.Contains(errs, want) {
			t.Errorf("ping -c -a %s: exit status %d: %s", addr, code, errs)
		}
	}
}

// freePort returns a TCP port of 127.0.0.1 that is free now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}

// A goverbs ping client that a goverbs server cannot serve (a larger -S,
// more pings than its -C) says why, as the server does, over TCP, shared
// memory and RoCE.
func TestPingClientSaysWhy(t *testing.T) {
	for _, c := range []struct {
		srv, cli []string
		want     string
	}{
		{[]string{"-S", "64"}, []string{"-S", "100", "-C", "2"}, "the client's -S 100 is larger than the server's 64"},
		{[]string{"-C", "2"}, []string{"-C", "3"}, "the client asks for 3 pings, the server serves -C 2"},
		{[]string{"-C", "2"}, nil, "the client asks for forever, the server serves -C 2"},
	} {
		for _, tr := range []string{"iwarp", "shm", "roce"} {
			addr := []string{"-a", "127.0.0.1", "-p", freePort(t)}
			switch p := os.Getpid(); tr {
			case "shm":
				addr = []string{"-a", fmt.Sprintf("unix:@goverbs-ping-why-%d-%d", p, time.Now().UnixNano())}
			case "roce": // an address of this process's own (UDP port 4791 is one process's)
				addr = []string{"-a", fmt.Sprintf("roce://127.%d.%d.31", 16+p%200, p/200%250), "-p", "7499"}
			}
			srv := append(append([]string{"ping", "-s", "--timeout", "10"}, addr...), c.srv...)
			cli := append(append([]string{"ping", "-c", "--timeout", "10"}, addr...), c.cli...)
			var code, srvCode int
			// Both ends write to this standard error, taken for the
			// whole exchange.
			errs := withStderr(t, func() {
				done := make(chan int, 1)
				go func() { done <- run(srv) }()
				for range 100 { // until the server has answered
					code = run(cli)
					select {
					case srvCode = <-done:
						return
					case <-time.After(100 * time.Millisecond):
					}
				}
				srvCode = <-done
			})
			if code != 1 || !strings.Contains(errs, "the server at ") || !strings.Contains(errs, c.want) {
				t.Errorf("%s: server %q, client %q: exit status %d: %s", tr, c.srv, c.cli, code, errs)
			}
			if srvCode != 1 || !strings.Contains(errs, "refused the client at ") {
				t.Errorf("%s: the server that refused exited with %d: %s", tr, srvCode, errs)
			}
		}
	}
}

// withStderr runs f with standard error going to a pipe and returns what
// was written.
func withStderr(t *testing.T, f func()) string {
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
	old := os.Stderr
	os.Stderr = pw
	f()
	os.Stderr = old
	pw.Close()
	return <-out
}

// devices shows each RoCE device's IP address, in the list and with -v.
func TestDevicesShowRoCEAddress(t *testing.T) {
	code, out, _ := runAll(t, "devices")
	if code != 0 || !strings.Contains(out, "address") {
		t.Fatalf("exit status %d:\n%s", code, out)
	}
	var n int
	for _, d := range verbs.Devices() {
		a, ok := roce.DeviceAddr(d.Name())
		if !ok {
			continue
		}
		n++
		if !regexp.MustCompile(`(?m)^` + d.Name() + `\s.*\s` + regexp.QuoteMeta(a.String()) + `$`).MatchString(out) {
			t.Errorf("%s's address %v not in:\n%s", d.Name(), a, out)
		}
		if code, v, _ := runAll(t, "devices", "-v", "-d", d.Name()); code != 0 || !strings.Contains(v, "ip_addr:\t\t\t"+a.String()+"\n") || strings.Count(v, "hca_id:") != 1 {
			t.Errorf("devices -v -d %s: exit status %d:\n%s", d.Name(), code, v)
		}
	}
	if n == 0 {
		t.Fatal("no RoCE device (127.0.0.1 has one)")
	}
	if code, _, errs := runAll(t, "devices", "-d", "nope0"); code != 2 || !strings.Contains(errs, "no such device") {
		t.Errorf("devices -d nope0: exit status %d: %s", code, errs)
	}
}
