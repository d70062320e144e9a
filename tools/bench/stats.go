package bench

import (
	"math"
	"slices"
	"time"
)

// Summary describes a set of measured durations. Quantiles are nearest-rank
// on the sorted samples (the sample at index ⌈q·n⌉−1): every figure is one
// of the measured values, never an interpolation.
type Summary struct {
	N      int     `json:"n"`
	MinMs  float64 `json:"min_ms"`
	P50Ms  float64 `json:"p50_ms"`
	P90Ms  float64 `json:"p90_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	MeanMs float64 `json:"mean_ms"`
}

// Summarize sorts d in place and summarizes it. An empty d gives a zero
// Summary.
func Summarize(d []time.Duration) Summary {
	if len(d) == 0 {
		return Summary{}
	}
	slices.Sort(d)
	var sum float64
	for _, v := range d {
		sum += float64(v)
	}
	return Summary{
		N:      len(d),
		MinMs:  ms(d[0]),
		P50Ms:  ms(Quantile(d, 0.50)),
		P90Ms:  ms(Quantile(d, 0.90)),
		P99Ms:  ms(Quantile(d, 0.99)),
		MaxMs:  ms(d[len(d)-1]),
		MeanMs: sum / float64(len(d)) / 1e6,
	}
}

// Quantile returns the nearest-rank q-quantile of sorted samples.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return sorted[i]
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

// round3 rounds to three decimals, for JSON that people read.
func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
