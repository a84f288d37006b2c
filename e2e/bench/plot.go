package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// barGroup is one cluster of two bars of the same unit: A (direct, or
// at-least-once) and B (through the proxy, or transactional).
type barGroup struct {
	Label  string
	A, B   float64
	ALabel string
	BLabel string
}

var (
	colA    = color.RGBA{0x4c, 0x72, 0xb0, 0xff}
	colB    = color.RGBA{0xdd, 0x84, 0x52, 0xff}
	colAxis = color.RGBA{0x90, 0x90, 0x90, 0xff} // reference lines
)

// writePlot draws a bar chart (gonum/plot): one panel per group, since the
// groups have different units, each with its pair of bars on its own axis,
// the bars labelled with their values and B with B as a percentage of A,
// under one title.
func writePlot(w io.Writer, title string, groups []barGroup) error {
	if len(groups) == 0 {
		return fmt.Errorf("nothing to plot")
	}
	const cols = 4
	rows := (len(groups) + cols - 1) / cols
	img := vgimg.New(vg.Points(float64(230*min(cols, len(groups)))), vg.Points(float64(40+260*rows)))
	dc := draw.New(img)
	head := draw.Crop(dc, 0, 0, vg.Points(float64(260*rows)), 0) // the title's strip at the top
	ts := draw.TextStyle{Color: color.Black, Font: plot.DefaultFont, Handler: plot.DefaultTextHandler, XAlign: draw.XCenter, YAlign: draw.YCenter}
	ts.Font.Size = vg.Points(12)
	head.FillText(ts, vg.Point{X: head.Center().X, Y: head.Center().Y}, title)
	body := draw.Crop(dc, 0, 0, 0, -vg.Points(40))
	tiles := draw.Tiles{Rows: rows, Cols: min(cols, len(groups)), PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	plots := make([][]*plot.Plot, rows)
	for i := range plots {
		plots[i] = make([]*plot.Plot, tiles.Cols)
	}
	for i, g := range groups {
		pl, err := barPanel(g)
		if err != nil {
			return err
		}
		plots[i/cols][i%cols] = pl
	}
	canvases := plot.Align(plots, tiles, body)
	for r := range plots {
		for c := range plots[r] {
			if plots[r][c] != nil {
				plots[r][c].Draw(canvases[r][c])
			}
		}
	}
	_, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w)
	return err
}

// barPanel is one group's two bars.
func barPanel(g barGroup) (*plot.Plot, error) {
	pl := plot.New()
	pl.Title.Text = g.Label
	pl.Y.Min = 0
	pl.Y.Max = max(g.A, g.B) * 1.2
	if pl.Y.Max <= 0 || math.IsNaN(pl.Y.Max) {
		pl.Y.Max = 1
	}
	pl.Y.Tick.Marker = shortTicks{}
	var labels []string
	for i, v := range []struct {
		name string
		val  float64
		col  color.RGBA
	}{{g.ALabel, g.A, colA}, {g.BLabel, g.B, colB}} {
		bars, err := plotter.NewBarChart(plotter.Values{v.val}, vg.Points(40))
		if err != nil {
			return nil, err
		}
		bars.Color = v.col
		bars.LineStyle.Width = 0
		bars.XMin = float64(i)
		pl.Add(bars)
		label := short(v.val)
		if i == 1 && g.A > 0 {
			label += fmt.Sprintf(" (%.0f%%)", 100*g.B/g.A)
		}
		lb, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: float64(i), Y: v.val}}, Labels: []string{label}})
		if err != nil {
			return nil, err
		}
		for j := range lb.TextStyle {
			lb.TextStyle[j].XAlign = draw.XCenter
			lb.TextStyle[j].YAlign = draw.YBottom
		}
		pl.Add(lb)
		labels = append(labels, v.name)
	}
	pl.NominalX(labels...)
	pl.X.Min, pl.X.Max = -0.6, 1.6
	return pl, nil
}

// shortTicks are gonum's default ticks labelled like the bars (50k, 1.2M).
type shortTicks struct{}

func (shortTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = short(ts[i].Value)
		}
	}
	return ts
}

func writePlotFile(path, title string, groups []barGroup) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writePlot(f, title, groups); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func short(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}
