//go:build !race

package ring

// RaceRelease marks a publication for the race detector (nothing without it).
func RaceRelease() {}

// RaceAcquire marks an observation of a publication for the race detector
// (nothing without it).
func RaceAcquire() {}
