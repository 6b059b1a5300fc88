module github.com/goverbs/goverbs

// The oldest Go that builds goverbs: runtime.AddCleanup (provider/shm) is
// 1.24's; with it replaced, go1.23.0 builds everything else (checked with
// x/sys v0.30.0). x/sys v0.41.0 is the newest that asks for no more.
go 1.24.0

require golang.org/x/sys v0.41.0

require github.com/spf13/pflag v1.0.10

require golang.org/x/net v0.50.0
