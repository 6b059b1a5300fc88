//go:build !race

package iwarp

func raceRelease() {}
func raceAcquire() {}
