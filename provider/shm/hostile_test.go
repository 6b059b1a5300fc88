package shm_test

import (
	"bufio"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/provider/shm"
	"github.com/goverbs/goverbs/verbs"
)

// hostilePair connects a victim side and an attacker side, whose
// connection (through the hooks of export_test.go) does what no correct
// peer does. The buffers are AllocBuffers (memfd), so regions can be mapped.
func hostilePair(t *testing.T) (victim, attacker *conformance.Side, cv, ca *shm.Conn) {
	t.Helper()
	o := conformance.PairOpts{BufSize: 64 << 10, Alloc: directFixture{}.Buffer,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
	victim = conformance.NewSide(t, open(t), verbs.QPTRC, o)
	attacker = conformance.NewSide(t, open(t), verbs.QPTRC, o)
	for _, q := range []*verbs.QP{victim.QP, attacker.QP} {
		if err := conformance.ToInit(q, conformance.DefaultRC.QPAccessFlags); err != nil {
			t.Fatal(err)
		}
	}
	p := shm.Params{IRD: 4, ORD: 4, RNRRetry: 7}
	cv, ca = connect(t, victim.QP, attacker.QP, p, p)
	return victim, attacker, cv, ca
}

// countMaps returns the number of mappings of this process.
func countMaps(t *testing.T) int {
	t.Helper()
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	n := 0
	for s := bufio.NewScanner(f); s.Scan(); {
		n++
	}
	return n
}

// waitEnd waits for c to end and returns why.
func waitEnd(t *testing.T, c *shm.Conn, what string) error {
	t.Helper()
	select {
	case <-c.Done():
		return c.Err()
	case <-time.After(20 * time.Second):
		t.Fatalf("%s: the connection did not end", what)
		return nil
	}
}

// TestHostileMappingOffers (issue hole 1): a peer that sends mapping
// offers without end (for one key still exported, for one key it keeps
// re-exporting, for ever new keys) has its connection ended; the victim
// stays alive and holds a bounded number of mappings.
func TestHostileMappingOffers(t *testing.T) {
	for _, how := range []string{"same key", "re-exported key", "new keys"} {
		t.Run(how, func(t *testing.T) {
			leakcheck.Check(t)
			base := countMaps(t)
			_, _, cv, ca := hostilePair(t)
			fd, err := shm.NewMemfd(4096)
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			ca.SetSlot0(1<<shm.GenShift | shm.SlotValid) // the offers' slot: exported, generation 1
			most := 0
			for i := range 100000 {
				key := uint32(0x1000)
				switch how {
				case "re-exported key":
					ca.SetSlot0(uint64(i+1)<<shm.GenShift | shm.SlotValid)
				case "new keys":
					key += uint32(i)
				}
				gen := uint64(1)
				if how == "re-exported key" {
					gen = uint64(i + 1)
				}
				if err := ca.SendMapping(true, key, fd, 4096, gen); err != nil {
					break // the victim ended the connection
				}
				if i%512 == 0 {
					most = max(most, countMaps(t)-base)
				}
			}
			err = waitEnd(t, cv, "victim")
			if err == nil || !strings.Contains(err.Error(), "mappings beyond the bounds") {
				t.Fatalf("victim's connection ended with %v, want the mapping bounds", err)
			}
			<-ca.Done()
			if most > 4096+64 {
				t.Errorf("the victim held up to %d more mappings during the attack", most)
			}
			// The connection's mappings are gone with it (the segments'
			// placeholders go when the connection is garbage).
			if n := countMaps(t) - base; n > 64 {
				t.Errorf("%d more mappings after the connection ended", n)
			}
		})
	}
}

// waitAnswer waits until the attacker's mapping request for key is answered.
func waitAnswer(t *testing.T, ca *shm.Conn, key uint32) (mapped bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if answered, mapped := ca.Mapped(key); answered {
			return mapped
		}
	}
	t.Fatalf("no answer for key %#x", key)
	return false
}

// TestExportsOnlyRemoteRegions (hole 2): a peer maps only regions that
// grant remote read and write; local-only, read-only and write-only
// regions are answered with "go through me"; a peer that asks for keys
// that do not exist is disconnected.
func TestExportsOnlyRemoteRegions(t *testing.T) {
	leakcheck.Check(t)
	victim, _, cv, ca := hostilePair(t)
	regions := map[string]verbs.AccessFlags{
		"local":      verbs.AccessLocalWrite,
		"read":       verbs.AccessLocalWrite | verbs.AccessRemoteRead,
		"write":      verbs.AccessLocalWrite | verbs.AccessRemoteWrite,
		"read-write": verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteWrite,
	}
	for name, acc := range regions {
		off := 4096 * (1 + len(name)%8)
		mr, err := victim.PD.RegMR(victim.Buf[off:off+4096], acc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { mr.Dereg() })
		ca.AskMapping(mr.RKey())
		if mapped, want := waitAnswer(t, ca, mr.RKey()), name == "read-write"; mapped != want {
			t.Errorf("%s region: mapped %v, want %v", name, mapped, want)
		}
	}
	// Guessing keys: the victim ends the connection after a few.
	for range 64 {
		if ca.Failed() != nil || cv.Failed() != nil {
			break
		}
		k := rand.Uint32()
		ca.AskMapping(k)
		time.Sleep(time.Millisecond)
	}
	if err := waitEnd(t, cv, "victim"); err == nil || !strings.Contains(err.Error(), "keys that do not exist") {
		t.Fatalf("victim's connection ended with %v, want the key guessing error", err)
	}
}

// TestDeregWithSilentPeers (hole 4): deregistering a region that ten
// peers have mapped, each stopped in the middle of an access, waits for
// them once, not once each; their connections end.
func TestDeregWithSilentPeers(t *testing.T) {
	leakcheck.Check(t)
	const peers = 10
	o := conformance.PairOpts{BufSize: 64 << 10, Alloc: directFixture{}.Buffer}
	ctx := open(t)
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pd.Dealloc() })
	buf := directFixture{}.Buffer(t, 64<<10)
	mr, err := pd.RegMR(buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	var conns []*shm.Conn
	for range peers {
		cq, err := ctx.CreateCQ(16, nil)
		if err != nil {
			t.Fatal(err)
		}
		qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, QPType: verbs.QPTRC,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		peer := conformance.NewSide(t, open(t), verbs.QPTRC, o)
		for _, q := range []*verbs.QP{qp, peer.QP} {
			if err := conformance.ToInit(q, conformance.DefaultRC.QPAccessFlags); err != nil {
				t.Fatal(err)
			}
		}
		p := shm.Params{IRD: 4, ORD: 4, RNRRetry: 7}
		_, cv := connect(t, peer.QP, qp, p, p)
		t.Cleanup(func() { <-cv.Done(); qp.Destroy(); cq.Destroy() })
		peer.MustPostSend(t, verbs.SendWR{WRID: 1, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGList: []verbs.SGE{peer.MR.SGE(0, 64)}, RemoteAddr: mr.RemoteAddr(0), RKey: mr.RKey()})
		conformance.ExpectWC(t, conformance.Poll1(t, peer.SendCQ), 1, verbs.WCSuccess, verbs.WCRDMAWrite)
		if n := cv.HoldExports(); n != 1 {
			t.Fatalf("the peer mapped %d regions, want 1", n)
		}
		conns = append(conns, cv)
	}
	t0 := time.Now()
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	el := time.Since(t0)
	t.Logf("Dereg with %d silent peers: %v", peers, el)
	if el > 2500*time.Millisecond { // one wait of a second for all, not ten
		t.Errorf("Dereg took %v", el)
	}
	for _, c := range conns {
		if err := waitEnd(t, c, "silent peer"); err == nil || !strings.Contains(err.Error(), "did not release") {
			t.Errorf("silent peer's connection ended with %v", err)
		}
	}
}

// TestRefNeverOffered (hole 5): a SEND by reference to a region the peer
// never offered ends the connection (it held it for ever), and the
// receive posted for it flushes.
func TestRefNeverOffered(t *testing.T) {
	leakcheck.Check(t)
	victim, _, cv, ca := hostilePair(t)
	victim.MustPostRecv(t, victim.Recv(7, 0, 4096))
	ca.InjectRef(0x4242, 4096)
	wc := conformance.Poll1(t, victim.RecvCQ)
	conformance.ExpectWC(t, wc, 7, verbs.WCWRFlushErr, 0)
	if err := waitEnd(t, cv, "victim"); err == nil || !strings.Contains(err.Error(), "never offered") {
		t.Fatalf("victim's connection ended with %v", err)
	}
}

// TestUndefinedNakStatus (hole 6): a peer that refuses a request with a
// status word no responder gives has the request complete with REM_OP_ERR,
// not with its word, and its connection ended.
func TestUndefinedNakStatus(t *testing.T) {
	leakcheck.Check(t)
	victim, _, cv, ca := hostilePair(t)
	conformance.Fill(victim.Buf[:64], 5)
	victim.MustPostSend(t, victim.Send(3, 0, 64)) // the attacker posts no receive: it waits
	time.Sleep(20 * time.Millisecond)
	ca.RefuseNext(0xDEADBEEF)
	wc := conformance.Poll1(t, victim.SendCQ)
	conformance.ExpectWC(t, wc, 3, verbs.WCRemOpErr, 0)
	if err := waitEnd(t, cv, "victim"); err == nil || !strings.Contains(err.Error(), "undefined status") {
		t.Fatalf("victim's connection ended with %v", err)
	}
	conformance.WaitState(t, victim.QP, verbs.QPSErr)
}
