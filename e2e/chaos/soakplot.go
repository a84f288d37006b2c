package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"sort"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// soakPanels are the plot's panels: figures of one unit each.
var soakPanels = []struct {
	title string
	keys  []string
}{
	{"memory (MiB)", []string{"rss_mib", "heap_mib"}},
	{"goroutines, connections, fds", []string{"goroutines", "conns", "fds"}},
	{"ledger entries", []string{"held", "ranges", "known", "owed", "pending"}},
	{"members, groups, transactions, sessions, calls", []string{"members", "groups", "txns", "sessions", "calls"}},
	{"shadow tail lag (records)", []string{"tail_lag"}},
	{"commit→applied p99 (ms)", []string{"applied_p99_ms"}},
}

var soakPalette = []color.RGBA{
	{0x1f, 0x77, 0xb4, 0xff}, {0xff, 0x7f, 0x0e, 0xff}, {0x2c, 0xa0, 0x2c, 0xff}, {0xd6, 0x27, 0x28, 0xff},
	{0x94, 0x67, 0xbd, 0xff}, {0x8c, 0x56, 0x4b, 0xff}, {0xe3, 0x77, 0xc2, 0xff}, {0x7f, 0x7f, 0x7f, 0xff},
}

// writeSoakPlot draws every figure against time, one panel per unit, one
// line per figure and sidecar incarnation (dashed: a restarted sidecar), and
// the end of the warm-up of sidecar 1 as a vertical line. gonum/plot.
func writeSoakPlot(path string, samples []soakSample, warmUp time.Duration) error {
	if len(samples) == 0 {
		return fmt.Errorf("no samples")
	}
	type inc struct{ proxy, start int }
	var incs []inc
	seen := map[inc]bool{}
	for _, s := range samples {
		k := inc{s.Proxy, s.Start}
		if !seen[k] {
			seen[k] = true
			incs = append(incs, k)
		}
	}
	sort.Slice(incs, func(i, j int) bool {
		if incs[i].proxy != incs[j].proxy {
			return incs[i].proxy < incs[j].proxy
		}
		return incs[i].start < incs[j].start
	})
	const cols = 2
	rows := (len(soakPanels) + cols - 1) / cols
	img := vgimg.New(vg.Points(1400), vg.Points(float64(360*rows)))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 3, PadBottom: vg.Millimeter * 3, PadLeft: vg.Millimeter * 3, PadRight: vg.Millimeter * 3}
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, cols)
	}
	for pi, panel := range soakPanels {
		pl := plot.New()
		pl.Title.Text = panel.title
		pl.X.Label.Text = "minutes"
		pl.Legend.Top = true
		pl.Legend.Left = true
		ymax := 0.0
		for ki, key := range panel.keys {
			for _, in := range incs {
				var xys plotter.XYs
				for _, s := range samples {
					if s.Proxy != in.proxy || s.Start != in.start {
						continue
					}
					if v, ok := s.V[key]; ok && !math.IsNaN(v) && !math.IsInf(v, 0) {
						xys = append(xys, plotter.XY{X: s.At.Minutes(), Y: v})
						ymax = max(ymax, v)
					}
				}
				if len(xys) == 0 {
					continue
				}
				l, err := plotter.NewLine(xys)
				if err != nil {
					return err
				}
				l.Color = soakPalette[(ki*2+in.proxy-1)%len(soakPalette)]
				l.Width = vg.Points(1.5)
				if in.start > 1 {
					l.Dashes = []vg.Length{vg.Points(5), vg.Points(3)}
				}
				pl.Add(l)
				switch in.start { // one legend entry per figure and sidecar, and one for its restarts
				case 1:
					pl.Legend.Add(fmt.Sprintf("%s sidecar %d", key, in.proxy), l)
				case 2:
					pl.Legend.Add(fmt.Sprintf("%s sidecar %d restarted", key, in.proxy), l)
				}
			}
		}
		if w := warmUp.Minutes(); ymax > 0 {
			l, err := plotter.NewLine(plotter.XYs{{X: w, Y: 0}, {X: w, Y: ymax}})
			if err == nil {
				l.Color = color.RGBA{0xaa, 0xaa, 0xaa, 0xff}
				l.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
				pl.Add(l)
			}
		}
		pl.Y.Min = 0
		plots[pi/cols][pi%cols] = pl
	}
	canvases := plot.Align(plots, tiles, dc)
	for r := range plots {
		for c := range plots[r] {
			if plots[r][c] != nil {
				plots[r][c].Draw(canvases[r][c])
			}
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
