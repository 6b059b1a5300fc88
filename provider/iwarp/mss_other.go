//go:build !linux

package iwarp

import "net"

func mss(net.Conn) int { return 1460 }
