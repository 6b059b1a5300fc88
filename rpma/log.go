package rpma

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
)

// LogLevel is a librpma log level (enum rpma_log_level).
type LogLevel int

// Log levels, with librpma's values.
const (
	LogDisabled LogLevel = -1
	LogFatal    LogLevel = 0
	LogError    LogLevel = 1
	LogWarning  LogLevel = 2
	LogNotice   LogLevel = 3
	LogInfo     LogLevel = 4
	LogDebug    LogLevel = 5
)

var logLevelNames = [...]string{"FATAL", "ERROR", "WARNING", "NOTICE", "INFO", "DEBUG"}

// String names the level, e.g. "WARNING".
func (l LogLevel) String() string {
	if l == LogDisabled {
		return "DISABLED"
	}
	if l >= 0 && int(l) < len(logLevelNames) {
		return logLevelNames[l]
	}
	return fmt.Sprintf("LogLevel(%d)", int(l))
}

// SlogLevel returns the log/slog level messages of this level are logged
// at: FATAL above ERROR, NOTICE between INFO and WARN.
func (l LogLevel) SlogLevel() slog.Level {
	switch l {
	case LogFatal:
		return slog.LevelError + 4
	case LogError:
		return slog.LevelError
	case LogWarning:
		return slog.LevelWarn
	case LogNotice:
		return slog.LevelInfo + 2
	case LogInfo:
		return slog.LevelInfo
	}
	return slog.LevelDebug
}

// Threshold selects which of librpma's two thresholds a call sets
// (enum rpma_log_threshold).
type Threshold int

const (
	// ThresholdPrimary (RPMA_LOG_THRESHOLD) bounds what goes to the logger
	// (SetLogger; slog.Default() unless set). Default: WARNING.
	ThresholdPrimary Threshold = 0
	// ThresholdAux (RPMA_LOG_THRESHOLD_AUX) bounds what is also written to
	// standard error, as librpma's default log function does. Default: DISABLED.
	ThresholdAux Threshold = 1
)

var logState = struct {
	sync.Mutex
	thr    [2]LogLevel
	logger *slog.Logger
	aux    *slog.Logger
}{thr: [2]LogLevel{LogWarning, LogDisabled}, aux: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))}

// SetLogThreshold sets one of the thresholds (rpma_log_set_threshold):
// messages of level at most level (more severe or equal) pass. It returns
// ErrInval for an unknown threshold or level.
func SetLogThreshold(which Threshold, level LogLevel) error {
	if which != ThresholdPrimary && which != ThresholdAux {
		return wrap(ErrInval, "unknown threshold %d", which)
	}
	if level < LogDisabled || level > LogDebug {
		return wrap(ErrInval, "unknown log level %d", level)
	}
	logState.Lock()
	logState.thr[which] = level
	logState.Unlock()
	return nil
}

// LogThreshold returns a threshold (rpma_log_get_threshold).
func LogThreshold(which Threshold) (LogLevel, error) {
	if which != ThresholdPrimary && which != ThresholdAux {
		return 0, wrap(ErrInval, "unknown threshold %d", which)
	}
	logState.Lock()
	defer logState.Unlock()
	return logState.thr[which], nil
}

// SetLogger makes l receive the messages that pass the primary threshold
// (the counterpart of rpma_log_set_function); nil restores slog.Default().
func SetLogger(l *slog.Logger) {
	logState.Lock()
	logState.logger = l
	logState.Unlock()
}

// logAt logs msg at level through the configured loggers.
func logAt(level LogLevel, msg string, args ...any) {
	logState.Lock()
	thr, l, aux := logState.thr, logState.logger, logState.aux
	logState.Unlock()
	if level <= thr[ThresholdPrimary] && thr[ThresholdPrimary] != LogDisabled {
		if l == nil {
			l = slog.Default()
		}
		l.Log(context.Background(), level.SlogLevel(), "rpma: "+msg, append(args, "rpma_level", level.String())...)
	}
	if level <= thr[ThresholdAux] && thr[ThresholdAux] != LogDisabled {
		aux.Log(context.Background(), level.SlogLevel(), "rpma: "+msg, args...)
	}
}
