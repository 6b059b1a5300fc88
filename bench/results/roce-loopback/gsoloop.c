// gsoloop: UDP GSO over loopback as provider/roce sends it, without
// goverbs: a sender process writes batches of 15 datagrams of 4112 bytes
// (a 12-byte BTH, 4096 bytes of payload, a 4-byte trailer) with one
// sendmsg and UDP_SEGMENT, and a receiver reads them with UDP_GRO.
//
//   gcc -O2 -pthread -o gsoloop gsoloop.c
//   ./gsoloop [iov|flat] [SECONDS]
//
// iov gathers each batch as goverbs does (headers and trailers from one
// buffer, the payload in place from a 1 MiB memfd mapping: 31 pieces);
// flat sends one contiguous buffer. The receiver busy-polls with
// MSG_DONTWAIT, as a goverbs application's polls do. EPR=1 adds an idle
// thread blocked in epoll_wait with the receiving socket registered
// (edge-triggered, in and out), EPS=1 the same for the sending socket:
// what Go's netpoller does with a net.UDPConn. It prints MB/s and each
// process's CPU seconds per GB.
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

enum { HDR = 12, PAY = 4096, SEG = HDR + PAY + 4, NSEG = 15, MR = 1 << 20 };

static double now(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec * 1e-9;
}

static double cpu(void) {
	struct rusage u;
	getrusage(RUSAGE_SELF, &u);
	return u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6 + u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6;
}

static void *idle(void *a) {
	struct epoll_event ev[8];
	for (;;)
		epoll_wait((int)(long)a, ev, 8, -1);
	return 0;
}

// waiter registers fd with a new epoll instance that an idle thread waits on.
static void waiter(int fd) {
	int ep = epoll_create1(0);
	struct epoll_event e = {.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET};
	epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
	pthread_t th;
	pthread_create(&th, 0, idle, (void *)(long)ep);
}

int main(int argc, char **argv) {
	int flat = argc > 1 && strcmp(argv[1], "flat") == 0;
	double dur = argc > 2 ? atof(argv[2]) : 2;
	int big = 16 << 20, one = 1;
	struct sockaddr_in ra = {.sin_family = AF_INET, .sin_port = htons(20000 + getpid() % 10000)};
	ra.sin_addr.s_addr = inet_addr("127.0.0.1");
	int r = socket(AF_INET, SOCK_DGRAM, 0);
	setsockopt(r, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
	setsockopt(r, SOL_UDP, UDP_GRO, &one, sizeof one);
	if (bind(r, (void *)&ra, sizeof ra)) {
		perror("bind");
		return 1;
	}
	int pf[2];
	if (pipe(pf))
		return 1;
	if (fork() == 0) { // the receiver
		if (getenv("EPR"))
			waiter(r);
		char *buf = aligned_alloc(4096, 1 << 16), cb[64];
		struct iovec iv = {buf, 1 << 16};
		struct msghdr m = {.msg_iov = &iv, .msg_iovlen = 1};
		long long bytes = 0;
		double t0 = 0, last = now();
		for (;;) {
			m.msg_control = cb;
			m.msg_controllen = sizeof cb;
			ssize_t n = recvmsg(r, &m, MSG_DONTWAIT);
			if (n < 0) {
				if (t0 && now() - last > 0.2)
					break;
				continue;
			}
			last = now();
			if (!t0)
				t0 = last;
			bytes += n;
		}
		double res[3] = {bytes, last - t0, cpu()};
		if (write(pf[1], res, sizeof res) != sizeof res)
			return 1;
		_exit(0);
	}
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	setsockopt(s, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
	struct sockaddr_in sa = {.sin_family = AF_INET};
	sa.sin_addr.s_addr = inet_addr("127.0.0.2");
	bind(s, (void *)&sa, sizeof sa);
	if (getenv("EPS"))
		waiter(s);
	int mf = memfd_create("mr", MFD_CLOEXEC);
	if (ftruncate(mf, MR))
		return 1;
	char *mr = mmap(0, MR, PROT_READ | PROT_WRITE, MAP_SHARED, mf, 0);
	char *hb = aligned_alloc(4096, 1 << 17);
	memset(mr, 1, MR);
	memset(hb, 2, 1 << 17);
	struct iovec iov[2 * NSEG + 1];
	char cm[CMSG_SPACE(sizeof(unsigned short))];
	struct msghdr m = {.msg_name = &ra, .msg_namelen = sizeof ra, .msg_iov = iov,
		.msg_control = cm, .msg_controllen = sizeof cm};
	struct cmsghdr *h = CMSG_FIRSTHDR(&m);
	h->cmsg_level = SOL_UDP;
	h->cmsg_type = UDP_SEGMENT;
	h->cmsg_len = CMSG_LEN(sizeof(unsigned short));
	*(unsigned short *)CMSG_DATA(h) = SEG;
	long long sent = 0;
	int off = 0;
	double t0 = now();
	while (now() - t0 < dur) {
		int n = 0;
		if (flat) {
			iov[n].iov_base = hb;
			iov[n++].iov_len = SEG * NSEG;
		} else {
			int k = 0;
			for (int i = 0; i < NSEG; i++) {
				int hl = i == 0 ? HDR : HDR + 4; // the trailer before, and the headers
				iov[n].iov_base = hb + k;
				iov[n++].iov_len = hl;
				k += hl;
				iov[n].iov_base = mr + off;
				iov[n++].iov_len = PAY;
				off = (off + PAY) % MR;
			}
			iov[n].iov_base = hb + k;
			iov[n++].iov_len = 4;
		}
		m.msg_iovlen = n;
		ssize_t x = sendmsg(s, &m, 0);
		if (x < 0 && errno != EAGAIN && errno != ENOBUFS) {
			perror("sendmsg");
			break;
		}
		if (x > 0)
			sent += x;
	}
	double t = now() - t0, sc = cpu(), res[3];
	if (read(pf[0], res, sizeof res) != sizeof res)
		return 1;
	wait(0);
	printf("%s%s%s: sent %.0f MB/s, received %.0f MB/s; CPU s/GB: sender %.2f, receiver %.2f\n",
		flat ? "flat" : "iov", getenv("EPR") ? " EPR" : "", getenv("EPS") ? " EPS" : "",
		sent / t / 1e6, res[0] / res[1] / 1e6, sc / (sent / 1e9), res[2] / (res[0] / 1e9));
	return 0;
}
