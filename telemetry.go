package tenure

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// ScopeName is the OpenTelemetry instrumentation scope of tenure's metrics
// and spans.
const ScopeName = "github.com/tenure-go/tenure"

// Attribute keys on tenure's metrics and spans (docs/observability.md).
const (
	AttrResource   = attribute.Key("tenure.resource")    // spans only: resource names are unbounded
	AttrOutcome    = attribute.Key("tenure.outcome")     // granted, held, renewed, lost, released, unknown, error
	AttrToken      = attribute.Key("tenure.token")       // spans only
	AttrLossReason = attribute.Key("tenure.loss.reason") // deadline, not_owner
	AttrOperation  = attribute.Key("tenure.operation")   // acquire, renew, release
)

type telemetryConfig struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
}

// WithMeterProvider sets where tenure's metrics go. The default is the
// global provider (otel.GetMeterProvider), which records nothing until the
// application installs one.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.telemetry.meters = mp }
}

// WithTracerProvider sets where tenure's spans go. The default is the global
// provider (otel.GetTracerProvider), which records nothing until the
// application installs one.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.telemetry.tracers = tp }
}

// telemetry holds a Locker's instruments. Instruments from a no-op provider
// cost a method call each.
type telemetry struct {
	tracer       trace.Tracer
	acquisitions metric.Int64Counter
	renewals     metric.Int64Counter
	renewLatency metric.Float64Histogram
	losses       metric.Int64Counter
	held         metric.Int64UpDownCounter
	unknown      metric.Int64Counter
}

func newTelemetry(c telemetryConfig) *telemetry {
	mp, tp := c.meters, c.tracers
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	m := mp.Meter(ScopeName)
	t := &telemetry{tracer: tp.Tracer(ScopeName)}
	// Errors from instrument creation only concern invalid names, which are
	// constants here; the returned instrument is a usable no-op then.
	t.acquisitions, _ = m.Int64Counter("tenure.lease.acquisitions",
		metric.WithDescription("Acquire attempts (one per TryAcquire, and per attempt of a blocking Acquire), by outcome."),
		metric.WithUnit("{attempt}"))
	t.renewals, _ = m.Int64Counter("tenure.lease.renewals",
		metric.WithDescription("Renewal attempts, by outcome."),
		metric.WithUnit("{attempt}"))
	t.renewLatency, _ = m.Float64Histogram("tenure.lease.renewal.duration",
		metric.WithDescription("Duration of renewal calls to the store."),
		metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
	t.losses, _ = m.Int64Counter("tenure.lease.losses",
		metric.WithDescription("Leases lost (not released by their holder), by reason."),
		metric.WithUnit("{lease}"))
	t.held, _ = m.Int64UpDownCounter("tenure.lease.held",
		metric.WithDescription("Leases currently held and trusted."),
		metric.WithUnit("{lease}"))
	t.unknown, _ = m.Int64Counter("tenure.lease.unknown_outcomes",
		metric.WithDescription("driver.Store operations whose answer was lost and had to be resolved, by operation."),
		metric.WithUnit("{operation}"))
	return t
}

type span = trace.Span

func (t *telemetry) start(ctx context.Context, name, resource string) (context.Context, span) {
	return t.tracer.Start(ctx, name, trace.WithAttributes(AttrResource.String(resource)))
}

func outcomeOf(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrUnknownOutcome):
		return "unknown"
	case errors.Is(err, ErrHeld):
		return "held"
	case errors.Is(err, ErrLeaseLost):
		return "lost"
	}
	return "error"
}

func endSpan(s span, outcome string, err error) {
	s.SetAttributes(AttrOutcome.String(outcome))
	if err != nil && outcome != "held" {
		s.RecordError(err)
		s.SetStatus(codes.Error, err.Error())
	}
	s.End()
}

func (t *telemetry) acquired(ctx context.Context, s span, resource string, l *Lease, err error) {
	outcome := outcomeOf(err)
	if err == nil {
		outcome = "granted"
		s.SetAttributes(AttrToken.Int64(int64(l.token)))
	}
	t.acquisitions.Add(ctx, 1, metric.WithAttributes(AttrOutcome.String(outcome)))
	endSpan(s, outcome, err)
}

func (t *telemetry) unknownOutcome(ctx context.Context, resource, op string) {
	t.unknown.Add(ctx, 1, metric.WithAttributes(AttrOperation.String(op)))
}

func (t *telemetry) leaseStarted(resource string) {
	t.held.Add(context.Background(), 1)
}

func (t *telemetry) leaseLost(resource, reason string) {
	t.losses.Add(context.Background(), 1, metric.WithAttributes(AttrLossReason.String(reason)))
	t.held.Add(context.Background(), -1)
}

func (t *telemetry) leaseEnded(resource string) {
	t.held.Add(context.Background(), -1)
}

func (t *telemetry) renewed(ctx context.Context, s span, resource string, d time.Duration, err error) {
	outcome := outcomeOf(err)
	if err == nil {
		outcome = "renewed"
	}
	attrs := metric.WithAttributes(AttrOutcome.String(outcome))
	t.renewals.Add(ctx, 1, attrs)
	t.renewLatency.Record(ctx, d.Seconds(), attrs)
	if errors.Is(err, ErrUnknownOutcome) {
		t.unknownOutcome(ctx, resource, "renew")
	}
	endSpan(s, outcome, err)
}

func (t *telemetry) released(ctx context.Context, s span, resource string, err error) {
	outcome := outcomeOf(err)
	if err == nil {
		outcome = "released"
	}
	endSpan(s, outcome, err)
}
