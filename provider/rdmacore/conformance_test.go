//go:build rdmacore && linux && cgo

package rdmacore_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/internal/conformance"
	"github.com/goverbs/goverbs/provider/rdmacore"
	"github.com/goverbs/goverbs/verbs"
)

// testDevices returns the rdma-core devices the device tests run on: the
// ones GOVERBS_RDMACORE_DEV names (comma-separated), or every device
// rdma-core finds. Tests that need a device skip without one; the lab's
// runner (interop/rdmacore.sh) names the devices and fails on a skip.
func testDevices(t testing.TB) []string {
	t.Helper()
	var names []string
	if env := os.Getenv("GOVERBS_RDMACORE_DEV"); env != "" {
		names = strings.Split(env, ",")
	} else {
		names = rdmacore.DeviceNames()
	}
	if len(names) == 0 {
		t.Skip("no rdma-core device (GOVERBS_RDMACORE_DEV unset and ibv_get_device_list empty)")
	}
	return names
}

func openDev(t testing.TB, name string) *verbs.Context {
	t.Helper()
	ctx, err := verbs.OpenDevice(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctx.Close() })
	return ctx
}

// deviceAddr is the IPv4 address of the network interface under dev, which
// the iWARP fixture's CM listens on: GOVERBS_RDMACORE_ADDR_<dev>, or the
// device's netdev's first IPv4 address (rdmacore.DeviceAddr).
func deviceAddr(t testing.TB, dev string) netip.Addr {
	t.Helper()
	if s := os.Getenv("GOVERBS_RDMACORE_ADDR_" + dev); s != "" {
		a, err := netip.ParseAddr(s)
		if err != nil {
			t.Fatalf("GOVERBS_RDMACORE_ADDR_%s: %v", dev, err)
		}
		return a
	}
	a, ok := rdmacore.DeviceAddr(dev)
	if !ok {
		t.Fatalf("%s: no IPv4 address found for its network interface; set GOVERBS_RDMACORE_ADDR_%s", dev, dev)
	}
	return a
}

// fixture runs the provider-independent suite over one rdma-core device:
// both ends of each connection are QPs of that device (the device loops
// the traffic back). InfiniBand-transport devices (rxe, RoCE and IB NICs)
// are connected by Modify with the GID of the device's IPv4 address;
// iWARP devices (siw) by the kernel's rdma_cm, as iWARP requires.
type fixture struct {
	dev   string
	iwarp bool
	addr  netip.Addr // iWARP: where the CM listens
}

func newFixture(t *testing.T, dev string) *fixture {
	ctx := openDev(t, dev)
	f := &fixture{dev: dev, iwarp: ctx.Device().TransportType() == verbs.TransportIWARP}
	if f.iwarp {
		f.addr = deviceAddr(t, dev)
	}
	return f
}

func (f *fixture) Caps() conformance.Caps {
	if f.iwarp {
		// siw: no UD, no RNR (iWARP), no atomics (siw_query_device reports
		// none), immediate data and SEND_WITH_INV it has; remote errors
		// come back as Terminate messages.
		return conformance.Caps{AsyncErrors: true, Deviations: deviations[f.driver()]}
	}
	// Invalidate: SEND_WITH_INV invalidates memory windows and
	// fast-registered regions, not regions of ibv_reg_mr, which is all
	// goverbs registers.
	return conformance.Caps{UD: true, RNR: true, Atomics: true, Immediate: true, Modify: true, Deviations: deviations[f.driver()]}
}

func (f *fixture) Open(t testing.TB) (a, b *verbs.Context) {
	return openDev(t, f.dev), openDev(t, f.dev)
}

func (f *fixture) Connect(t testing.TB, a, b *verbs.QP, attr verbs.QPAttr) error {
	if f.iwarp {
		for _, q := range []*verbs.QP{a, b} {
			if err := conformance.ToInit(q, attr.QPAccessFlags); err != nil {
				return err
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), conformance.WaitTimeout)
		defer cancel()
		c, err := rdmacore.ConnectPair(ctx, a, b, f.addr, attr)
		if err != nil {
			return err
		}
		t.Cleanup(func() { c.Close() })
		return nil
	}
	for _, p := range [][2]*verbs.QP{{a, b}, {b, a}} {
		if err := f.toRTR(t, p[0], p[1], attr); err != nil {
			return err
		}
	}
	for _, q := range []*verbs.QP{a, b} {
		rts := attr
		rts.QPState = verbs.QPSRTS
		rts.SQPSN = 0
		mask := verbs.QPAttrState | verbs.QPAttrSQPSN | verbs.QPAttrTimeout | verbs.QPAttrRetryCnt |
			verbs.QPAttrRNRRetry | verbs.QPAttrMaxQPRdAtomic
		if err := q.Modify(&rts, mask); err != nil {
			return fmt.Errorf("QP %#x to RTS: %w", q.Num(), err)
		}
	}
	return nil
}

func (f *fixture) toRTR(t testing.TB, q, dest *verbs.QP, attr verbs.QPAttr) error {
	init := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1, QPAccessFlags: attr.QPAccessFlags}
	if err := q.Modify(&init, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		return fmt.Errorf("QP %#x to INIT: %w", q.Num(), err)
	}
	rtr := attr
	rtr.QPState = verbs.QPSRTR
	rtr.DestQPNum = dest.Num()
	rtr.RQPSN = 0
	rtr.AHAttr = f.AHTo(t, dest.PD().Context())
	// Paths are as long as the port's MTU at most.
	if pa, err := q.PD().Context().QueryPort(1); err == nil && rtr.PathMTU > pa.ActiveMTU {
		rtr.PathMTU = pa.ActiveMTU
	}
	mask := verbs.QPAttrState | verbs.QPAttrAV | verbs.QPAttrPathMTU | verbs.QPAttrDestQPN | verbs.QPAttrRQPSN |
		verbs.QPAttrMaxDestRdAtomic | verbs.QPAttrMinRNRTimer
	if err := q.Modify(&rtr, mask); err != nil {
		return fmt.Errorf("QP %#x to RTR: %w", q.Num(), err)
	}
	return nil
}

func (f *fixture) ActivateUD(t testing.TB, q *verbs.QP, qkey uint32) error {
	return conformance.ActivateUD(q, qkey)
}

// AHTo addresses ctx's port 1 by its GID 0 (on rxe and RoCE NICs the
// link-local IPv6 address: RoCEv2 over IPv6).
func (f *fixture) AHTo(t testing.TB, ctx *verbs.Context) verbs.AHAttr {
	t.Helper()
	gid, err := ctx.QueryGID(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	return verbs.AHAttr{PortNum: 1, IsGlobal: true, GRH: verbs.GlobalRoute{DGID: gid, HopLimit: 64}}
}

func TestConformance(t *testing.T) {
	for _, dev := range testDevices(t) {
		t.Run(dev, func(t *testing.T) { conformance.Run(t, newFixture(t, dev)) })
	}
}

// driver is the kernel driver behind the fixture's device, from its name.
func (f *fixture) driver() string {
	for _, d := range []string{"rxe", "siw"} {
		if strings.HasPrefix(f.dev, d) {
			return d
		}
	}
	return ""
}

// deviations are the suite's cases whose rule a kernel driver departs
// from, with what it does instead (see conformance.Caps.Deviations).
// Each entry was observed on the lab's rxe0 / siw0 (Debian 12, kernel 6.1).
var deviations = map[string]map[string]string{
	"rxe": {
		"CountersCountEveryRequest": noCounters,
		"PollPartial": "rxe flushes the receive queue in its completer task after ibv_modify_qp(ERR) returns: " +
			"the flushed completions are not all in the CQ when Modify returns",
		"WrongLKeyGivesLocProtErr":                      rxeLocQPOp,
		"LKeyOfOtherPDGivesLocProtErr":                  rxeLocQPOp,
		"RecvSGEWrongKeyGivesLocProtErrAndRemOpErr":     rxeLocQPOp,
		"DeregisteredMRKeyStopsWorking":                 rxeLocQPOp + "; " + rxeNoEvent,
		"RecvBufferTooSmallGivesLocLenErr":              "the requester's SEND completes with REM_OP_ERR, not REM_INV_REQ_ERR",
		"RemoteWriteWrongRKeyGivesRemAccessErr":         rxeNoEvent,
		"RemoteWriteWithoutPermissionGivesRemAccessErr": rxeNoEvent,
		"RemoteWriteOutsideRegionGivesRemAccessErr":     rxeNoEvent,
		"RemoteReadWithoutPermissionGivesRemAccessErr":  rxeNoEvent,
		"AtomicWithoutPermissionGivesRemAccessErr":      rxeNoEvent,
		"ReadWithZeroIRDGivesRemInvReqErr":              rxeNoEvent,
		"QPAccessFlagsDenyRemoteWrite": "a WRITE to a QP without remote write access completes with REM_INV_REQ_ERR, " +
			"not REM_ACCESS_ERR",
		"AtomicMisalignedGivesRemInvReqErr": "rdma-core's rxe provider refuses a misaligned atomic at post time (EINVAL) " +
			"instead of sending it",
		"PeerNotConnectedGivesRetryExcErr": "with the peer reset, in ERR or destroyed, the send did not complete " +
			"(no RETRY_EXC_ERR) within 10 s",
		"ErrStatePostCompletesWithFlush": "a send posted to a QP in ERR is accepted but does not complete with WR_FLUSH_ERR",
		"UDReceiveTooSmallForGRH":        "a UD receive too small for GRH+message completes with LOC_QP_OP_ERR, not LOC_LEN_ERR",
		"UDSendLargerThanMTU":            "a UD send larger than the port MTU (1025 > 1024) is sent and completes with success",
		"ModifyValueChecks":              "RESET->INIT with a P_Key index outside the P_Key table succeeds",
		"AnyStateToErrAndReset": "RESET->ERR fails with EINVAL: the kernel's transition table (ib_modify_qp_is_ok) " +
			"has no RESET->ERR",
		"SQDDrainsAndRaisesEvent": "IBV_EVENT_SQ_DRAINED is raised without en_sqd_async_notify, and an idle QP " +
			"moved to SQD does not complete a send posted after it",
	},
	"siw": {
		"CountersCountEveryRequest": noCounters,
		"ReqNotifySolicitedOnly": "a CQ armed for solicited completions raises no event for a receive of a " +
			"message sent with the solicited flag",
		"WrongLKeyGivesLocProtErr":        siwLocErr,
		"SGEOutsideRegionGivesLocProtErr": siwLocErr,
		"LKeyOfOtherPDGivesLocProtErr":    siwLocErr,
		"DeregisteredMRKeyStopsWorking": siwLocErr + "; " + siwResponder + "; a READ from a deregistered region " +
			"did not complete within 10 s",
		"RecvSGEWrongKeyGivesLocProtErrAndRemOpErr":     siwResponder,
		"RecvBufferTooSmallGivesLocLenErr":              siwResponder,
		"RemoteWriteWrongRKeyGivesRemAccessErr":         siwResponder,
		"RemoteWriteWithoutPermissionGivesRemAccessErr": siwResponder,
		"RemoteWriteOutsideRegionGivesRemAccessErr":     siwResponder,
		"RemoteReadWithoutPermissionGivesRemAccessErr":  siwResponder,
		"QPAccessFlagsDenyRemoteWrite":                  siwResponder + "; " + siwQuery,
		"QueryReportsAttributes":                        siwQuery,
		"ReadSinkWithoutLocalWriteGivesLocProtErr": "an RDMA READ into a region without local write access " +
			"completes with LOC_PROT_ERR but the requests after it are not flushed within 10 s",
		"ErrStatePostCompletesWithFlush": "a send posted to a QP in ERR is accepted but does not complete with WR_FLUSH_ERR",
		"DestroyedQPRejectsPosts": "ibv_destroy_qp flushes the QP's receives into its CQ (WR_FLUSH_ERR " +
			"completions after Destroy) instead of discarding them",
		"DeviceAttributesAndPort": "max_pkeys is 0 (iWARP has no P_Keys)",
	},
}

const (
	siwLocErr = "a request whose SGE has an invalid lkey or lies outside its region completes with " +
		"LOC_QP_OP_ERR, and the requests after it are not flushed within 10 s"
	siwResponder = "the responder QP of a failed request is not moved to ERR: it raises no asynchronous event " +
		"and flushes nothing (the requester's status is right)"
	siwQuery = "ibv_query_qp reports fixed access flags (LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ) and rnr_retry 0, " +
		"not those set with ibv_modify_qp"
)

const (
	noCounters = "provider rdmacore keeps no verbs.Counters: an unsignaled request completes without a " +
		"work completion the library could count, and the kernel's counters (rdma statistic) are per port"
	rxeLocQPOp = "a request whose SGE has an invalid lkey completes with LOC_QP_OP_ERR, not LOC_PROT_ERR"
	rxeNoEvent = "the responder QP raises no asynchronous event (IBV_EVENT_QP_ACCESS_ERR / QP_REQ_ERR) when it " +
		"NAKs the request"
)
