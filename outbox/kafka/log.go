package kafka

import (
	"context"
	"log/slog"

	"github.com/twmb/franz-go/pkg/kgo"
)

// slogLogger writes franz-go's warnings and errors to a slog.Logger. Its
// info and debug lines (every metadata refresh, every connection) stay out
// of lapse's log.
type slogLogger struct{ l *slog.Logger }

// Level implements kgo.Logger.
func (slogLogger) Level() kgo.LogLevel { return kgo.LogLevelWarn }

// Log implements kgo.Logger.
func (s slogLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	l := slog.LevelInfo
	switch level {
	case kgo.LogLevelError:
		l = slog.LevelError
	case kgo.LogLevelWarn:
		l = slog.LevelWarn
	case kgo.LogLevelDebug:
		l = slog.LevelDebug
	}
	s.l.Log(context.Background(), l, "kafka: "+msg, keyvals...)
}
