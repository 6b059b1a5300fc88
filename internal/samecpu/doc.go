// Package samecpu runs the two ends of a test as child processes confined
// to one CPU (Linux), for tests of what a blocking wait does when its peer
// shares the CPU: a spin cannot be answered there unless it loses the CPU.
package samecpu
