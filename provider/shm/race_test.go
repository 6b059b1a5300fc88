//go:build race

package shm_test

// raceEnabled: the race detector allocates (sync.Pool drops its items),
// so allocation counts are not checked under it.
const raceEnabled = true
