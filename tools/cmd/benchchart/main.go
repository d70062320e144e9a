// Command benchchart draws the latency charts of docs/benchmarks.md from the
// JSON that `tenure-bench --json` writes: p50 (solid) and p99 (dashed)
// latency of acquire, renew and release by store, system and number of
// concurrent clients on distinct resources, on a log scale. With -phase
// peers it draws the peers phase: one row per store, tenure and its peers.
//
//	cd tools && go run ./cmd/benchchart -in ops.json -out ops.png
//	cd tools && go run ./cmd/benchchart -phase peers -in ../docs/benchmarks/peers-1.json -out ../docs/benchmarks/peers.png
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"os"
	"sort"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/tenure-go/tenure/tools/bench"
)

func main() {
	in := flag.String("in", "docs/benchmarks/peers-1.json", "JSON written by tenure-bench --json")
	out := flag.String("out", "docs/benchmarks/peers.png", "PNG to write")
	phase := flag.String("phase", "peers", `results to draw: "peers" (the peers phase: one row per store, tenure and its peers) or "" (the ops phase: every store in one row)`)
	flag.Parse()
	if err := run(*in, *out, *phase); err != nil {
		fmt.Fprintln(os.Stderr, "benchchart:", err)
		os.Exit(1)
	}
}

type series struct {
	name   string
	points map[string]map[int][2]float64 // op → clients → p50, p99 (ms)
}

// row is one row of panels (acquire, renew, release) and its legend.
type row struct {
	title  string
	names  []string
	series map[string]*series
}

func run(in, out, phase string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var r bench.Report
	if err := json.Unmarshal(b, &r); err != nil {
		return err
	}
	var rows []*row
	byRow := map[string]*row{}
	levels := map[int]bool{}
	for _, o := range r.Ops {
		if o.Mode != bench.ModeDistinct || o.Phase != phase {
			continue
		}
		key, name := "", o.Store+" "+o.System
		if phase != "" {
			key, name = o.Store, o.System
		}
		rw := byRow[key]
		if rw == nil {
			rw = &row{title: key, series: map[string]*series{}}
			byRow[key] = rw
			rows = append(rows, rw)
		}
		s := rw.series[name]
		if s == nil {
			s = &series{name: name, points: map[string]map[int][2]float64{}}
			rw.series[name] = s
			rw.names = append(rw.names, name)
		}
		levels[o.Clients] = true
		for _, op := range []string{bench.OpAcquire, bench.OpRenew, bench.OpRelease} {
			res := o.Ops[op]
			if res == nil || res.N == 0 || res.P50Ms <= 0 {
				continue
			}
			if s.points[op] == nil {
				s.points[op] = map[int][2]float64{}
			}
			s.points[op][o.Clients] = [2]float64{res.P50Ms, res.P99Ms}
		}
	}
	if len(rows) == 0 {
		return fmt.Errorf("%s has no operations on distinct resources (phase %q)", in, phase)
	}
	var xs []int
	for c := range levels {
		xs = append(xs, c)
	}
	sort.Ints(xs)

	const w = 16 * vg.Inch
	rowH := 5.5 * vg.Inch
	if phase != "" {
		rowH = 4 * vg.Inch
	}
	titleH := vg.Millimeter * 12
	h := rowH*vg.Length(len(rows)) + titleH
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(96))
	dc := draw.New(img)
	legendW := 3.2 * vg.Inch
	for i, rw := range rows {
		top := dc.Max.Y - titleH - rowH*vg.Length(i)
		area := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{Min: vg.Point{X: dc.Min.X, Y: top - rowH}, Max: vg.Point{X: dc.Max.X, Y: top}}}
		if err := drawRow(area, rw, xs, legendW, phase != ""); err != nil {
			return err
		}
	}
	what := "latency by store and concurrency"
	if phase == bench.PhasePeers {
		what = "tenure and its peers, latency by concurrency"
	}
	title := fmt.Sprintf("tenure-bench, %d CPUs, %s: %s (p50 solid, p99 dashed)", r.Machine.CPUs, r.Started.Format("2006-01-02"), what)
	fnt := plot.DefaultFont
	fnt.Size = vg.Points(14)
	sty := draw.TextStyle{Color: color.Black, Font: fnt, Handler: plot.DefaultTextHandler, XAlign: draw.XCenter, YAlign: draw.YTop}
	dc.FillText(sty, vg.Point{X: (dc.Min.X + dc.Max.X - legendW) / 2, Y: dc.Max.Y - vg.Millimeter*2}, title)
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// drawRow draws the three panels of rw (acquire, renew, release) and its
// legend into area; with titled, each panel's title names the row.
func drawRow(area draw.Canvas, rw *row, xs []int, legendW vg.Length, titled bool) error {
	pos := map[int]float64{}
	var ticks []plot.Tick
	for i, c := range xs {
		pos[c] = float64(i)
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: strconv.Itoa(c)})
	}
	// One latency range for the row's panels, so they compare at a glance.
	lo, hi := 0.0, 0.0
	for _, s := range rw.series {
		for _, pts := range s.points {
			for _, v := range pts {
				if lo == 0 || v[0] < lo {
					lo = v[0]
				}
				hi = max(hi, v[1])
			}
		}
	}
	legend := plot.NewLegend()
	var plots []*plot.Plot
	for i, op := range []string{bench.OpAcquire, bench.OpRenew, bench.OpRelease} {
		p := plot.New()
		p.Title.Text = op + ", ms (log scale)"
		if titled {
			p.Title.Text = rw.title + ": " + p.Title.Text
		}
		p.X.Label.Text = "concurrent clients (distinct resources)"
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		p.X.Min, p.X.Max = -0.25, float64(len(xs)-1)+0.25
		p.Y.Scale = plot.LogScale{}
		p.Y.Min, p.Y.Max = lo/1.5, hi*1.5
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
		p.Add(plotter.NewGrid())
		for k, name := range rw.names {
			pts := rw.series[name].points[op]
			if len(pts) == 0 {
				continue
			}
			col := palette[k%len(palette)]
			var p50, p99 plotter.XYs
			for _, c := range xs {
				if v, ok := pts[c]; ok {
					p50 = append(p50, plotter.XY{X: pos[c], Y: v[0]})
					p99 = append(p99, plotter.XY{X: pos[c], Y: v[1]})
				}
			}
			l50, s50, err := plotter.NewLinePoints(p50)
			if err != nil {
				return err
			}
			l50.Color, s50.Color = col, col
			l50.Width = vg.Points(1.5)
			s50.Shape = plotutil.Shape(k)
			l99, err := plotter.NewLine(p99)
			if err != nil {
				return err
			}
			l99.Color = col
			l99.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			p.Add(l50, s50, l99)
			if i == 0 || (i == 1 && !hasOp(rw.series[name], bench.OpAcquire)) {
				legend.Add(name, l50, s50)
			}
		}
		plots = append(plots, p)
	}
	// Three panels and a legend column.
	panels := draw.Canvas{Canvas: area.Canvas, Rectangle: vg.Rectangle{Min: area.Min, Max: vg.Point{X: area.Max.X - legendW, Y: area.Max.Y}}}
	t := draw.Tiles{Rows: 1, Cols: 3, PadX: vg.Millimeter * 6, PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2}
	for j, p := range plots {
		p.Draw(t.At(panels, j, 0))
	}
	legend.Top, legend.Left = true, true
	legend.TextStyle.Font.Size = vg.Points(11)
	lc := draw.Canvas{Canvas: area.Canvas, Rectangle: vg.Rectangle{Min: vg.Point{X: area.Max.X - legendW + vg.Millimeter*3, Y: area.Min.Y}, Max: vg.Point{X: area.Max.X, Y: area.Max.Y - vg.Millimeter*3}}}
	legend.Draw(lc)
	return nil
}

// palette has a distinct colour for each of up to ten series.
var palette = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xd6, 0x27, 0x28, 0xff}, color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff}, color.RGBA{0xbc, 0xbd, 0x22, 0xff},
	color.RGBA{0x17, 0xbe, 0xcf, 0xff},
}

func hasOp(s *series, op string) bool { return len(s.points[op]) > 0 }
