//go:build rdmacore && linux && cgo

package rdmacore

// ConnectPair is connectPair, for the conformance fixture.
var ConnectPair = connectPair

// WCLayout is wcLayout, for the layout test.
var WCLayout = wcLayout

// GoWCLayout is goWCLayout.
var GoWCLayout = goWCLayout

// CWriteLoop is cWriteLoop, the benchmarks' C baseline.
var CWriteLoop = cWriteLoop

// CPollEmpty is cPollEmpty.
var CPollEmpty = cPollEmpty

// CgoNop is cgoNop.
var CgoNop = cgoNop
