// Package lockeropts reads what a tenure.Locker's options choose, for the
// packages of this module that build on a Locker (election): they time,
// log and measure their own work with the clock, logger and meter provider
// that the Locker's options give, so that each of these is decided in one
// place, the options, without package tenure exporting its configuration.
package lockeropts

import (
	"log/slog"

	"go.opentelemetry.io/otel/metric"

	"github.com/tenure-go/tenure/clock"
)

// Settings are the choices of a list of tenure.Options that the packages
// built on a Locker need, with the Locker's defaults filled in.
type Settings struct {
	// OwnerID is the readable owner id (tenure.WithOwnerID, default
	// tenure.DefaultOwnerID()); it is not validated.
	OwnerID string
	// Clock is the clock (tenure.WithClock, default clock.Real()).
	Clock clock.Clock
	// Logger is the logger (tenure.WithLogger, default one that discards
	// everything); never nil.
	Logger *slog.Logger
	// MeterProvider is where metrics go (tenure.WithMeterProvider); nil
	// means the global provider, as for the Locker.
	MeterProvider metric.MeterProvider
}

// Read returns the Settings that opts, a []tenure.Option, choose. Package
// tenure sets it when it is initialized, so it is set for every package
// that imports tenure.
var Read func(opts any) Settings
