package verbs

import (
	"runtime"
	"sync/atomic"
	"time"
)

// An AdaptiveSpin decides how long a blocking wait polls before it
// sleeps, from how earlier waits went: it is the spin of a CQ's blocking
// waits (CQ.SetWaitSpin, which states the rules), for code whose waits
// are not for a CQ's completions, such as a socket's Read over RDMA
// (package rsocket). A wait asks For how long to spin, and reports with
// Took how it went. Its zero value never spins; its methods may be called
// from several goroutines at once (concurrent waits may lose an update,
// which only makes the spin adapt a wait later).
type AdaptiveSpin struct {
	max    atomic.Int64  // SetMax's, in nanoseconds: the cap
	adapt  atomic.Int64  // how long the next wait spins (For), in nanoseconds
	probes atomic.Uint32 // waits while the adaptive spin is off
	every  atomic.Uint32 // one wait in every (spinProbe to spinProbeMax) probes meanwhile
	probed atomic.Bool   // For gave a probe that no Took has judged yet
	shared atomic.Int32  // waits left during which a spin that lost its CPU is recent
	revive atomic.Int64  // the sleeping wait's time that last brought the spin back, or 0
	missed atomic.Int32  // spins in a row since, that long, that still slept
}

// SetMax sets the most a wait spins, and starts the spin there; d <= 0
// turns it off (For returns 0).
func (s *AdaptiveSpin) SetMax(d time.Duration) {
	s.max.Store(int64(max(d, 0)))
	s.adapt.Store(int64(max(d, 0)))
	s.every.Store(spinProbe)
}

// Max returns SetMax's value.
func (s *AdaptiveSpin) Max() time.Duration { return time.Duration(s.max.Load()) }

// For returns how long the next wait spins: Max at most, less while
// recent waits were not answered within it (CQ.SpinFor).
func (s *AdaptiveSpin) For() time.Duration {
	capd := s.max.Load()
	a := s.adapt.Load()
	if a == 0 && capd > 0 {
		every := max(s.every.Load(), spinProbe)
		if s.probes.Add(1)%every == 0 {
			// Off, the spin cannot see replies come back within it (a
			// wait that sleeps costs the wake-up's tens of microseconds
			// on top of the reply's): now and then a wait spins in full
			// to find out.
			s.probed.Store(true)
			return time.Duration(capd)
		}
	}
	return time.Duration(min(a, capd))
}

// Took tells the spin how a wait went: d is how long it took, from its
// start until what it waited for was there, and r how (CQ.WaitTook).
func (s *AdaptiveSpin) Took(d time.Duration, r SpinResult) {
	capd := s.max.Load()
	if capd == 0 {
		return
	}
	// Loads before stores: a store is an atomic exchange on amd64, and
	// an answered wait at the cap (a busy-enough ping-pong) changes
	// nothing.
	probe := s.probed.Load() && s.probed.Swap(false)
	one := r != SpinAnswered && runtime.GOMAXPROCS(0) == 1
	if r == SpinLost && !one {
		r = SpinAnswered // see CQ.WaitTook: with more CPUs, spin on
	}
	shared := s.shared.Load()
	if shared > 0 {
		s.shared.Store(shared - 1)
	}
	a := s.adapt.Load()
	switch r {
	case SpinAnswered:
		if s.every.Load() != spinProbe {
			s.every.Store(spinProbe)
		}
		if s.revive.Load() != 0 {
			s.revive.Store(0)
			s.missed.Store(0)
		}
		s.grow(a, int64(d), capd)
		return
	case SpinLost:
		s.shared.Store(spinShared)
		s.revive.Store(0)
	case SpinSlept:
		if rd := s.revive.Load(); rd != 0 && a >= min(capd, 2*rd) && one {
			// A spin long enough for the wait that brought it back
			// slept all the same.
			if s.missed.Add(1) >= spinMisses {
				s.missed.Store(0)
				s.revive.Store(0)
				s.shared.Store(spinShared)
				s.adapt.Store(0) // spinning cannot work here: off at once
				return
			}
		}
		if shared == 0 && int64(d) <= capd {
			s.revive.Store(int64(d))
			s.grow(a, int64(d), capd)
			return
		}
	}
	if probe {
		s.every.Store(min(2*max(s.every.Load(), spinProbe), spinProbeMax))
	}
	if a /= 2; a < int64(spinFloor) {
		a = 0
	}
	s.adapt.Store(a)
}

// grow doubles the spin a, to twice the wait d at least, capd at most.
func (s *AdaptiveSpin) grow(a, d, capd int64) {
	if n := min(capd, max(2*a, 2*d+int64(spinFloor))); n != a {
		s.adapt.Store(n)
	}
}

// A SpinWatch sees whether a spin lost its CPU while it ran, for a wait's
// outcome (SpinResult): in a process confined to one CPU (GOMAXPROCS 1)
// the completion a spin finds after its thread was preempted for a while
// most likely came because it was (a peer on the same CPU had its turn:
// woken by this process's own write, say, made by a goroutine that ran
// while the spin yielded), which SpinResultOf's average cannot tell once
// the spin had polled for a while. The spin calls Start as it begins and
// Result when it found the completion. In such a process Start reads the
// thread's CPU time and count of involuntary context switches
// (getrusage), and Result reads them again if the spin lasted
// spinLostGap or more: preempted, and off its CPU for spinLostGap or
// more of the time, the spin lost it. A process with more CPUs reads
// nothing. Its zero value is ready; one per wait.
type SpinWatch struct {
	on    bool
	usage threadUsage
}

// spinLostGap is how long a spin's thread must have been off its CPU for
// the spin to have lost it to the peer: a shorter preemption is the
// runtime's own threads on the same CPU.
const spinLostGap = 5 * time.Microsecond

// Start is called as the spin begins.
func (w *SpinWatch) Start() {
	w.on = runtime.GOMAXPROCS(0) == 1 && w.usage.read()
}

// Result says how a spin that found its completion with its polls-th
// poll, spun after it began, went: SpinResultOf's answer, or SpinLost
// when its thread was preempted since Start and off its CPU for
// spinLostGap or more.
func (w *SpinWatch) Result(polls int, spun time.Duration) SpinResult {
	r := SpinResultOf(polls, spun)
	if r != SpinAnswered || !w.on || spun < spinLostGap {
		return r
	}
	var now threadUsage
	if !now.read() {
		return r
	}
	cpu := now.cpu - w.usage.cpu
	// A goroutine that moved to another thread between the readings
	// (rare: GOMAXPROCS is 1) compares two threads: no judgement then.
	if now.preempted > w.usage.preempted && cpu >= 0 && spun-cpu >= spinLostGap {
		r = SpinLost
	}
	return r
}
