//go:build !race

package roce

func raceRelease() {}
func raceAcquire() {}
