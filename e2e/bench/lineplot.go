package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"
	"slices"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotLine is one line of a line plot: y against x, drawn solid or dashed.
type plotLine struct {
	Name   string
	Color  color.RGBA
	Dashed bool
	// NoLabels: the points are marked but not labelled with their values.
	NoLabels bool
	X, Y     []float64
}

// writeLinePlot draws lines on shared axes (gonum/plot): x at evenly spaced
// positions (the sorted union of the lines' x values: worker counts), y
// linear from 0. Each point is marked; unless NoLabels, a line's values are
// listed in its legend entry; NaN points are left out (the line breaks
// there).
func writeLinePlot(w io.Writer, title, xName, yName string, lines []plotLine) error {
	var xs []float64
	ymax := 0.0
	for _, l := range lines {
		for i, x := range l.X {
			if !slices.Contains(xs, x) {
				xs = append(xs, x)
			}
			if !math.IsNaN(l.Y[i]) {
				ymax = max(ymax, l.Y[i])
			}
		}
	}
	slices.Sort(xs)
	if len(xs) == 0 || ymax <= 0 {
		return fmt.Errorf("nothing to plot")
	}
	pl := plot.New()
	pl.Title.Text = title
	pl.X.Label.Text = xName
	pl.Y.Label.Text = yName
	pl.Y.Min, pl.Y.Max = 0, niceCeil(ymax)*1.05
	pl.Y.Tick.Marker = shortTicks{}
	pl.X.Min, pl.X.Max = -0.3, float64(len(xs)-1)+0.3
	var ticks []plot.Tick
	for i, x := range xs {
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: fmt.Sprintf("%g", x)})
	}
	pl.X.Tick.Marker = plot.ConstantTicks(ticks)
	pl.Add(plotter.NewGrid())
	pl.Legend.Top, pl.Legend.Left = true, true
	for _, l := range lines {
		var seg plotter.XYs
		var all plotter.XYs
		var labels []string
		flush := func() error {
			if len(seg) > 1 {
				ln, err := plotter.NewLine(seg)
				if err != nil {
					return err
				}
				ln.Color, ln.Width = l.Color, vg.Points(1.5)
				if l.Dashed {
					ln.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
				}
				pl.Add(ln)
			}
			seg = nil
			return nil
		}
		for i, x := range l.X {
			if math.IsNaN(l.Y[i]) {
				if err := flush(); err != nil {
					return err
				}
				continue
			}
			p := plotter.XY{X: float64(slices.Index(xs, x)), Y: l.Y[i]}
			seg, all = append(seg, p), append(all, p)
			labels = append(labels, short(l.Y[i]))
		}
		if err := flush(); err != nil {
			return err
		}
		if len(all) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(all)
		if err != nil {
			return err
		}
		sc.GlyphStyle.Color, sc.GlyphStyle.Shape, sc.GlyphStyle.Radius = l.Color, draw.BoxGlyph{}, vg.Points(3)
		pl.Add(sc)
		entry := &plotter.Line{LineStyle: draw.LineStyle{Color: l.Color, Width: vg.Points(1.5)}}
		if l.Dashed {
			entry.Dashes = []vg.Length{vg.Points(6), vg.Points(4)}
		}
		name := l.Name
		if !l.NoLabels {
			// The values go in the legend, in x order: labels beside the
			// points would overlap where lines meet.
			name += ": " + strings.Join(labels, " / ")
		}
		pl.Legend.Add(name, entry, sc)
	}
	img := vgimg.New(vg.Points(900), vg.Points(560))
	pl.Draw(draw.New(img))
	_, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w)
	return err
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func writeLinePlotFile(path, title, xName, yName string, lines []plotLine) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeLinePlot(f, title, xName, yName, lines); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
