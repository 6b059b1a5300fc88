//go:build rdmacore && linux && cgo

package rdmacore

// ConnectPair is connectPair, for the conformance fixture.
var ConnectPair = connectPair

// WCLayout is wcLayout, for the layout test.
var WCLayout = wcLayout

// GoWCLayout is goWCLayout.
var GoWCLayout = goWCLayout
