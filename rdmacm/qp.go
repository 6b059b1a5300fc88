package rdmacm

import (
	"fmt"

	"github.com/goverbs/goverbs/internal/defaults"
	"github.com/goverbs/goverbs/verbs"
)

// CreateQP creates the identifier's QP on its device (rdma_create_qp). With
// pd nil the device's default PD is used. When attr's CQs are nil, the
// identifier creates a send CQ and a receive CQ, each with its own
// completion channel (for GetSendComp / GetRecvComp), sized from the QP's
// capabilities. A zero QPType is the port space's (RC, or UD in
// PortSpaceUDP), and zero capabilities are verbs.QPCap's defaults, but
// MaxInlineData, which is 64 here (negative: none). The QP is left in
// INIT, ready to be connected.
func (id *ID) CreateQP(pd *verbs.PD, attr verbs.QPInitAttr) error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state == stateClosed {
		return ErrClosed
	}
	if id.qp != nil {
		return fmt.Errorf("%w: the identifier already has a QP", errInvalid)
	}
	if pd == nil {
		pd = id.pd
	}
	if pd.Context() != id.vctx {
		return fmt.Errorf("%w: PD of another device", errInvalid)
	}
	if attr.QPType == 0 {
		attr.QPType = verbs.QPTRC
		if id.ps == PortSpaceUDP {
			attr.QPType = verbs.QPTUD
		}
	}
	if (id.ps == PortSpaceUDP) != (attr.QPType == verbs.QPTUD) {
		return fmt.Errorf("%w: the UDP port space has UD QPs, the TCP one RC QPs", errInvalid)
	}
	attr.Cap.MaxInlineData = defaults.Int(attr.Cap.MaxInlineData, defaults.RDMAInline)
	if attr.Cap.MaxInlineData == 0 {
		attr.Cap.MaxInlineData = -1 // none: 0 would be verbs' default again
	}
	if attr.SendCQ == nil && attr.RecvCQ == nil {
		if err := id.createCQs(attr.Cap); err != nil {
			return err
		}
		attr.SendCQ, attr.RecvCQ = id.sendCQ, id.recvCQ
	} else if attr.SendCQ == nil || attr.RecvCQ == nil {
		return fmt.Errorf("%w: give both CQs or neither", errInvalid)
	} else {
		id.sendCQ, id.recvCQ = attr.SendCQ, attr.RecvCQ
		id.sendCh, id.recvCh = attr.SendCQ.Channel(), attr.RecvCQ.Channel()
	}
	qp, err := pd.CreateQP(attr)
	if err != nil {
		id.destroyCQs()
		return err
	}
	if id.ps == PortSpaceUDP {
		if err := readyUD(qp); err != nil {
			qp.Destroy()
			id.destroyCQs()
			return err
		}
		id.pd, id.qp = pd, qp
		return nil
	}
	init := verbs.QPAttr{QPState: verbs.QPSInit, PortNum: 1,
		QPAccessFlags: verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic}
	if err := qp.Modify(&init, verbs.QPAttrState|verbs.QPAttrPKeyIndex|verbs.QPAttrPort|verbs.QPAttrAccessFlags); err != nil {
		qp.Destroy()
		id.destroyCQs()
		return err
	}
	id.pd, id.qp = pd, qp
	return nil
}

func (id *ID) createCQs(c verbs.QPCap) error {
	var err error
	if id.sendCh, err = id.vctx.CreateCompChannel(); err != nil {
		return err
	}
	if id.recvCh, err = id.vctx.CreateCompChannel(); err != nil {
		id.sendCh.Close()
		return err
	}
	// The CQs hold a completion of every WR the QP holds: the QP's
	// capabilities after verbs' defaults.
	sendWR, recvWR := defaults.Int(c.MaxSendWR, defaults.QPWR), defaults.Int(c.MaxRecvWR, defaults.QPWR)
	if id.sendCQ, err = id.vctx.CreateCQ(max(sendWR, 1), id.sendCh); err != nil {
		id.sendCh.Close()
		id.recvCh.Close()
		return err
	}
	if id.recvCQ, err = id.vctx.CreateCQ(max(recvWR, 1), id.recvCh); err != nil {
		id.sendCQ.Destroy()
		id.sendCh.Close()
		id.recvCh.Close()
		return err
	}
	id.ownCQs = true
	return nil
}

func (id *ID) destroyCQs() {
	if !id.ownCQs {
		return
	}
	id.sendCQ.Destroy()
	id.recvCQ.Destroy()
	id.sendCh.Close()
	id.recvCh.Close()
	id.sendCQ, id.recvCQ, id.sendCh, id.recvCh, id.ownCQs = nil, nil, nil, nil, false
}

// DestroyQP destroys the identifier's QP (rdma_destroy_qp) and the CQs it created.
func (id *ID) DestroyQP() error {
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.state == stateClosed {
		return ErrClosed
	}
	return id.destroyQP()
}

// destroyQP is DestroyQP with id.mu held.
func (id *ID) destroyQP() error {
	if id.qp == nil {
		return nil
	}
	err := id.qp.Destroy()
	id.qp = nil
	id.destroyCQs()
	return err
}

// Connect connects the identifier's QP to the listener at its address
