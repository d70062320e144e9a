package tenure_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tenure-go/tenure"
	"github.com/tenure-go/tenure/store/storetest"
)

// sums returns the data points of the sum metrics, keyed by metric name and
// the value of attribute key (or "" without it).
func sums(t *testing.T, r *sdkmetric.ManualReader, key attribute.Key) map[string]map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != tenure.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok {
				out[m.Name] = map[string]int64{}
				for _, dp := range s.DataPoints {
					v, _ := dp.Attributes.Value(key)
					out[m.Name][v.AsString()] += dp.Value
				}
			}
		}
	}
	return out
}

func TestMetricsAndSpans(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	exporter := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	f := newFixture(t, tenure.WithMeterProvider(mp), tenure.WithTracerProvider(tp))
	other, _ := tenure.New(f.mem, tenure.WithClock(f.clock))
	ctx := ctxT(t)

	l, err := f.lk.TryAcquire(ctx, "a", ttl) // granted
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryAcquire(ctx, "b", ttl); err != nil {
		t.Fatal(err)
	}
	if _, err := f.lk.TryAcquire(ctx, "b", ttl); err == nil { // held
		t.Fatal("granted a held resource")
	}
	f.clock.Advance(ttl / 3) // one background renewal
	f.idle(4)
	lost, err := f.lk.TryAcquire(ctx, "c", ttl)
	if err != nil {
		t.Fatal(err)
	}
	f.faulty.Set(storetest.OpRenew, storetest.Fail, 1)
	if err := lost.Renew(ctx); err == nil { // renewal error
		t.Fatal("injected failure not seen")
	}
	_ = f.mem.Release(ctx, "c", lost.Owner(), lost.Token())
	if err := lost.Renew(ctx); err == nil { // not the owner: lost
		t.Fatal("renewed a released lease")
	}

	outcomes := sums(t, reader, tenure.AttrOutcome)
	if got := outcomes["tenure.lease.acquisitions"]; got["granted"] != 2 || got["held"] != 1 {
		t.Errorf("acquisitions by outcome: %v", got)
	}
	if got := outcomes["tenure.lease.renewals"]; got["renewed"] != 1 || got["error"] != 1 || got["lost"] != 1 {
		t.Errorf("renewals by outcome: %v", got)
	}
	if got := outcomes["tenure.lease.held"][""]; got != 1 {
		t.Errorf("leases held: %d, want 1", got)
	}
	if got := sums(t, reader, tenure.AttrLossReason)["tenure.lease.losses"]; got["not_owner"] != 1 {
		t.Errorf("losses by reason: %v", got)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := sums(t, reader, tenure.AttrOutcome)["tenure.lease.held"][""]; got != 0 {
		t.Errorf("leases held after release: %d", got)
	}

	spans := exporter.GetSpans()
	byName := map[string][]string{}
	for _, s := range spans {
		var res, outcome string
		for _, a := range s.Attributes {
			switch a.Key {
			case tenure.AttrResource:
				res = a.Value.AsString()
			case tenure.AttrOutcome:
				outcome = a.Value.AsString()
			}
		}
		byName[s.Name] = append(byName[s.Name], res+":"+outcome)
	}
	want := map[string][]string{
		"tenure.acquire": {"a:granted", "b:held", "c:granted"},
		"tenure.renew":   {"a:renewed", "c:error", "c:lost"},
		"tenure.release": {"a:released"},
	}
	for name, w := range want {
		if got := byName[name]; len(got) != len(w) || !sameSet(got, w) {
			t.Errorf("%s spans: %v, want %v", name, got, w)
		}
	}
}

func sameSet(a, b []string) bool {
	m := map[string]int{}
	for _, x := range a {
		m[x]++
	}
	for _, x := range b {
		m[x]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}

// Without a provider option, tenure reports through the global providers
// (no-ops until the application installs real ones).
func TestGlobalProviders(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	exporter := tracetest.NewInMemoryExporter()
	prevM, prevT := otel.GetMeterProvider(), otel.GetTracerProvider()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)))
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter)))
	t.Cleanup(func() { otel.SetMeterProvider(prevM); otel.SetTracerProvider(prevT) })

	f := newFixture(t)
	l, err := f.lk.TryAcquire(ctxT(t), "a", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if trace.SpanFromContext(l.Context()).SpanContext().IsValid() {
		t.Error("the lease context carries tenure's acquire span; it should carry the caller's")
	}
	if got := sums(t, reader, tenure.AttrOutcome)["tenure.lease.acquisitions"]["granted"]; got != 1 {
		t.Errorf("global meter provider: %d grants recorded", got)
	}
	if n := len(exporter.GetSpans()); n != 1 {
		t.Errorf("global tracer provider: %d spans", n)
	}
}
