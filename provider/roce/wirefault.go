package roce

// What happens to a datagram a device sends, under SetWireFaults.
const (
	FaultPass = faultPass // sent
	FaultDrop = faultDrop // lost on the wire
	FaultDup  = faultDup  // delivered twice
	FaultHold = faultHold // delivered after the next datagram to the same address (reordered)
)

// FaultKind is what happens to a datagram.
type FaultKind = faultKind

// SetWireFaults makes every RoCE device of the process decide the fate of
// each datagram it sends with f (nil: none), for tests of what the
// transport's rules do with loss, duplication and reordering; it returns
// a function that restores the previous choice. While f is set, batches
// go out one datagram at a time. Package faults drives it from a seeded
// plan.
func SetWireFaults(f func(pkt []byte) FaultKind) (restore func()) {
	var p *wireFault
	if f != nil {
		w := wireFault(f)
		p = &w
	}
	old := faults.Swap(p)
	return func() { faults.Store(old) }
}
