// Package doccheck holds a test of the module's documentation: the code in
// every package doc is code that go test compiles (it is in one of the
// package's Example functions), and the README sends a reader to no path
// outside the repository.
package doccheck
