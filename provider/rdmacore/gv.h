// Small C helpers for provider/rdmacore (build tag rdmacore). Each turns one
// Go call into one batch of libibverbs work: a list of work requests posted
// with one ibv_post_send, many completions polled with one ibv_poll_cq, so
// that the cgo crossing is paid per batch and not per work request. They
// also hide libibverbs' static inline functions and unions from cgo.
#ifndef GOVERBS_RDMACORE_GV_H
#define GOVERBS_RDMACORE_GV_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <arpa/inet.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

// The Go side polls straight into []verbs.WC, whose layout is struct ibv_wc's.
_Static_assert(sizeof(struct ibv_wc) == 48, "struct ibv_wc is not 48 bytes");
_Static_assert(sizeof(struct ibv_sge) == 16, "struct ibv_sge is not 16 bytes");

// The largest batch one crossing posts; longer lists take several.
#define GV_BATCH 32

// gv_swr is a send work request in plain fields (no unions, no pointers),
// so that Go fills it without unsafe; sge_off/nsge index the SGE array of
// the same call.
struct gv_swr {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint64_t compare_add;
	uint64_t swap;
	uint64_t ah;        // struct ibv_ah * as a number, UD only
	uint32_t rkey;
	uint32_t imm;       // host order; converted to big-endian here
	uint32_t inv_rkey;
	uint32_t remote_qpn;
	uint32_t remote_qkey;
	uint32_t opcode;
	uint32_t flags;
	uint32_t sge_off;
	uint32_t nsge;
	uint32_t pad;
};

struct gv_rwr {
	uint64_t wr_id;
	uint32_t sge_off;
	uint32_t nsge;
};

// gv_post_send posts n (at most GV_BATCH) requests as one list. It returns
// 0, or the errno of the failure with *bad set to the failing index.
static inline int gv_post_send(uint64_t qpp, struct gv_swr *w, int n, struct ibv_sge *sge, int *bad) {
	struct ibv_qp *qp = (struct ibv_qp *)(uintptr_t)qpp;
	struct ibv_send_wr wr[GV_BATCH], *badwr = NULL;
	int i, ret;
	if (n <= 0 || n > GV_BATCH)
		return EINVAL;
	memset(wr, 0, sizeof(wr[0]) * n);
	for (i = 0; i < n; i++) {
		struct ibv_send_wr *r = &wr[i];
		r->wr_id = w[i].wr_id;
		r->next = i + 1 < n ? &wr[i + 1] : NULL;
		r->sg_list = w[i].nsge ? &sge[w[i].sge_off] : NULL;
		r->num_sge = (int)w[i].nsge;
		r->opcode = (enum ibv_wr_opcode)w[i].opcode;
		r->send_flags = w[i].flags;
		switch (r->opcode) {
		case IBV_WR_SEND_WITH_IMM:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
			r->imm_data = htonl(w[i].imm);
			break;
		case IBV_WR_SEND_WITH_INV:
			r->invalidate_rkey = w[i].inv_rkey;
			break;
		default:
			break;
		}
		switch (r->opcode) {
		case IBV_WR_RDMA_WRITE:
		case IBV_WR_RDMA_WRITE_WITH_IMM:
		case IBV_WR_RDMA_READ:
			r->wr.rdma.remote_addr = w[i].remote_addr;
			r->wr.rdma.rkey = w[i].rkey;
			break;
		case IBV_WR_ATOMIC_CMP_AND_SWP:
		case IBV_WR_ATOMIC_FETCH_AND_ADD:
			r->wr.atomic.remote_addr = w[i].remote_addr;
			r->wr.atomic.rkey = w[i].rkey;
			r->wr.atomic.compare_add = w[i].compare_add;
			r->wr.atomic.swap = w[i].swap;
			break;
		default:
			if (qp->qp_type == IBV_QPT_UD) {
				r->wr.ud.ah = (struct ibv_ah *)(uintptr_t)w[i].ah;
				r->wr.ud.remote_qpn = w[i].remote_qpn;
				r->wr.ud.remote_qkey = w[i].remote_qkey;
			}
		}
	}
	ret = ibv_post_send(qp, wr, &badwr);
	if (ret) {
		*bad = badwr ? (int)(badwr - wr) : 0;
		if (*bad < 0 || *bad >= n)
			*bad = 0;
	}
	return ret;
}

static inline int gv_build_recv(struct ibv_recv_wr *wr, struct gv_rwr *w, int n, struct ibv_sge *sge) {
	int i;
	if (n <= 0 || n > GV_BATCH)
		return EINVAL;
	for (i = 0; i < n; i++) {
		wr[i].wr_id = w[i].wr_id;
		wr[i].next = i + 1 < n ? &wr[i + 1] : NULL;
		wr[i].sg_list = w[i].nsge ? &sge[w[i].sge_off] : NULL;
		wr[i].num_sge = (int)w[i].nsge;
	}
	return 0;
}

static inline int gv_bad_index(struct ibv_recv_wr *wr, struct ibv_recv_wr *badwr, int n) {
	int b = badwr ? (int)(badwr - wr) : 0;
	return b < 0 || b >= n ? 0 : b;
}

static inline int gv_post_recv(uint64_t qpp, struct gv_rwr *w, int n, struct ibv_sge *sge, int *bad) {
	struct ibv_recv_wr wr[GV_BATCH], *badwr = NULL;
	int ret = gv_build_recv(wr, w, n, sge);
	if (ret)
		return ret;
	ret = ibv_post_recv((struct ibv_qp *)(uintptr_t)qpp, wr, &badwr);
	if (ret)
		*bad = gv_bad_index(wr, badwr, n);
	return ret;
}

static inline int gv_post_srq_recv(uint64_t srqp, struct gv_rwr *w, int n, struct ibv_sge *sge, int *bad) {
	struct ibv_recv_wr wr[GV_BATCH], *badwr = NULL;
	int ret = gv_build_recv(wr, w, n, sge);
	if (ret)
		return ret;
	ret = ibv_post_srq_recv((struct ibv_srq *)(uintptr_t)srqp, wr, &badwr);
	if (ret)
		*bad = gv_bad_index(wr, badwr, n);
	return ret;
}

// gv_cap_flags_ex is the device's device_cap_flags_ex (ibv_query_device_ex,
// a static inline function), or dflt where the device has no extended query.
static inline uint64_t gv_cap_flags_ex(struct ibv_context *c, uint64_t dflt) {
	struct ibv_device_attr_ex a;
	memset(&a, 0, sizeof a);
	if (ibv_query_device_ex(c, NULL, &a) != 0)
		return dflt;
	return a.device_cap_flags_ex;
}

// gv_poll polls up to n completions straight into wc (Go's []verbs.WC).
static inline int gv_poll(uint64_t cqp, int n, struct ibv_wc *wc) {
	return ibv_poll_cq((struct ibv_cq *)(uintptr_t)cqp, n, wc);
}

static inline int gv_req_notify(uint64_t cqp, int solicited) {
	return ibv_req_notify_cq((struct ibv_cq *)(uintptr_t)cqp, solicited);
}

// gv_get_cq_event takes one event off a (non-blocking) channel and
// acknowledges it at once: goverbs counts acknowledgements itself, and
// ibv_destroy_cq would otherwise wait for them. It returns the CQ's
// cq_context (goverbs' handle) or 0 with errno set.
static inline uint64_t gv_get_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq;
	void *ctx;
	if (ibv_get_cq_event(ch, &cq, &ctx))
		return 0;
	ibv_ack_cq_events(cq, 1);
	return (uint64_t)(uintptr_t)ctx;
}

// gv_async is an asynchronous event in plain fields: the element's context
// (goverbs' handle) and the port number.
struct gv_async {
	uint32_t type;
	uint32_t port;
	uint64_t handle;
};

// gv_get_async_event takes one asynchronous event and acknowledges it.
static inline int gv_get_async_event(struct ibv_context *c, struct gv_async *out) {
	struct ibv_async_event ev;
	if (ibv_get_async_event(c, &ev))
		return errno ? errno : EIO;
	out->type = ev.event_type;
	out->port = 0;
	out->handle = 0;
	switch (ev.event_type) {
	case IBV_EVENT_CQ_ERR:
		out->handle = (uint64_t)(uintptr_t)ev.element.cq->cq_context;
		break;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		out->handle = (uint64_t)(uintptr_t)ev.element.srq->srq_context;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
	case IBV_EVENT_LID_CHANGE:
	case IBV_EVENT_PKEY_CHANGE:
	case IBV_EVENT_SM_CHANGE:
	case IBV_EVENT_CLIENT_REREGISTER:
	case IBV_EVENT_GID_CHANGE:
		out->port = (uint32_t)ev.element.port_num;
		break;
	case IBV_EVENT_DEVICE_FATAL:
		break;
	case IBV_EVENT_WQ_FATAL:
		break;
	default:
		out->handle = (uint64_t)(uintptr_t)ev.element.qp->qp_context;
	}
	ibv_ack_async_event(&ev);
	return 0;
}

static inline int gv_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
	return ibv_query_port(c, port, a);
}

// gv_reg_mr registers len bytes at addr; addr is memory that stays put for
// the region's lifetime (an AllocBuffer mapping or pinned Go memory).
static inline struct ibv_mr *gv_reg_mr(struct ibv_pd *pd, uint64_t addr, size_t len, int access) {
	return ibv_reg_mr(pd, (void *)(uintptr_t)addr, len, access);
}

static inline uint64_t gv_ptr(void *p) { return (uint64_t)(uintptr_t)p; }
static inline void *gv_voidp(uint64_t x) { return (void *)(uintptr_t)x; }

static inline struct ibv_cq *gv_create_cq(struct ibv_context *c, int cqe, uint64_t handle, struct ibv_comp_channel *ch) {
	return ibv_create_cq(c, cqe, (void *)(uintptr_t)handle, ch, 0);
}

// Offsets of struct ibv_wc, for the layout test.
static inline void gv_wc_layout(size_t *o) {
	o[0] = offsetof(struct ibv_wc, wr_id);
	o[1] = offsetof(struct ibv_wc, status);
	o[2] = offsetof(struct ibv_wc, opcode);
	o[3] = offsetof(struct ibv_wc, vendor_err);
	o[4] = offsetof(struct ibv_wc, byte_len);
	o[5] = offsetof(struct ibv_wc, imm_data);
	o[6] = offsetof(struct ibv_wc, qp_num);
	o[7] = offsetof(struct ibv_wc, src_qp);
	o[8] = offsetof(struct ibv_wc, wc_flags);
	o[9] = offsetof(struct ibv_wc, pkey_index);
	o[10] = offsetof(struct ibv_wc, slid);
	o[11] = offsetof(struct ibv_wc, sl);
	o[12] = offsetof(struct ibv_wc, dlid_path_bits);
	o[13] = sizeof(struct ibv_wc);
}

// ---- rdma_cm helpers ----

// gv_cm_event is a CM event in plain fields, acknowledged already.
struct gv_cm_event {
	uint32_t event;
	int32_t status;
	uint64_t id;
	uint64_t listen_id;
	uint8_t responder_resources;
	uint8_t initiator_depth;
	uint8_t pd_len;
	uint32_t qp_num;
	uint8_t pd[256];
};

static inline int gv_cm_next(struct rdma_event_channel *ch, struct gv_cm_event *out) {
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev))
		return errno ? errno : EIO;
	out->event = ev->event;
	out->status = ev->status;
	out->id = (uint64_t)(uintptr_t)ev->id;
	out->listen_id = (uint64_t)(uintptr_t)ev->listen_id;
	out->responder_resources = 0;
	out->initiator_depth = 0;
	out->qp_num = 0;
	out->pd_len = 0;
	if (ev->event == RDMA_CM_EVENT_CONNECT_REQUEST || ev->event == RDMA_CM_EVENT_CONNECT_RESPONSE ||
	    ev->event == RDMA_CM_EVENT_ESTABLISHED || ev->event == RDMA_CM_EVENT_REJECTED) {
		out->responder_resources = ev->param.conn.responder_resources;
		out->initiator_depth = ev->param.conn.initiator_depth;
		out->qp_num = ev->param.conn.qp_num;
		if (ev->param.conn.private_data && ev->param.conn.private_data_len) {
			out->pd_len = ev->param.conn.private_data_len;
			memcpy(out->pd, ev->param.conn.private_data, out->pd_len);
		}
	}
	rdma_ack_cm_event(ev);
	return 0;
}

static inline void gv_sin(struct sockaddr_in *sin, const uint8_t *ip4, uint16_t port) {
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_port = htons(port);
	memcpy(&sin->sin_addr, ip4, 4);
}

static inline int gv_cm_create_id(struct rdma_event_channel *ch, uint64_t *id) {
	struct rdma_cm_id *cid;
	if (rdma_create_id(ch, &cid, NULL, RDMA_PS_TCP))
		return errno ? errno : EIO;
	*id = (uint64_t)(uintptr_t)cid;
	return 0;
}

#define GV_ID(x) ((struct rdma_cm_id *)(uintptr_t)(x))

static inline int gv_cm_bind_listen(uint64_t id, const uint8_t *ip4, uint16_t port, int backlog, uint16_t *bound) {
	struct sockaddr_in sin;
	gv_sin(&sin, ip4, port);
	if (rdma_bind_addr(GV_ID(id), (struct sockaddr *)&sin))
		return errno ? errno : EIO;
	if (rdma_listen(GV_ID(id), backlog))
		return errno ? errno : EIO;
	*bound = ntohs(rdma_get_src_port(GV_ID(id)));
	return 0;
}

static inline int gv_cm_resolve_addr(uint64_t id, const uint8_t *ip4, uint16_t port, int ms) {
	struct sockaddr_in sin;
	gv_sin(&sin, ip4, port);
	if (rdma_resolve_addr(GV_ID(id), NULL, (struct sockaddr *)&sin, ms))
		return errno ? errno : EIO;
	return 0;
}

static inline int gv_cm_resolve_route(uint64_t id, int ms) {
	return rdma_resolve_route(GV_ID(id), ms) ? (errno ? errno : EIO) : 0;
}

// gv_conn_param is struct rdma_conn_param in plain fields; pd is the
// private data (Go memory, read during the call only).
struct gv_conn_param {
	uint32_t qpn;
	uint8_t rr, idepth, retry, rnr_retry;
	uint8_t pd_len;
};

static inline void gv_cm_param(struct rdma_conn_param *p, const struct gv_conn_param *g, const uint8_t *pd) {
	memset(p, 0, sizeof(*p));
	p->qp_num = g->qpn;
	p->responder_resources = g->rr;
	p->initiator_depth = g->idepth;
	p->retry_count = g->retry;
	p->rnr_retry_count = g->rnr_retry;
	p->private_data = g->pd_len ? pd : NULL;
	p->private_data_len = g->pd_len;
}

static inline int gv_cm_connect(uint64_t id, const struct gv_conn_param *g, const uint8_t *pd) {
	struct rdma_conn_param p;
	gv_cm_param(&p, g, pd);
	return rdma_connect(GV_ID(id), &p) ? (errno ? errno : EIO) : 0;
}

static inline int gv_cm_accept(uint64_t id, const struct gv_conn_param *g, const uint8_t *pd) {
	struct rdma_conn_param p;
	gv_cm_param(&p, g, pd);
	return rdma_accept(GV_ID(id), &p) ? (errno ? errno : EIO) : 0;
}

static inline int gv_cm_reject(uint64_t id, const uint8_t *pd, int len) {
	return rdma_reject(GV_ID(id), len ? pd : NULL, (uint8_t)len) ? (errno ? errno : EIO) : 0;
}

static inline int gv_cm_migrate(uint64_t id, struct rdma_event_channel *ch) {
	return rdma_migrate_id(GV_ID(id), ch) ? (errno ? errno : EIO) : 0;
}

// gv_cm_bind binds id to ip:port without listening (to learn the device).
static inline int gv_cm_bind(uint64_t id, const uint8_t *ip4, uint16_t port) {
	struct sockaddr_in sin;
	gv_sin(&sin, ip4, port);
	return rdma_bind_addr(GV_ID(id), (struct sockaddr *)&sin) ? (errno ? errno : EIO) : 0;
}

// gv_cm_addrs copies id's local and peer IPv4 addresses and ports.
static inline void gv_cm_addrs(uint64_t id, uint8_t *lip, uint16_t *lport, uint8_t *rip, uint16_t *rport) {
	struct sockaddr_in *l = (struct sockaddr_in *)rdma_get_local_addr(GV_ID(id));
	struct sockaddr_in *r = (struct sockaddr_in *)rdma_get_peer_addr(GV_ID(id));
	memset(lip, 0, 4);
	memset(rip, 0, 4);
	*lport = *rport = 0;
	if (l && l->sin_family == AF_INET) {
		memcpy(lip, &l->sin_addr, 4);
		*lport = ntohs(l->sin_port);
	}
	if (r && r->sin_family == AF_INET) {
		memcpy(rip, &r->sin_addr, 4);
		*rport = ntohs(r->sin_port);
	}
}

static inline int gv_cm_establish(uint64_t id) {
	return rdma_establish(GV_ID(id)) ? (errno ? errno : EIO) : 0;
}

static inline int gv_cm_disconnect(uint64_t id) {
	return rdma_disconnect(GV_ID(id)) ? (errno ? errno : EIO) : 0;
}

static inline int gv_cm_destroy_id(uint64_t id) {
	return rdma_destroy_id(GV_ID(id)) ? (errno ? errno : EIO) : 0;
}

// gv_cm_init_qp_attr asks the CM for the attributes that move a QP to
// state (RTR or RTS) for the connection of id, and applies them to qp.
static inline int gv_cm_modify_qp(uint64_t id, struct ibv_qp *qp, int state) {
	struct ibv_qp_attr a;
	int mask = 0;
	memset(&a, 0, sizeof(a));
	a.qp_state = (enum ibv_qp_state)state;
	if (rdma_init_qp_attr(GV_ID(id), &a, &mask))
		return errno ? errno : EIO;
	return ibv_modify_qp(qp, &a, mask);
}

// gv_cm_device_name is the name of the device id is bound to, or "".
static inline const char *gv_cm_device_name(uint64_t id) {
	struct rdma_cm_id *c = GV_ID(id);
	return c->verbs ? ibv_get_device_name(c->verbs->device) : "";
}

// gv_bench_write is the C baseline of the post/poll benchmark: n times,
// one signaled RDMA WRITE posted and its completion polled, all in C.
static inline int gv_bench_write(uint64_t qpp, uint64_t cqp, int n, struct ibv_sge *sge, uint64_t raddr, uint32_t rkey) {
	struct ibv_qp *qp = (struct ibv_qp *)(uintptr_t)qpp;
	struct ibv_cq *cq = (struct ibv_cq *)(uintptr_t)cqp;
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	int i, k;
	memset(&wr, 0, sizeof(wr));
	wr.sg_list = sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	for (i = 0; i < n; i++) {
		wr.wr_id = i;
		if (ibv_post_send(qp, &wr, &bad))
			return -1;
		do {
			k = ibv_poll_cq(cq, 1, &wc);
		} while (k == 0);
		if (k < 0 || wc.status != IBV_WC_SUCCESS)
			return -2;
	}
	return 0;
}

// gv_bench_poll_empty polls an empty CQ n times in C (the baseline of a
// poll that finds nothing); it returns how many completions it found.
static inline int gv_bench_poll_empty(uint64_t cqp, int n) {
	struct ibv_cq *cq = (struct ibv_cq *)(uintptr_t)cqp;
	struct ibv_wc wc[16];
	int i, found = 0;
	for (i = 0; i < n; i++)
		found += ibv_poll_cq(cq, 16, wc);
	return found;
}

// gv_nop does nothing: the benchmark of one cgo crossing calls it.
static inline int gv_nop(int x) { return x; }

#endif
