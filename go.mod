module github.com/goverbs/goverbs

go 1.24.0

require golang.org/x/sys v0.41.0

require github.com/spf13/pflag v1.0.10

require golang.org/x/net v0.50.0
