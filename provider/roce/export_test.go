package roce

// Fault kinds for SetWireFaults.
const (
	FaultPass = faultPass
	FaultDrop = faultDrop
	FaultDup  = faultDup
	FaultHold = faultHold
)

// FaultKind is what happens to a datagram.
type FaultKind = faultKind

// SetWireFaults makes every device decide each datagram's fate with f
// (nil: no faults); it returns a function that restores the previous one.
func SetWireFaults(f func(pkt []byte) FaultKind) (restore func()) {
	var p *wireFault
	if f != nil {
		w := wireFault(f)
		p = &w
	}
	old := faults.Swap(p)
	return func() { faults.Store(old) }
}
