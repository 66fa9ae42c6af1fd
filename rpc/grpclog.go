package rpc

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/grpclog"
)

// grpc-go logs through a process-wide logger of its own (grpclog), by
// default lines of its own format on stderr. LogTo sends them through a
// slog.Logger instead, so that every line of a server's output has the
// server's format.

var (
	grpcLogOnce sync.Once
	grpcLog     atomic.Pointer[slog.Logger]
)

// LogTo sends grpc-go's own log lines to l from now on: its warnings and
// errors at those levels, its informational lines at Debug (grpc-go is
// chatty at info). The first call installs the adapter (grpclog allows it
// once, before gRPC is used); later calls only change the logger.
func LogTo(l *slog.Logger) {
	grpcLog.Store(l)
	grpcLogOnce.Do(func() { grpclog.SetLoggerV2(slogGRPC{}) })
}

// slogGRPC is grpclog.LoggerV2 over the logger of LogTo.
type slogGRPC struct{}

func (slogGRPC) log(level slog.Level, args ...any) {
	if l := grpcLog.Load(); l != nil {
		l.Log(context.Background(), level, "grpc: "+strings.TrimSuffix(fmt.Sprint(args...), "\n"))
	}
}

func (g slogGRPC) Info(args ...any)   { g.log(slog.LevelDebug, args...) }
func (g slogGRPC) Infoln(args ...any) { g.log(slog.LevelDebug, fmt.Sprintln(args...)) }
func (g slogGRPC) Infof(format string, args ...any) {
	g.log(slog.LevelDebug, fmt.Sprintf(format, args...))
}
func (g slogGRPC) Warning(args ...any)   { g.log(slog.LevelWarn, args...) }
func (g slogGRPC) Warningln(args ...any) { g.log(slog.LevelWarn, fmt.Sprintln(args...)) }
func (g slogGRPC) Warningf(format string, args ...any) {
	g.log(slog.LevelWarn, fmt.Sprintf(format, args...))
}
func (g slogGRPC) Error(args ...any)   { g.log(slog.LevelError, args...) }
func (g slogGRPC) Errorln(args ...any) { g.log(slog.LevelError, fmt.Sprintln(args...)) }
func (g slogGRPC) Errorf(format string, args ...any) {
	g.log(slog.LevelError, fmt.Sprintf(format, args...))
}

// Fatal logs at Error and exits, as grpclog requires of a Fatal.
func (g slogGRPC) Fatal(args ...any) { g.log(slog.LevelError, args...); os.Exit(1) }

// Fatalln is Fatal.
func (g slogGRPC) Fatalln(args ...any) { g.Fatal(fmt.Sprintln(args...)) }

// Fatalf is Fatal with a format.
func (g slogGRPC) Fatalf(format string, args ...any) { g.Fatal(fmt.Sprintf(format, args...)) }

// V reports whether lines of verbosity level are logged: none beyond 0.
func (slogGRPC) V(level int) bool { return level <= 0 }
