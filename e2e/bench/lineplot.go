package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"os"
	"slices"
	"strings"
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

// writeLinePlot draws lines on shared axes: x at evenly spaced positions
// (the sorted union of the lines' x values: worker counts), y linear from
// 0. Each point is marked and labelled with its value. Only the standard
// library, as writePlot.
func writeLinePlot(w io.Writer, title, xName, yName string, lines []plotLine) error {
	const (
		width, plotH  = 1000, 400
		left, right   = 110, 90
		bottom        = 70
		scale         = 2
		marker        = 5
		ticks         = 5
		thick         = 2
		dash, gap     = 10, 6
		row, legendX0 = 22, 110
	)
	titles := wrapText(title, (width-40)/(4*scale))
	legendY := 20 + row*len(titles)
	top := legendY + row*len(lines) + 40
	height := top + plotH + bottom
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
	ymax = niceCeil(ymax)
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	fill(img, img.Bounds(), color.RGBA{0xff, 0xff, 0xff, 0xff})
	for i, t := range titles {
		drawText(img, 20, 12+i*row, t, scale, colText)
	}
	for i, l := range lines { // legend, one line each
		x, y := legendX0, legendY+i*row
		drawSegment(img, x, y+5, x+30, y+5, l.Color, thick+1, l.Dashed, dash, gap)
		drawText(img, x+40, y, l.Name, scale, colText)
	}
	plotW := width - left - right
	px := func(x float64) int {
		if len(xs) == 1 {
			return left + plotW/2
		}
		return left + slices.Index(xs, x)*plotW/(len(xs)-1)
	}
	py := func(y float64) int { return top + plotH - int(float64(plotH)*y/ymax) }
	fill(img, image.Rect(left, top+plotH, left+plotW+1, top+plotH+1), colAxis)
	fill(img, image.Rect(left, top, left+1, top+plotH+1), colAxis)
	for t := 0; t <= ticks; t++ {
		v := ymax * float64(t) / ticks
		y := py(v)
		fill(img, image.Rect(left-6, y, left, y+1), colAxis)
		if t > 0 {
			fill(img, image.Rect(left+1, y, left+plotW, y+1), color.RGBA{0xe8, 0xe8, 0xe8, 0xff})
		}
		s := short(v)
		drawText(img, left-12-textWidth(s, scale), y-5, s, scale, colText)
	}
	for _, x := range xs {
		s := fmt.Sprintf("%g", x)
		drawText(img, px(x)-textWidth(s, scale)/2, top+plotH+10, s, scale, colText)
	}
	drawText(img, left+plotW/2-textWidth(xName, scale)/2, top+plotH+34, xName, scale, colText)
	drawText(img, 10, top-20, yName, scale, colText)
	for _, l := range lines {
		prevOK := false
		var x0, y0 int
		for i := range l.X {
			if math.IsNaN(l.Y[i]) {
				prevOK = false
				continue
			}
			x, y := px(l.X[i]), py(l.Y[i])
			if prevOK {
				drawSegment(img, x0, y0, x, y, l.Color, thick, l.Dashed, dash, gap)
			}
			fill(img, image.Rect(x-marker, y-marker, x+marker+1, y+marker+1), l.Color)
			if !l.NoLabels {
				drawText(img, x+8, y-14, short(l.Y[i]), scale, l.Color)
			}
			x0, y0, prevOK = x, y, true
		}
	}
	return png.Encode(w, img)
}

// wrapText breaks s into lines of at most n characters at spaces.
func wrapText(s string, n int) []string {
	var out []string
	line := ""
	for _, w := range strings.Fields(s) {
		if line != "" && len(line)+1+len(w) > n {
			out = append(out, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return append(out, line)
}

// drawSegment draws a line of the given thickness, dashed when asked.
func drawSegment(img *image.RGBA, x0, y0, x1, y1 int, c color.RGBA, thick int, dashed bool, dash, gap int) {
	dx, dy := float64(x1-x0), float64(y1-y0)
	n := int(math.Max(math.Abs(dx), math.Abs(dy)))
	for i := 0; i <= n; i++ {
		if dashed && i%(dash+gap) >= dash {
			continue
		}
		t := 0.0
		if n > 0 {
			t = float64(i) / float64(n)
		}
		x, y := x0+int(math.Round(dx*t)), y0+int(math.Round(dy*t))
		fill(img, image.Rect(x-thick/2, y-thick/2, x-thick/2+thick, y-thick/2+thick), c)
	}
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
