package rpma_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/goverbs/goverbs/internal/leakcheck"
	"github.com/goverbs/goverbs/rpma"
)

// A refused flush says what is missing: the remote peer configuration
// that declares direct write to persistent memory (not applied, or
// applied without it), or the region's flush usage.
func TestFlushErrorsSayWhatIsMissing(t *testing.T) {
	leakcheck.Check(t)
	p := newPeer(t)
	target := regMR(t, p, make([]byte, 64), rpma.UsageWriteDst|rpma.UsageReadSrc|rpma.UsageFlushTypePersistent)
	_, client := pair(t, p, newPeer(t), pairOpts{})
	remote := remoteOf(t, target)
	says := func(what string, err error, words ...string) {
		t.Helper()
		if !errors.Is(err, rpma.ErrNoSupp) {
			t.Errorf("%s: %v, want ErrNoSupp", what, err)
			return
		}
		for _, w := range words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", what, err, w)
			}
		}
	}
	says("no peer configuration applied", client.Flush(remote, 0, 8, rpma.FlushPersistent, rpma.CompletionAlways, 0),
		"direct write to persistent memory", "none was applied", "SetDirectWriteToPmem", "ApplyRemotePeerCfg", "librpma")
	if err := client.ApplyRemotePeerCfg(rpma.NewPeerCfg()); err != nil {
		t.Fatal(err)
	}
	says("a configuration without direct write", client.Flush(remote, 0, 8, rpma.FlushPersistent, rpma.CompletionAlways, 0),
		"direct write to persistent memory", "does not", "SetDirectWriteToPmem")
	cfg := rpma.NewPeerCfg()
	cfg.SetDirectWriteToPmem(true)
	if err := client.ApplyRemotePeerCfg(cfg); err != nil {
		t.Fatal(err)
	}
	says("a region without visibility flush usage", client.Flush(remote, 0, 8, rpma.FlushVisibility, rpma.CompletionAlways, 0),
		"FLUSH_TYPE_VISIBILITY", "READ_SRC|WRITE_DST|FLUSH_TYPE_PERSISTENT", "register")
}
