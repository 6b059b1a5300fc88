//go:build !race

package rsocket

const raceEnabled = false
