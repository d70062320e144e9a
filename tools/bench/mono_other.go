//go:build !linux

package bench

import (
	"os"
	"time"
)

var sigTerm = os.Interrupt

var monoBase = time.Now()

// Mono returns nanoseconds on this process's monotonic clock. Only on
// Linux is it CLOCK_MONOTONIC, shared by every process, which the failover
// phase needs.
func Mono() int64 { return int64(time.Since(monoBase)) }

// processCPU is not measured outside Linux.
func processCPU() time.Duration { return 0 }
