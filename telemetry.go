package tenure

import (
	"context"
	"errors"
	"sync/atomic"
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

// telemetry holds a Locker's instruments. With no provider configured (the
// default, until an application installs global ones), it costs a few atomic
// loads per operation and allocates nothing: spans are only started once a
// tracer provider is set, and metric attributes are built once.
type telemetry struct {
	fixedTracer  trace.Tracer             // from WithTracerProvider; nil: the global provider
	cached       atomic.Pointer[tracerOf] // the global provider's tracer, once one is set
	acquisitions metric.Int64Counter
	renewals     metric.Int64Counter
	renewLatency metric.Float64Histogram
	losses       metric.Int64Counter
	held         metric.Int64UpDownCounter
	unknown      metric.Int64Counter
}

type tracerOf struct {
	tp     trace.TracerProvider
	tracer trace.Tracer
}

// defaultTracerProvider is the global provider before anyone set one: a
// delegating no-op.
var defaultTracerProvider = otel.GetTracerProvider()

// Metric options, built once.
var (
	outcomeOpts = func() map[string][]metric.AddOption {
		m := map[string][]metric.AddOption{}
		for _, o := range []string{"ok", "unknown", "held", "lost", "error", "granted", "renewed", "released"} {
			m[o] = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(AttrOutcome.String(o)))}
		}
		return m
	}()
	outcomeRecordOpts = func() map[string][]metric.RecordOption {
		m := map[string][]metric.RecordOption{}
		for _, o := range []string{"ok", "unknown", "held", "lost", "error", "renewed"} {
			m[o] = []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(AttrOutcome.String(o)))}
		}
		return m
	}()
	lossOpts = map[string][]metric.AddOption{
		reasonDeadline: {metric.WithAttributeSet(attribute.NewSet(AttrLossReason.String(reasonDeadline)))},
		reasonNotOwner: {metric.WithAttributeSet(attribute.NewSet(AttrLossReason.String(reasonNotOwner)))},
	}
	operationOpts = map[string][]metric.AddOption{
		"acquire": {metric.WithAttributeSet(attribute.NewSet(AttrOperation.String("acquire")))},
		"renew":   {metric.WithAttributeSet(attribute.NewSet(AttrOperation.String("renew")))},
		"release": {metric.WithAttributeSet(attribute.NewSet(AttrOperation.String("release")))},
	}
)

func newTelemetry(c telemetryConfig) *telemetry {
	mp := c.meters
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(ScopeName)
	t := &telemetry{}
	if c.tracers != nil {
		t.fixedTracer = c.tracers.Tracer(ScopeName)
	}
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
		metric.WithDescription("Store operations whose answer was lost and had to be resolved, by operation."),
		metric.WithUnit("{operation}"))
	return t
}

// tracer returns the tracer to use now, or nil when no tracer provider is
// configured (no span is started then).
func (t *telemetry) tracer() trace.Tracer {
	if t.fixedTracer != nil {
		return t.fixedTracer
	}
	tp := otel.GetTracerProvider()
	if tp == defaultTracerProvider {
		return nil
	}
	if c := t.cached.Load(); c != nil && c.tp == tp {
		return c.tracer
	}
	c := &tracerOf{tp: tp, tracer: tp.Tracer(ScopeName)}
	t.cached.Store(c)
	return c.tracer
}

type span = trace.Span

// start starts a span, or returns ctx and a nil span when no tracer
// provider is configured.
func (t *telemetry) start(ctx context.Context, name, resource string) (context.Context, span) {
	tr := t.tracer()
	if tr == nil {
		return ctx, nil
	}
	return tr.Start(ctx, name, trace.WithAttributes(AttrResource.String(resource)))
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
	if s == nil {
		return
	}
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
		if s != nil {
			s.SetAttributes(AttrToken.Int64(int64(l.fence)))
		}
	}
	t.acquisitions.Add(ctx, 1, outcomeOpts[outcome]...)
	endSpan(s, outcome, err)
}

func (t *telemetry) unknownOutcome(ctx context.Context, resource, op string) {
	t.unknown.Add(ctx, 1, operationOpts[op]...)
}

func (t *telemetry) leaseStarted(resource string) {
	t.held.Add(context.Background(), 1)
}

func (t *telemetry) leaseLost(resource, reason string) {
	t.losses.Add(context.Background(), 1, lossOpts[reason]...)
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
	t.renewals.Add(ctx, 1, outcomeOpts[outcome]...)
	t.renewLatency.Record(ctx, d.Seconds(), outcomeRecordOpts[outcome]...)
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
