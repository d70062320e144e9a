package tenure

import (
	"context"
	"time"
)

// telemetryConfig and telemetry are filled in with OpenTelemetry metrics and
// spans; until then they are no-ops.
type telemetryConfig struct{}

type telemetry struct{}

type span struct{}

func newTelemetry(telemetryConfig) *telemetry { return &telemetry{} }

func (t *telemetry) start(ctx context.Context, name, resource string) (context.Context, span) {
	return ctx, span{}
}
func (t *telemetry) acquired(ctx context.Context, s span, resource string, l *Lease, err error) {}
func (t *telemetry) unknownOutcome(ctx context.Context, resource, op string)                    {}
func (t *telemetry) leaseStarted(resource string)                                               {}
func (t *telemetry) leaseLost(resource, reason string)                                          {}
func (t *telemetry) leaseEnded(resource string)                                                 {}
func (t *telemetry) renewed(ctx context.Context, s span, resource string, d time.Duration, err error) {
}
func (t *telemetry) released(ctx context.Context, s span, resource string, err error) {}
