//go:build !linux

package iwarp

import (
	"net"
	"time"
)

func mss(net.Conn) int { return 1460 }

func setDeadPeer(net.Conn, time.Duration) {}

func quiet(int, bool) {}
