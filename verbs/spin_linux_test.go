package verbs_test

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/samecpu"
	"github.com/goverbs/goverbs/verbs"
)

// spinHogEnv makes the test binary a process that keeps the CPU it names
// busy until killed (TestSpinWatchSeesLostCPU's competitor).
const spinHogEnv = "GOVERBS_SPIN_HOG"

func TestMain(m *testing.M) {
	if c := os.Getenv(spinHogEnv); c != "" {
		cpu, _ := strconv.Atoi(c)
		var one unix.CPUSet
		one.Set(cpu)
		runtime.LockOSThread()
		unix.SchedSetaffinity(0, &one)
		deadline := time.Now().Add(time.Minute)
		for time.Now().Before(deadline) {
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// watchedSpin spins for d, watched, as a wait's spin does, and returns its outcome as if its last poll found the
// completion.
func watchedSpin(d time.Duration) verbs.SpinResult {
	var w verbs.SpinWatch
	w.Start()
	start := time.Now()
	polls := 0
	for {
		polls++
		if polls%16 == 0 {
			spun := time.Since(start)
			if spun >= d {
				return w.Result(polls, spun)
			}
		}
	}
}

// A spin whose thread shares its CPU with a busy process, in a process
// confined to one CPU (GOMAXPROCS 1), loses the CPU for whole time slices:
// SpinWatch says SpinLost, although the spin's polls were many and quick
// on average (SpinResultOf alone says SpinAnswered). With more than one
// CPU it reads nothing and says what SpinResultOf says.
func TestSpinWatchSeesLostCPU(t *testing.T) {
	cpu := samecpu.Pin(t)
	hog := exec.Command(os.Args[0], "-test.run=^$")
	hog.Env = append(os.Environ(), spinHogEnv+"="+strconv.Itoa(cpu))
	if err := hog.Start(); err != nil {
		t.Fatal(err)
	}
	defer hog.Wait()
	defer hog.Process.Kill()
	time.Sleep(50 * time.Millisecond) // the hog runs

	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const d = 200 * time.Millisecond // dozens of the scheduler's slices
	if r := watchedSpin(d); r != verbs.SpinLost {
		t.Errorf("spin of %v beside a busy process on its CPU, GOMAXPROCS 1: %v, want SpinLost", d, r)
	}
	runtime.GOMAXPROCS(2)
	if r := watchedSpin(d); r != verbs.SpinAnswered {
		t.Errorf("spin of %v beside a busy process on its CPU, GOMAXPROCS 2: %v, want SpinAnswered (not watched)", d, r)
	}
}
