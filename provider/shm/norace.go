//go:build !race

package shm

func raceRelease() {}
func raceAcquire() {}
